"""How an MPI run is monitored: the options every rank is started with."""

from __future__ import annotations

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
    rank 0 makes one in the run directory)."""

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
