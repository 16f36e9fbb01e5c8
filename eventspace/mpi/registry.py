"""The registration of an MPI run: its run file (paths.runfile) and the pathmap snapshot beside it, kept by rank 0."""

from __future__ import annotations

import threading
import time

from paths import Pathmap, pathmap_yaml, rundir, runfile

from .generate import Communicator

# After a snapshot write that took t seconds, the writer rests REST x t before the next one: while the
# program makes communicators faster than snapshots are written, they take at most 1 / (1 + REST) of
# rank 0's time (a flush cuts the rest short).
REST = 4


class Registration:
    """Rank 0's record of a live MPI run, in the run directory every launcher uses (paths.runfile):
    `Registration(name)` claims the name (`name-2`, ... if a live run holds it: `name` says which),
    `ready` publishes the nodes, `update` gives the snapshot writer the run's newest pathmap,
    `flush` waits until the snapshot on disk is the newest, and `remove` deletes the run's files
    when the run ends.

    The snapshot writer is a thread of rank 0 that writes the newest pathmap it was given (atomically:
    a monitor reads the old snapshot or the new one, whole), one write at a time, off the path of the
    communicator's declare: communicators declared while it writes are all in its next write, so a
    program that makes N communicators costs at most N writes, and each costs what the pathmap gained
    since the last one laid out as YAML (paths.pathmap_yaml.Writer) plus a join and a write of the
    text. A monitor sees a communicator in the snapshot within about six writes' time of its declare
    (one under way, a rest, its own). `say` tells, once, why a write failed (the next one tries again).
    """

    def __init__(self, name: str, say=None):
        self.run_file = runfile.claim(name)
        self.name = self.run_file.name
        self.writes = 0                      # snapshots written
        self.spent = 0.0                     # seconds the writer spent on them (laying out, joining, writing)
        self.problem: str | None = None      # why the last write failed (None: it did not)
        self._say = say
        self._text = pathmap_yaml.Writer()
        self._lines: list[str] = []          # the header's line of each communicator written so far
        # _changed guards _newest, _writing, _hurry and _closed, and is notified when one changes.
        self._changed = threading.Condition()
        self._newest: tuple[Pathmap, list[Communicator]] | None = None   # not yet written
        self._writing = False
        self._hurry = 0                      # flushes waiting: no rest
        self._closed = False
        self._writer: threading.Thread | None = None

    @property
    def path(self) -> str:
        return self.run_file.path

    @property
    def laid_out(self) -> int:
        """Entries of the run's pathmap (nodes, stages, paths, trees, rules...) laid out as YAML over the
        run's snapshots: each one once."""
        return self._text.laid_out

    def ready(self, pathmap: Pathmap, comms: list[Communicator], endpoints: dict[str, str],
              pids: dict[str, int]) -> None:
        """Write the first snapshot (returns once it is written) and publish the nodes."""
        self._writer = threading.Thread(target=self._write_newest, name="eventspace.mpi snapshot", daemon=True)
        self._writer.start()
        self.update(pathmap, comms)
        self.flush()
        self.run_file = self.run_file.ready(endpoints, pids)

    def join(self, endpoints: dict[str, str], pids: dict[str, int]) -> None:
        """Publish nodes that joined the run (a Spawn's processes): the run file lists them with the
        others. Before the snapshot that has them (`update`): a monitor that finds them there finds
        where they serve."""
        self.run_file = self.run_file.ready({**self.run_file.endpoints, **endpoints}, {**self.run_file.pids, **pids})

    def update(self, pathmap: Pathmap, comms: list[Communicator]) -> None:
        """Have the snapshot of `pathmap` written (its header lists how each communicator was made);
        returns at once (see `flush`). A pathmap given before an earlier one was written replaces it."""
        with self._changed:
            self._newest = (pathmap, comms)
            self._changed.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the snapshot on disk is of the last pathmap given to `update` (or its write
        failed: `problem` says why), without the writer's rest; whether it is, within `timeout` seconds."""
        with self._changed:
            self._hurry += 1
            self._changed.notify_all()
            try:
                return self._changed.wait_for(lambda: self._closed or (self._newest is None and not self._writing),
                                              timeout)
            finally:
                self._hurry -= 1

    def remove(self) -> None:
        """Stop the snapshot writer (a write under way ends first: nothing is written after this) and
        delete the run's files."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._writer is not None and self._writer is not threading.current_thread():
            self._writer.join()
        self.run_file.release()

    def _write_newest(self) -> None:
        """The snapshot writer's loop: the newest pathmap, whenever there is one, until `remove`."""
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._closed or self._newest is not None)
                if self._closed:
                    return
                (pathmap, comms), self._newest, self._writing = self._newest, None, True
            started = time.perf_counter()
            try:
                self._write(pathmap, comms)
            finally:
                spent = time.perf_counter() - started
                self.spent += spent
                with self._changed:
                    self._writing = False
                    self._changed.notify_all()
            with self._changed:
                self._changed.wait_for(lambda: self._closed or self._hurry, REST * spent)

    def _write(self, pathmap: Pathmap, comms: list[Communicator]) -> None:
        self._lines += [f"  comm{c.id}: {c.how}, members {list(c.members)}" for c in comms[len(self._lines):]]
        header = "\n".join([f"Snapshot of MPI run {pathmap.name}, written by eventspace.mpi while it runs.",
                            "Communicators (element and tree commC; members are world ranks in communicator order):",
                            *self._lines[:len(comms)]])
        try:
            # A monitor reading it never sees half a file, and a link planted there is replaced, not followed.
            rundir.replace(self.run_file.pathmap_file, self._text.write(pathmap, header).encode())
        except Exception as exc:  # a thread of its own: said, and the next write tries again
            if self.problem is None and self._say is not None:
                self._say(f"the run's pathmap snapshot {self.run_file.pathmap_file} could not be written "
                          f"({type(exc).__name__}: {exc}); monitors attached may not see its newest communicators")
            self.problem = f"{type(exc).__name__}: {exc}"
            return
        self.problem = None
        self.writes += 1
