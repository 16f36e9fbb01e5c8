"""Argument checks shared by elements, the server and the clients: one clear error for each bad value."""

from __future__ import annotations

from .errors import BadArgument, Expired, TemplateMismatch

# The longest timeout, in seconds (a year): NaN, infinity and anything longer are refused (None
# waits for ever), as a deadline past it cannot be turned into a socket or condition timeout.
MAX_TIMEOUT = 365 * 24 * 3600

# What a pattern entry `(1, type name)` may name (see `Element.find`).
PATTERN_TYPES = ("any", "int", "float", "str", "bytes", "bool")


def check_timeout(timeout):
    """The timeout, if it is None or 0 to MAX_TIMEOUT seconds; BadArgument otherwise."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 <= timeout <= MAX_TIMEOUT):
        raise BadArgument(f"timeout must be None (for ever) or 0 to {MAX_TIMEOUT} seconds, got {timeout!r}")
    return timeout


def check_grace(grace) -> float:
    """The grace in seconds, if it is a number above 0 and at most a year; BadArgument otherwise."""
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 < grace <= MAX_TIMEOUT:
        raise BadArgument(f"grace must be a positive number of seconds (at most {MAX_TIMEOUT}), got {grace!r}")
    return float(grace)


def check_index(index) -> None:
    """Expired unless `index` is an integer from 0 (an index below 0 names no tuple that ever was)."""
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise Expired(f"index {index!r} is not valid: indices are integers from 0")


def count_problem(value, what: str) -> str | None:
    """What is wrong with a tuple count such as an element's keep or delta (None: not set), or None."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return None
    return f"{what} must be a positive whole number of tuples, got {value!r}"


# An element's keep discards and never blocks, its delta blocks moves: it has at most one of them.
BOTH_BOUNDS = ("both keep and delta are set; keep discards old tuples and never blocks, delta blocks moves: "
               "keep only one")


def bound_problems(keep, delta) -> list[tuple[str, str]]:
    """The one rule of an element's bounds, for pastset and for pathmaps: (`keep` or `delta`, what
    is wrong) for each that is neither None nor a positive whole number of tuples, and for both set."""
    problems = [(what, problem) for what, problem in (("keep", count_problem(keep, "keep")),
                                                      ("delta", count_problem(delta, "delta"))) if problem]
    if keep is not None and delta is not None:
        problems.append(("delta", BOTH_BOUNDS))
    return problems


def check_bounds(keep, delta) -> None:
    """BadArgument, saying what to do, unless `bound_problems(keep, delta)` finds nothing."""
    problems = bound_problems(keep, delta)
    if problems:
        what, problem = problems[0]
        raise BadArgument(problem if problem is BOTH_BOUNDS else f"{problem}; give one, or None for no {what}")


def check_pattern(pattern, template) -> tuple:
    """A Linda pattern for `template` as a tuple of (kind, value) pairs; TemplateMismatch naming the
    entry that is not `(0, value)` or `(1, type name)`."""
    if not isinstance(pattern, (list, tuple)) or len(pattern) != len(template.fields):
        raise TemplateMismatch(f"a pattern needs {len(template.fields)} entries for {template}")
    checked = []
    for i, entry in enumerate(pattern):
        if not isinstance(entry, (list, tuple)) or len(entry) != 2 or entry[0] not in (0, 1):
            raise TemplateMismatch(f"pattern entry {i}: expected (0, value) or (1, type name), got {entry!r}")
        kind, value = entry
        if kind == 1 and value not in PATTERN_TYPES:
            raise TemplateMismatch(f"pattern entry {i}: unknown type {value!r}")
        checked.append((kind, value))
    return tuple(checked)
