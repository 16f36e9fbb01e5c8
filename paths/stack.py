"""Where a thread is: its Python stack and its CPU time, read inside its own process when someone asks."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

DEPTH = 40   # frames kept of a stack, the innermost; a deeper one says how many outer frames it left out

# Top-level modules whose frames are not the program's own: ours, MPI's and the machinery that runs a
# program. A thread's `where` is its innermost frame outside them and outside the standard library.
NOT_THE_PROGRAM = frozenset({"pastset", "paths", "eventspace", "monitors", "mpi4py", "zmq", "msgpack", "runpy",
                             "importlib", "_pytest", "pytest", "pluggy"})


# Where our packages live: a frame of theirs runs as `__main__` too (`python -m eventspace.mpi`).
_OURS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), package) + os.sep
              for package in ("pastset", "paths", "eventspace", "monitors"))


@dataclass(frozen=True)
class Frame:
    """One frame of a stack: file, line, function, and the module it runs in (`__name__`)."""

    file: str
    line: int
    function: str
    module: str

    @property
    def text(self) -> str:
        """`heat.py:88 in exchange`."""
        return f"{os.path.basename(self.file)}:{self.line} in {self.function}"

    @property
    def is_program(self) -> bool:
        """Whether this frame is the program's own code (not ours, not MPI's, not the standard library)."""
        top = self.module.partition(".")[0]
        return (top not in NOT_THE_PROGRAM and top not in sys.stdlib_module_names and not self.file.startswith("<")
                and not self.file.startswith(_OURS))

    def wire(self) -> list:
        return [self.file, self.line, self.function, self.module]


@dataclass(frozen=True)
class ThreadState:
    """An application thread as its node saw it when asked: the CPU time it has used (ns, user and
    system; None once it ended), its stack (outermost frame first; empty when not asked for) and how
    many outer frames the depth left out, and for a thread that ended by raising, `failed` (`error
    class: message`) and the frames of its traceback. `stopped` says why a thread was stopped when
    another failed."""

    thread: str
    node: str
    cpu_ns: int | None
    frames: tuple[Frame, ...] = ()
    omitted: int = 0
    failed: str | None = None
    stopped: str | None = None

    @property
    def where(self) -> str:
        """Its innermost frame of the program's own code, as `file.py:123 in func` ("" if none)."""
        return where(self.frames)

    @classmethod
    def from_wire(cls, thread: str, node: str, data) -> ThreadState:
        cpu, frames, omitted, failed, stopped = data
        return cls(thread, node, None if cpu < 0 else int(cpu),
                   tuple(Frame(str(f), int(n), str(fn), str(m)) for f, n, fn, m in frames),
                   int(omitted), failed, stopped)


def where(frames) -> str:
    """The innermost of `frames` (outermost first) that is the program's own, as `file.py:123 in func`."""
    for frame in reversed(frames):
        if frame.is_program:
            return frame.text
    return ""


def from_the_program(frames) -> tuple:
    """`frames` (outermost first) from the program's outermost frame of its own on: what ran the program
    (a thread's start, runpy, eventspace.mpi's launcher) left out; all of them if none is the program's."""
    for i, frame in enumerate(frames):
        if frame.is_program:
            return tuple(frames[i:])
    return tuple(frames)


def frames_of(frame, depth: int = DEPTH) -> tuple[list[Frame], int]:
    """The stack from `frame` (a Python frame object) outwards, outermost first: at most `depth`
    frames, the innermost ones, and how many outer frames were left out."""
    found = []
    while frame is not None:
        found.append(frame)
        frame = frame.f_back
    kept = found[:depth]
    return [_frame(f, f.f_lineno) for f in reversed(kept)], len(found) - len(kept)


def traceback_frames(tb, depth: int = DEPTH) -> list[Frame]:
    """The frames of a traceback, outermost first (the innermost `depth`)."""
    found = []
    while tb is not None:
        found.append(_frame(tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return found[-depth:]


def _frame(frame, line: int) -> Frame:
    code = frame.f_code
    return Frame(code.co_filename, line or 0, code.co_name, str(frame.f_globals.get("__name__", "")))


def cpu_ns(ident: int) -> int | None:
    """The CPU time (ns, user + system) that the live thread `ident` has used; None if it is gone."""
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(ident))
    except (OSError, ValueError, AttributeError):   # ended, or not a POSIX thread clock here
        return None


def read_threads(idents: dict[str, int], stacks: bool = True, depth: int = DEPTH) -> dict[str, list]:
    """{thread: wire form of its ThreadState's live part} for the threads `idents` names ({thread:
    Python thread ident}), as the process sees them now: CPU time, and with `stacks` the stack
    (`sys._current_frames`: nothing is captured before this call, so it costs nothing until asked)."""
    current = sys._current_frames() if stacks else {}
    out = {}
    for thread, ident in idents.items():
        cpu = cpu_ns(ident)
        frames, omitted = frames_of(current.get(ident), depth) if stacks else ([], 0)
        out[thread] = [-1 if cpu is None else cpu, [f.wire() for f in frames], omitted, None, None]
    return out
