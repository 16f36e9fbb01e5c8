"""`eventspace mpirun -n N [options] prog.py ARGS`: an mpi4py program under mpiexec, every rank monitored."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

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
    run.add_argument("--mpiexec", help="the mpiexec to use (default: the one of the MPI library mpi4py runs on, "
                                       "MPICH's or Open MPI's: beside it, else next to this Python, else the first "
                                       "on PATH that is that MPI's)")
    add_program(run)
    run.set_defaults(func=_mpirun)


def command(args) -> tuple[list[str], str]:
    """The mpiexec command line for parsed `eventspace mpirun` arguments, and the name the run asks
    for: the mpiexec of the MPI library mpi4py runs on (eventspace.mpi.library), with what that
    MPI's launcher needs to start N ranks as Hydra would (paths.mpiexec.launcher_options: Open MPI's
    --oversubscribe). UsageError, or LookupError (naming the extra) when mpiexec or mpi4py is missing
    or the launcher will refuse to start (Open MPI's as root)."""
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
    if not mpi4py_installed():
        raise LookupError(f"mpi4py is not installed for {sys.executable}; {EXTRA_HINT}")
    from paths.mpiexec import launcher_options, root_refusal

    from .library import find_mpiexec

    try:
        mpiexec, library = find_mpiexec(args.mpiexec, EXTRA_HINT)
    except ImportError as exc:   # mpi4py finds no MPI library to load
        raise LookupError(f"mpi4py cannot load an MPI library ({exc}); {EXTRA_HINT}") from None
    refused = root_refusal(library.family)
    if refused is not None:
        raise LookupError(refused)
    return ([mpiexec, "-n", str(args.ranks), *launcher_options(library.family), sys.executable, "-m",
             "eventspace.mpi", *ranks_argv], options.name or options.default_name)


def _mpirun(args) -> int:
    """Run the job under mpiexec to its end, whichever end it comes to, and then remove its run file
    if rank 0 could not (MPI's abort, a rank killed, a second Ctrl-C end rank 0 with SIGKILL).

    mpiexec is a child that has this process's stdin, stdout and stderr; its exit status is the
    command's (128 + N if signal N ended it, or if the job ended with an error after signal N reached
    this process). Ctrl-C reaches mpiexec from the terminal as it reaches this process, which waits
    on; SIGTERM and SIGHUP sent to this process alone are passed on.
    """
    cmd, name = command(args)
    directory = _recording_directory(args, name)
    if directory is not None:   # the ranks record here; built into the archive by rank 0, or below
        cmd[cmd.index("eventspace.mpi") + 1:cmd.index("eventspace.mpi") + 1] = ["--recording-dir", directory]
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.time()
    signalled = []   # (name, number) of each signal that reached this process
    # Handlers in Python, not SIG_IGN: mpiexec starts with the default ones (exec resets them).
    signal.signal(signal.SIGINT, lambda *_: signalled.append(("Ctrl-C", signal.SIGINT)))

    def forward(signum, _):
        signalled.append((signal.Signals(signum).name, signum))
        job.send_signal(signum)

    from paths.mpiexec import reclaim_sessions

    reclaim_sessions()   # what Open MPI launchers killed earlier left would stop this one from starting
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

        heard = ", ".join(dict.fromkeys(name for name, _ in signalled))
        how = f"mpiexec ended with status {status}" + (f" after {heard}" if signalled else "")
        build_after_job(directory, args.archive, how,
                        lambda line: print(f"eventspace mpirun: {line}", file=sys.stderr, flush=True))
    if status != 0 and signalled:
        # Ended by the signal it was sent, whoever ended the ranks: under Hydra they abort with 128 + N
        # themselves, while Open MPI's launcher ends them first and says 1.
        return 128 + signalled[0][1]
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
