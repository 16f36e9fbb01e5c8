"""The registration of an MPI run: its run file (paths.runfile) and the pathmap snapshot beside it, kept by rank 0."""

from __future__ import annotations

from paths import Pathmap, rundir, runfile

from .generate import Communicator


class Registration:
    """Rank 0's record of a live MPI run, in the run directory every launcher uses (paths.runfile):
    `Registration(name)` claims the name (`name-2`, ... if a live run holds it: `name` says which),
    `ready` publishes the nodes, `update` rewrites the pathmap snapshot (atomically) whenever a
    communicator is declared, and `remove` deletes the run's files when the run ends."""

    def __init__(self, name: str):
        self.run_file = runfile.claim(name)
        self.name = self.run_file.name

    @property
    def path(self) -> str:
        return self.run_file.path

    def ready(self, pathmap: Pathmap, comms: list[Communicator], endpoints: dict[str, str],
              pids: dict[str, int]) -> None:
        self.update(pathmap, comms)
        self.run_file = self.run_file.ready(endpoints, pids)

    def update(self, pathmap: Pathmap, comms: list[Communicator]) -> None:
        """Write the snapshot of `pathmap` (its header lists how each communicator was made)."""
        lines = [f"Snapshot of MPI run {pathmap.name}, written by eventspace.mpi while it runs.",
                 "Communicators (element and tree commC; members are world ranks in communicator order):"]
        lines += [f"  comm{c.id}: {c.how}, members {list(c.members)}" for c in comms]
        # A monitor reading it never sees half a file, and a link planted there is replaced, not followed.
        rundir.replace(self.run_file.pathmap_file, pathmap.dumps(header="\n".join(lines)).encode())

    def remove(self) -> None:
        self.run_file.release()
