"""The registration of an MPI run: its run file and pathmap snapshot, kept by rank 0.

This is the one place that uses paths.RunFile, so that where run files live is decided in one
place (paths.runfile) for MPI runs as for launched ones.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pastset
from paths import Pathmap, RunError, RunFile
from paths.runfile import DEFAULT_DIR

from .generate import Communicator


class NameTaken(RunError):
    """A live run already has the name asked for."""


def run_path(name: str) -> Path:
    """Where the run file of a run named `name` goes."""
    return DEFAULT_DIR / f"{name}.json"


def is_live(name: str) -> bool:
    """True if a run named `name` is live (its run file exists and its nodes answer)."""
    path = run_path(name)
    if not path.exists():
        return False
    try:
        RunFile.read(path).check_live(timeout=1.0)
    except RunError:
        return False   # stale or unreadable: a new run may take the name
    except pastset.PastSetError:
        return True    # it answers, with keys this process lacks: live all the same
    return True


def choose_name(name: str, explicit: bool) -> str:
    """`name` if no live run has it. Else: NameTaken for a name the user gave; for a default
    name, the first of `name-2`, `name-3`, ... that is free (the caller prints it)."""
    if not is_live(name):
        return name
    if explicit:
        raise NameTaken(f"a live run is already named {name!r} ({run_path(name)}); give another "
                        "--name, or stop that run first")
    for i in range(2, 10_000):
        candidate = f"{name}-{i}"
        if not is_live(candidate):
            return candidate
    raise NameTaken(f"runs {name}-2 ... {name}-9999 are all live; give a --name")


class Registration:
    """Rank 0's record of a live MPI run: the run file (`<runs>/<name>.json`) that monitors find
    it by, and the pathmap snapshot beside it, rewritten (atomically) whenever a communicator is
    declared. `remove()` deletes both when the run ends."""

    def __init__(self, name: str, pathmap: Pathmap, comms: list[Communicator], endpoints: dict[str, str],
                 pids: dict[str, int]):
        self.path = run_path(name)
        self.snapshot = self.path.with_name(f"{name}.pathmap.yaml")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.update(pathmap, comms)
        self.run_file = RunFile(os.fspath(self.snapshot.resolve()), dict(endpoints), dict(pids),
                                time.time()).write(self.path)

    def update(self, pathmap: Pathmap, comms: list[Communicator]) -> None:
        """Write the snapshot of `pathmap` (its header lists how each communicator was made)."""
        lines = [f"Snapshot of MPI run {pathmap.name}, written by eventspace.mpi while it runs.",
                 "Communicators (element and tree commC; members are world ranks in communicator order):"]
        lines += [f"  comm{c.id}: {c.how}, members {list(c.members)}" for c in comms]
        tmp = self.snapshot.with_suffix(".tmp")
        tmp.write_text(pathmap.dumps(header="\n".join(lines)))
        tmp.replace(self.snapshot)   # a monitor reading it never sees half a file

    def remove(self) -> None:
        for path in (self.path, self.snapshot):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
