"""`eventspace mpirun -n N [options] prog.py ARGS`: an mpi4py program under mpiexec, every rank monitored."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from .launch import EXTRA_HINT, UsageError, add_options, mpi4py_installed, parse


def register(subparsers) -> None:
    run = subparsers.add_parser(
        "mpirun", help="run an unmodified mpi4py program under mpiexec, every rank a monitored node",
        usage="eventspace mpirun -n N [options] (prog.py | -m module) [args...]",
        description="Runs `mpiexec -n N python -m eventspace.mpi [options] PROGRAM`: the program runs as "
                    "`python prog.py` would, and monitors attach to the run by its name "
                    "(eventspace space ls NAME, eventspace monitor heartbeat --run NAME, ...).")
    run.add_argument("-n", "-np", dest="ranks", type=int, required=True, help="how many ranks")
    add_options(run)
    run.add_argument("--mpiexec", help="the mpiexec to use (default: the one next to this Python, which "
                                       "the mpi extra installs, else the first on PATH)")
    run.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE [ARGS]",
                     help="run a module, as python -m does")
    run.add_argument("program", nargs=argparse.REMAINDER, metavar="prog.py [ARGS]", help="the script and its arguments")
    run.set_defaults(func=_mpirun)


def find_mpiexec(given: str | None = None) -> str:
    """The mpiexec to start ranks with; LookupError naming the extra when there is none."""
    if given is not None:
        if shutil.which(given) is None:
            raise LookupError(f"no mpiexec at {given}; {EXTRA_HINT} installs one next to Python")
        return shutil.which(given)
    beside = Path(sys.executable).parent / "mpiexec"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        raise LookupError(f"no mpiexec next to {sys.executable} or on PATH; {EXTRA_HINT}")
    return found


def command(args) -> list[str]:
    """The mpiexec command line for parsed `eventspace mpirun` arguments. UsageError, or
    LookupError (naming the extra) when mpiexec or mpi4py is missing."""
    program = ["-m", *args.module] if args.module else list(args.program)
    if args.ranks < 1:
        raise UsageError(f"-n {args.ranks}: give at least one rank")
    ours = []
    for flag, value in (("--name", args.name), ("--archive", args.archive), ("--topology", args.topology)):
        if value is not None:
            ours += [flag, value]
    ours += ["--instrument", args.instrument, "--keep", str(args.keep), "--max-communicators",
             str(args.max_communicators)] + (["--insecure"] if args.insecure else [])
    options, _ = parse([*ours, *program])          # the ranks' own check, once, here
    if options.topology is not None:
        from .topology import Topology
        Topology.load(options.topology)             # one clear error before any rank starts
    mpiexec = find_mpiexec(args.mpiexec)
    if not mpi4py_installed():
        raise LookupError(f"mpi4py is not installed for {sys.executable}; {EXTRA_HINT}")
    return [mpiexec, "-n", str(args.ranks), sys.executable, "-m", "eventspace.mpi", *ours, *program]


def _mpirun(args) -> int:
    cmd = command(args)
    sys.stdout.flush()
    sys.stderr.flush()
    # Replaced, not a child: stdin, signals and the exit status are mpiexec's own.
    os.execv(cmd[0], cmd)
