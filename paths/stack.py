"""Where a thread is: its Python stack and its CPU time, read inside its own process when someone asks."""

from __future__ import annotations

import faulthandler
import os
import re
import sys
import sysconfig
import tempfile
from dataclasses import dataclass

DEPTH = 40   # frames kept of a stack, the innermost; a deeper one says how many outer frames it left out

# Packages whose frames are not the program's own: ours, MPI's and the machinery that runs a program.
# A thread's `where` is its innermost frame outside them and outside the standard library.
NOT_THE_PROGRAM = frozenset({"pastset", "paths", "eventspace", "monitors", "mpi4py", "zmq", "msgpack", "_pytest",
                             "pytest", "pluggy"})

# Where their frames' files are: our packages' directories, the standard library's, and those
# packages' directories wherever they are installed (site-packages).
_OURS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), package) + os.sep
              for package in ("pastset", "paths", "eventspace", "monitors"))
# The collectors' pure-Python code (eventspace's collector, the MPI calls' and their requests'): a
# shown stack leaves its frames out at the innermost end, where the compiled collector has none.
_COLLECTORS = frozenset(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), *file)
                        for file in (("eventspace", "collector.py"), ("eventspace", "mpi", "collector.py"),
                                     ("eventspace", "mpi", "interpose.py")))
_STDLIB = tuple({os.path.join(sysconfig.get_paths()[key], "") for key in ("stdlib", "platstdlib")})
_INSTALLED = tuple(f"{os.sep}{where}{os.sep}{package}{os.sep}" for where in ("site-packages", "dist-packages")
                   for package in NOT_THE_PROGRAM)


@dataclass(frozen=True)
class StackFrame:
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
        """Whether this frame is the program's own code (not ours, not MPI's, not the standard library),
        told by its file (and by its module where known)."""
        top = self.module.partition(".")[0]
        if top in NOT_THE_PROGRAM or (top and top in sys.stdlib_module_names and top != "__main__"):
            return False
        file = self.file
        stdlib = file.startswith(_STDLIB) and f"{os.sep}site-packages{os.sep}" not in file
        return not (file.startswith("<") or file.startswith(_OURS) or stdlib or any(p in file for p in _INSTALLED))

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
    frames: tuple[StackFrame, ...] = ()
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
                   tuple(StackFrame(str(f), int(n), str(fn), str(m)) for f, n, fn, m in frames),
                   int(omitted), failed, stopped)


def where(frames) -> str:
    """The innermost of `frames` (outermost first) that is the program's own, as `file.py:123 in func`."""
    for frame in reversed(frames):
        if frame.is_program:
            return frame.text
    return ""


def from_the_program(frames) -> tuple:
    """`frames` (outermost first) from the program's outermost frame of its own on: what ran the program
    (a thread's start, runpy, eventspace.mpi's launcher) left out, all of them if none is the
    program's; and without the pure-Python collector's frames at the innermost end."""
    end = len(frames)
    while end and frames[end - 1].file in _COLLECTORS:
        end -= 1
    frames = tuple(frames[:end])
    for i, frame in enumerate(frames):
        if frame.is_program:
            return frames[i:]
    return frames


def traceback_frames(tb, depth: int = DEPTH) -> list[StackFrame]:
    """The frames of a traceback, outermost first (the innermost `depth`)."""
    found = []
    while tb is not None:
        found.append(_frame(tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return found[-depth:]


def _frame(frame, line: int) -> StackFrame:
    code = frame.f_code
    return StackFrame(code.co_filename, line or 0, code.co_name, str(frame.f_globals.get("__name__", "")))


def cpu_ns(native_id: int | None) -> int | None:
    """The CPU time (ns) that thread `native_id` of this process (its kernel thread id) has run; None if
    it is gone or the kernel does not say. Read from /proc (schedstat's time on a CPU): asking the
    thread's own CPU clock (pthread_getcpuclockid) of a thread that may have just ended is undefined."""
    if native_id is None:
        return None
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_threads(idents: dict[str, tuple[int, int | None]], stacks: bool = True, depth: int = DEPTH) -> dict[str, list]:
    """{thread: wire form of its ThreadState's live part} for the threads `idents` names ({thread:
    (Python thread ident, kernel thread id)}), as the process sees them now: CPU time, and with
    `stacks` the stack, at most `depth` frames, the innermost. Nothing is captured before this call,
    so it costs nothing until asked."""
    current = _all_stacks() if stacks else {}
    out = {}
    for thread, (ident, native_id) in idents.items():
        cpu = cpu_ns(native_id)
        frames = current.get(ident, [])
        kept = frames[-depth:]
        out[thread] = [-1 if cpu is None else cpu, [f.wire() for f in kept], len(frames) - len(kept), None, None]
    return out


_THREAD = re.compile(rb"^(?:Current thread|Thread) (0x[0-9a-fA-F]+) ")
_FRAME = re.compile(rb'^  File "(.*)", line (\d+) in (.*)$')


def _all_stacks() -> dict[int, list[StackFrame]]:
    """{Python thread ident: its frames, outermost first} of every thread of this process, as
    faulthandler writes them: in C, holding the GIL throughout, from the interpreter's own frames.
    Reading other threads' frame objects from Python (sys._current_frames, then f_back) can crash
    CPython 3.11 when a thread pops a frame meanwhile (cpython#111363); this cannot. faulthandler
    keeps at most 100 frames a thread, and 500 characters of a name."""
    with tempfile.TemporaryFile() as out:
        faulthandler.dump_traceback(out, all_threads=True)
        out.seek(0)
        text = out.read()
    stacks: dict[int, list[StackFrame]] = {}
    frames: list[StackFrame] | None = None
    for line in text.splitlines():
        head = _THREAD.match(line)
        if head:
            frames = stacks.setdefault(int(head.group(1), 16), [])
            continue
        frame = _FRAME.match(line)
        if frame and frames is not None:
            file, number, function = frame.groups()
            frames.insert(0, StackFrame(file.decode("utf-8", "replace"), int(number),
                                   function.decode("utf-8", "replace"), ""))
    return stacks
