"""Waiting in the tests: `until(condition)` polls for what a test awaits, and says what it was
when it never came. The one way the tests wait for something (a sleep stays only where the time
itself is under test: "nothing arrives within 0.3 s", or a program's pacing).

Plain standard library, so that anything may import it: every test package (tests/ is on their
path), and the programs that tests/mpi/programs run inside mpiexec ranks (which append tests/ to
theirs)."""

from __future__ import annotations

import inspect
import time

# The first look is at once; then the pause doubles from FIRST_PAUSE up to MOST_PAUSE (s): a quick
# condition is seen within a millisecond or two, a slow one is not asked more than ten times a second.
FIRST_PAUSE = 0.001
MOST_PAUSE = 0.1


def until(condition, timeout: float = 30.0, what: str | None = None, ignoring=(), holds=bool):
    """Call `condition()` until `holds` its value (by default, until the value is truthy), and return
    that value.

    `timeout` (s) bounds the wait: past it, AssertionError naming `what` was awaited (by default,
    the condition's source) and the last value the condition returned (`holds` lets a condition
    return what it saw, a screen or a monitor's report, for that message). Exceptions of the types in
    `ignoring` mean "not yet" (the last one is named if it never comes); any other, an AssertionError
    of a check inside the condition included, ends the wait at once.
    """
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE
    while True:
        try:
            last = condition()
        except ignoring as exc:
            last = exc
        else:
            if holds(last):
                return last
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"waited {timeout:g} s for {what or _source(condition)}; "
                                 f"the last look gave {_short(last)}")
        time.sleep(min(pause, left))
        pause = min(pause * 2, MOST_PAUSE)


def _source(condition) -> str:
    """The text of `condition` (a lambda's own line), for a message that says what was awaited."""
    try:
        return " ".join(inspect.getsource(condition).split())
    except (OSError, TypeError):
        return repr(condition)


def _short(value, most: int = 500) -> str:
    text = repr(value)
    return text if len(text) <= most else text[:most] + f"... ({len(text)} characters)"
