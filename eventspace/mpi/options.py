"""How an MPI run is monitored: the options every rank is started with, and how a spawned process is started."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass

INSTRUMENT = ("all", "p2p", "collectives", "none")
DEFAULT_KEEP = 4096   # records per trace element: a monitor's stream pulls miss less of a busy rank
MAX_COMMUNICATORS = 256   # communicators a run traces (each one declared makes the next one dearer)


@dataclass(frozen=True)
class Options:
    """How to monitor the run: its name (None: `default_name`, or a free variant of it), an
    archive to build from every event the ranks record, or a flight recorder's window to keep
    (`record`, `last:30s`: eventspace.recorder.Spec), what to collect (all, p2p, collectives,
    none), a topology file, each trace element's `keep`, whether to serve plaintext on
    non-loopback addresses, how many communicators to trace at most (COMM_WORLD and the first ones
    the program makes), and the directory the ranks record into (`recording_dir`: made by
    `eventspace mpirun`, which builds the archive if the job ends before its rank 0 could; None:
    rank 0 makes one in the run directory). `spawned`: this process was started by a traced rank's
    MPI.Comm.Spawn, whose root was its parents' rank `spawned`; it joins their run, and takes the
    run's options from them."""

    default_name: str
    name: str | None = None
    archive: str | None = None
    instrument: str = "all"
    topology: str | None = None
    keep: int = DEFAULT_KEEP
    insecure: bool = False
    max_communicators: int = MAX_COMMUNICATORS
    record: str | None = None
    recording_dir: str | None = None
    spawned: int | None = None


def spawned_command(command, args, root: int) -> tuple[str, list[str]] | None:
    """How a traced rank's MPI.Comm.Spawn (its root: the parents' rank `root`) starts `command
    args` so that the process joins the run: where `command` is this Python (sys.executable, as
    mpi4py.futures and most programs spawn), its arguments with `-m eventspace.mpi --spawned ROOT
    --` put before its program (a script, or -m module), the interpreter's own flags before them
    kept. None for any other command, or a program given as `-c` or on stdin: it runs as asked."""
    found = shutil.which(os.fspath(command)) if command is not None else None
    if found is None or os.path.abspath(found) != os.path.abspath(sys.executable):
        return None
    rest, flags = list(args or ()), []
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c", "-", "--"):
        flags.append(rest.pop(0))
        if flags[-1] in ("-W", "-X") and rest:   # a flag whose value is the next argument
            flags.append(rest.pop(0))
    if not rest or rest[0] in ("-c", "-", "--") or rest == ["-m"]:
        return None
    return command, [*flags, "-m", "eventspace.mpi", "--spawned", str(root), "--", *rest]

