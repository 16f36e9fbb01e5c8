"""`eventspace mpirun -n N [options] prog.py ARGS`: an mpi4py program under mpiexec, every rank monitored."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .launch import EXTRA_HINT, UsageError, add_options, add_program, mpi4py_installed, parse, program_of


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
    add_program(run)
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


def command(args) -> tuple[list[str], str]:
    """The mpiexec command line for parsed `eventspace mpirun` arguments, and the name the run asks
    for. UsageError, or LookupError (naming the extra) when mpiexec or mpi4py is missing."""
    if args.ranks < 1:
        raise UsageError(f"-n {args.ranks}: give at least one rank")
    program = program_of(args)
    ours = []
    for flag, value in (("--name", args.name), ("--archive", args.archive), ("--record", args.record),
                        ("--topology", args.topology)):
        if value is not None:
            ours += [flag, value]
    ours += ["--instrument", args.instrument, "--keep", str(args.keep), "--max-communicators",
             str(args.max_communicators)] + (["--insecure"] if args.insecure else [])
    # "--": whatever the program is called, the ranks read it as the program, not as an option of ours.
    ranks_argv = [*ours, "--", *program]
    options, _ = parse(ranks_argv)                 # the ranks' own check, once, here
    if options.topology is not None:
        from .topology import Topology
        Topology.load(options.topology)             # one clear error before any rank starts
    mpiexec = find_mpiexec(args.mpiexec)
    if not mpi4py_installed():
        raise LookupError(f"mpi4py is not installed for {sys.executable}; {EXTRA_HINT}")
    return ([mpiexec, "-n", str(args.ranks), sys.executable, "-m", "eventspace.mpi", *ranks_argv],
            options.name or options.default_name)


def _mpirun(args) -> int:
    """Run the job under mpiexec to its end, whichever end it comes to, and then remove its run file
    if rank 0 could not (MPI's abort, a rank killed, a second Ctrl-C end rank 0 with SIGKILL).

    mpiexec is a child that has this process's stdin, stdout and stderr; its exit status is the
    command's (128 + N if signal N ended it). Ctrl-C reaches mpiexec from the terminal as it reaches
    this process, which waits on; SIGTERM and SIGHUP sent to this process alone are passed on.
    """
    cmd, name = command(args)
    directory = _recording_directory(args, name)
    if directory is not None:   # the ranks record here; built into the archive by rank 0, or below
        cmd[cmd.index("eventspace.mpi") + 1:cmd.index("eventspace.mpi") + 1] = ["--recording-dir", directory]
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.time()
    signalled = []
    # Handlers in Python, not SIG_IGN: mpiexec starts with the default ones (exec resets them).
    signal.signal(signal.SIGINT, lambda *_: signalled.append("Ctrl-C"))

    def forward(signum, _):
        signalled.append(signal.Signals(signum).name)
        job.send_signal(signum)

    job = subprocess.Popen(cmd)
    for forwarded in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(forwarded, forward)
    status = job.wait()
    if status != 0:   # rank 0 removes the run's files when the job ends normally; otherwise, this process does
        from paths import runfile

        try:
            removed = runfile.remove_ended(name, started)
        except runfile.RunError:   # a run directory the ranks refused: they said so
            removed = []
        for run in removed:
            print(f"eventspace mpirun: removed the run file of {run.name}: its ranks have ended", file=sys.stderr)
    if directory is not None:
        from .record import build_after_job

        how = f"mpiexec ended with status {status}" + (f" after {', '.join(dict.fromkeys(signalled))}"
                                                       if signalled else "")
        build_after_job(directory, args.archive, how,
                        lambda line: print(f"eventspace mpirun: {line}", file=sys.stderr, flush=True))
    return status if status >= 0 else 128 - status


def _recording_directory(args, name: str) -> str | None:
    """With --archive, a new recording directory in the run directory, for the ranks to record into
    (None without, or where the run directory is refused: then rank 0 says why)."""
    if args.archive is None:
        return None
    from paths import rundir

    from ..recording import new_directory

    try:
        return str(new_directory(rundir.prepare(), name))
    except (rundir.RunError, OSError):
        return None
