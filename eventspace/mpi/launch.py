"""`python -m eventspace.mpi [options] prog.py ARGS` (or `-m module ARGS`): run an mpi4py program as `python prog.py` would, monitored.

Under any launcher (mpiexec, srun), on every rank: the program runs in this process as
`python prog.py` / `python -m module` runs it (sys.argv, `__main__`, sys.path[0] = the
script's folder), following `python -m mpi4py`'s conventions. When the program imports
mpi4py.MPI and MPI is initialized, the rank becomes a PATHS node (eventspace.mpi.rank) and
COMM_WORLD is traced, before the import returns to the program. An unhandled exception prints its
traceback and one line naming the rank, and aborts the job (MPI_Abort), as `python -m mpi4py`
does; SystemExit ends the run normally with the program's exit status.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from .options import DEFAULT_KEEP, INSTRUMENT, MAX_COMMUNICATORS, Options

# Seconds a failing rank waits, its output written, before it aborts the job (see _abort_job).
_FORWARD_GRACE = 0.2

EXTRA_HINT = "pip install 'eventspace[mpi]'"
# What launchers say a process's rank is, before MPI is up (for messages printed once).
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


class UsageError(ValueError):
    """A command line that does not say what to run, or how."""


class RankTerminated(BaseException):
    """SIGTERM reached this rank (a launcher's, or Slurm's, way to end a job): raised in the
    program where it is, as Ctrl-C raises KeyboardInterrupt, so that the rank ends as an
    interrupted one does (its recording closed, the job aborted)."""


def _terminated(signum, frame):
    _Unblock.heard.add(signum)
    raise RankTerminated()


def _interrupted(signum, frame):
    _Unblock.heard.add(signum)
    raise KeyboardInterrupt


class _Unblock:
    """Ends a rank that Ctrl-C or SIGTERM cannot reach. Python runs a signal's handler in the main
    thread between two bytecodes, so a rank blocked in a C call (an MPI receive nobody sends, a
    collective a rank never joins: a hang, which is when users press Ctrl-C) never ran it, and
    mpiexec waited on it for good. The C-level handler also writes the signal's number to a pipe
    (signal.set_wakeup_fd); a thread reads it, and if the handler has not run `GRACE` seconds later
    (it records that it ran in `heard`), ends the rank from that thread as the handler would have:
    `end(status, why)` (its recording closed, the job aborted). Only while the handlers are still
    ours: a program that installed its own handles its signals itself."""

    GRACE = 2.0
    heard: set = set()
    HANDLERS = {signal.SIGINT: (_interrupted, 130, "Ctrl-C (SIGINT)"),
                signal.SIGTERM: (_terminated, 143, "SIGTERM")}

    @classmethod
    def install(cls, end) -> None:
        ours = [s for s in cls.HANDLERS if signal.getsignal(s) in (signal.SIG_DFL, signal.default_int_handler)]
        if not ours:
            return
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except ValueError:   # not the main thread: nothing to watch from
            os.close(read)
            os.close(write)
            return
        for s in ours:
            signal.signal(s, cls.HANDLERS[s][0])
        threading.Thread(target=cls._watch, args=(read, end), name="eventspace-unblock", daemon=True).start()

    @classmethod
    def _watch(cls, read: int, end) -> None:
        while True:
            try:
                data = os.read(read, 64)
            except OSError:
                return
            if not data:
                return
            for signum in set(data):
                if signum not in cls.HANDLERS or signal.getsignal(signum) is not cls.HANDLERS[signum][0]:
                    continue
                deadline = time.monotonic() + cls.GRACE
                while signum not in cls.heard and time.monotonic() < deadline:
                    time.sleep(0.05)
                if signum not in cls.heard:   # the main thread is in a C call it does not leave
                    _, status, why = cls.HANDLERS[signum]
                    end(status, f"{why}, while blocked in a call that never returned")


def add_options(parser: argparse.ArgumentParser) -> None:
    """The monitoring options (shared by `python -m eventspace.mpi` and `eventspace mpirun`)."""
    parser.add_argument("--name", help="the run's name, which monitors attach to (default: the script's "
                                       "stem, or the module's name; a free variant if a live run has it)")
    parser.add_argument("--archive", metavar="F.sqlite",
                        help="record every event (each rank into a file of its own, in blocks) and build this "
                             "new SQLite archive from them when the run ends (`eventspace archive query|export` "
                             "read it)")
    parser.add_argument("--record", metavar="last:30s|last:64MiB",
                        help="a flight recorder: keep only the last seconds or bytes of events on each rank, "
                             "dumped to an archive by `eventspace dump --run NAME`, at a deadlock the heartbeat "
                             "finds, and when a rank raises or the job aborts")
    parser.add_argument("--instrument", choices=INSTRUMENT, default="all",
                        help="which calls to collect: all, p2p (point-to-point and completions), "
                             "collectives, none (default %(default)s)")
    parser.add_argument("--topology", metavar="T.yaml", help="which cluster (switch) each host is on "
                                                             "(clusters: {rack1: [node01, node02]})")
    parser.add_argument("--keep", type=int, default=DEFAULT_KEEP,
                        help="records each trace element keeps for monitors (default %(default)s)")
    parser.add_argument("--max-communicators", type=int, default=MAX_COMMUNICATORS, metavar="N",
                        help="trace COMM_WORLD and the first communicators the program makes, N in all; later "
                             "ones run untraced (each one declared makes the next one dearer; default %(default)s)")
    parser.add_argument("--insecure", action="store_true",
                        help="serve plaintext on non-loopback addresses (ranks on several hosts, no CURVE keys)")
    parser.add_argument("--recording-dir", help=argparse.SUPPRESS)   # eventspace mpirun's, for --archive
    parser.add_argument("--spawned", type=int, metavar="ROOT", help=argparse.SUPPRESS)   # spawned_command's


def add_program(parser: argparse.ArgumentParser) -> None:
    """The program to run and its own arguments, everything after our options (argparse.REMAINDER:
    the program's options are its own, even where they share a name with ours); `program_of` reads it."""
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE [ARGS]",
                        help="run a module, as python -m does")
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="prog.py [ARGS]",
                        help="the script and its arguments")


def program_of(args) -> list[str]:
    """The program `add_program`'s arguments name: [script, args...] or ['-m', module, args...] (a
    leading `--`, which ends our options, left out). UsageError if none is named."""
    program = ["-m", *args.module] if args.module is not None else list(args.program)
    if program[:1] == ["--"]:
        program = program[1:]
    if not program or program == ["-m"]:
        raise UsageError("name the program to run: prog.py [ARGS...] or -m MODULE [ARGS...]")
    return program


def parse(argv: list[str]):
    """(Options, program argv) from `python -m eventspace.mpi`'s command line."""
    parser = argparse.ArgumentParser(prog="python -m eventspace.mpi", add_help=True,
                                     usage="python -m eventspace.mpi [options] (prog.py | -m module) [args...]")
    add_options(parser)
    add_program(parser)
    args = parser.parse_args(argv)
    program = program_of(args)
    if args.keep < 1:
        raise UsageError(f"--keep {args.keep}: give a positive number of records")
    if args.max_communicators < 1:
        raise UsageError(f"--max-communicators {args.max_communicators}: give a positive number (COMM_WORLD counts)")
    if args.archive is not None and args.record is not None:
        raise UsageError("--archive records every event and --record only the last ones: give one of them")
    if args.record is not None:
        from ..recorder import Spec

        try:
            Spec.parse(args.record)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    default = program[1] if program[0] == "-m" else Path(program[0]).stem
    return Options(default_name=default, name=args.name, archive=args.archive, instrument=args.instrument,
                   topology=args.topology, keep=args.keep, insecure=args.insecure,
                   max_communicators=args.max_communicators, record=args.record,
                   recording_dir=args.recording_dir, spawned=args.spawned), program


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        options, program = parse(argv)
    except UsageError as exc:
        print(f"python -m eventspace.mpi: {exc}", file=sys.stderr)
        return 2
    if not mpi4py_installed():
        if _first_rank():
            print(f"eventspace.mpi: mpi4py is not installed; {EXTRA_HINT}", file=sys.stderr)
        return 2
    monitor = RankHost(options)
    monitor.watch_import()
    _Unblock.install(monitor.end_blocked)
    return monitor.run(program)


def mpi4py_installed() -> bool:
    """Whether mpi4py imports here (its package only: MPI is not initialized by this)."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def _first_rank() -> bool:
    """True on the process a launcher calls rank 0 (or when no launcher says)."""
    for name in RANK_VARIABLES:
        if name in os.environ:
            return os.environ[name] == "0"
    return True


class RankHost:
    """Runs the program in this process and turns the rank into a node once MPI is up."""

    def __init__(self, options):
        self.options = options
        self.rank = None            # eventspace.mpi.rank.Rank once started
        self.imported = False       # the program imported mpi4py.MPI

    # -- the moment MPI is there -----------------------------------------------------------------

    def watch_import(self) -> None:
        if "mpi4py.MPI" in sys.modules:
            self._loaded(sys.modules["mpi4py.MPI"])
        else:
            sys.meta_path.insert(0, _MPIFinder(self._loaded))

    def _loaded(self, mpi) -> None:
        self.imported = True
        if mpi.Is_initialized():
            self._start(mpi)
            return
        # The program initializes MPI itself (mpi4py.rc.initialize = False): start after it does.
        for name in ("Init", "Init_thread"):
            original = getattr(mpi, name)

            def init(*args, _original=original, **kwargs):
                result = _original(*args, **kwargs)
                self._start(mpi)
                return result

            setattr(mpi, name, init)

    def _start(self, mpi) -> None:
        from . import interpose
        from .rank import Rank, RunRefused, say

        try:
            rank = Rank(mpi, self.options)
        except RunRefused as exc:
            if mpi.COMM_WORLD.Get_rank() == 0:
                say(str(exc).replace("\n", "; "))
            raise SystemExit(2) from None
        except Exception as exc:  # a rank that cannot start must not leave the others waiting
            say(f"rank {mpi.COMM_WORLD.Get_rank()} could not start monitoring: {type(exc).__name__}: {exc}")
            _abort_job(mpi, 2)
            raise SystemExit(2) from None   # Abort may return before the launcher ends this process
        world = interpose.traced_instance(mpi.COMM_WORLD, mpi.Intracomm)
        cid, members = rank.world_communicator()
        if cid is not None:
            rank.trace(world, cid, members)
        parent = None if rank.parent is None else rank.adopt(mpi.Comm.Get_parent(), "Spawn", None)
        interpose.install(world, rank.adopt, rank.finish, rank.space.compiled,
                          aborting=lambda code: rank.abandon(f"{rank.who} called MPI_Abort (error code {code})"),
                          adopt_posted=rank.adopt_posted, spawn=rank.spawn, parent=parent,
                          adopt_window=rank.adopt_window)
        self.rank = rank

    # -- running -------------------------------------------------------------------------------

    def run(self, program: list[str]) -> int:
        """Run the program; its exit status (an unhandled exception aborts the MPI job)."""
        try:
            _run_program(program)
        except SystemExit:
            self._end()
            raise
        except KeyboardInterrupt:
            self._abort(130, None, "Ctrl-C (SIGINT)")
        except RankTerminated:
            self._abort(143, None, "SIGTERM")
        except BaseException as exc:
            self._abort(1, exc)
        self._end()
        return 0

    def end_blocked(self, status: int, why: str) -> None:
        """End this rank from another thread while its program is blocked in a C call (_Unblock):
        as _abort does, then at once, whatever the call does."""
        if _first_rank():
            print(f"eventspace.mpi: {why}: aborting the MPI job", file=sys.stderr, flush=True)
        try:
            self._abort(status, None, why)
        except SystemExit:
            pass
        sys.stderr.flush()
        os._exit(status)

    def _end(self) -> None:
        if self.rank is not None:
            self.rank.finish()
        elif not self.imported and _first_rank():
            print("eventspace.mpi: the program never imported mpi4py.MPI: no MPI calls were collected",
                  file=sys.stderr)

    def _abort(self, status: int, exc: BaseException | None, why: str = "") -> None:
        mpi = sys.modules.get("mpi4py.MPI")
        live = mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()
        rank = mpi.COMM_WORLD.Get_rank() if live else None
        if exc is not None:
            from paths.stack import traceback_frames, where

            traceback.print_exception(type(exc), exc, _program_frames(exc.__traceback__))
            who = self.rank.who if self.rank is not None else f"rank {rank}" if rank is not None else "the program"
            at = where(traceback_frames(exc.__traceback__))
            print(f"eventspace.mpi: {who} raised {type(exc).__name__}: {exc}{f' at {at}' if at else ''}; "
                  "aborting the MPI job", file=sys.stderr, flush=True)
            why = f"{who} raised {type(exc).__name__}: {exc}"
        elif rank is not None:
            why = f"{self.rank.who if self.rank is not None else f'rank {rank}'}: {why}"
        if self.rank is not None:
            # Its recording is closed, the others' written out (a flight recorder's dumped), and rank 0's
            # run file goes now: MPI's abort ends the other ranks with SIGKILL.
            self.rank.abandon(why)
        if live:
            _abort_job(mpi, status)   # it flushes both streams first
        raise SystemExit(status)


def _abort_job(mpi, status: int) -> None:
    """MPI_Abort, once the launcher has had a moment to forward what this rank just wrote: it
    reads a rank's output through a pipe it stops reading when the abort reaches it (the lines
    naming the failing rank were lost about one run in six)."""
    sys.stderr.flush()
    sys.stdout.flush()
    time.sleep(_FORWARD_GRACE)
    mpi.COMM_WORLD.Abort(status)


def _run_program(program: list[str]) -> None:
    """As `python -m mpi4py` runs a script or a module."""
    if program[0] == "-m":
        sys.argv[:] = program[1:]
        runpy.run_module(program[1], run_name="__main__", alter_sys=True)
        return
    sys.argv[:] = program
    if not getattr(sys.flags, "isolated", 0):
        sys.path[0] = os.path.realpath(os.path.dirname(program[0]))
    runpy.run_path(program[0], run_name="__main__")


def _program_frames(tb):
    """The traceback from the program's first frame on (ours and runpy's left out)."""
    skip = {__name__, "runpy", "eventspace.mpi.__main__"}
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_globals.get("__name__") in skip:
        tb = tb.tb_next
    return tb


class _MPIFinder(importlib.abc.MetaPathFinder):
    """Finds mpi4py.MPI as the other finders do, with a loader that calls `loaded(module)` once
    the module is ready (MPI initialized), before the import returns to the program."""

    def __init__(self, loaded):
        self.loaded = loaded

    def find_spec(self, name, path, target=None):
        if name != "mpi4py.MPI":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Then(spec.loader, self.loaded)
        return spec


class _Then(importlib.abc.Loader):
    def __init__(self, inner, then):
        self.inner, self.then = inner, then

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        self.then(module)
