"""Draining a rank's trace elements into the run's archive, so that no record is ever discarded."""

from __future__ import annotations

import threading
import time

import pastset

from .. import trace
from ..archive import Archive
from ..ignored import Ignored, decoded

TAKE = "eventspace.mpi.take"   # hosted on every rank: (the run's token, most bytes) -> [records bytes, records lost]
TAKE_BYTES = 4 << 20           # records one take returns at most (a reply well under any frame limit)
NEVER = [1 << 62]              # the bound of a ring nobody drains: no append reaches it


def _nothing() -> None:
    pass


class Drain:
    """Everything this rank's MPI collectors append, kept until the archive writer takes it.

    Each collector's trace element is a ring that keeps its newest `keep` records. A ring
    registered here has a bound: when an append's index reaches it, the ring is full of records
    nobody has taken, and the collector calls the ring's spill (on the application's thread)
    before its next append could discard one. Spilled records wait here; `take` (the hosted
    call the archive writer makes, on the node server's thread) returns them with whatever the
    rings hold beyond them. So records reach the archive in order, and none is lost however
    fast a rank runs and however late the writer comes. Inactive (no archive), every ring's
    bound is NEVER and nothing is kept.
    """

    def __init__(self, active: bool):
        self.active = active
        self._mutex = threading.Lock()   # held while rings, cursors, bounds or _spilled change
        self._rings: list[list] = []     # [element, cursor, bound]
        self._spilled: list[bytes] = []
        self._lost = 0

    def watch(self, element) -> tuple[list[int], callable]:
        """(bound, spill) for a collector appending to `element`: after an append returned
        index i >= bound[0], it calls spill()."""
        if not self.active:
            return NEVER, _nothing
        with self._mutex:
            cursor = element.last()
            ring = [element, cursor, [cursor + element.keep - 1]]
            self._rings.append(ring)
        return ring[2], lambda: self._spill(ring)

    def _spill(self, ring) -> None:
        with self._mutex:
            self._read(ring)

    def _read(self, ring) -> None:
        element, cursor, bound = ring
        start, data = element.read_range(cursor, element.last())
        self._lost += start - cursor        # 0 unless a ring outran its bound (it cannot)
        if data:
            self._spilled.append(data)
        ring[1] = start + len(data) // trace.SIZE
        bound[0] = ring[1] + element.keep - 1

    def take(self, most: int = TAKE_BYTES) -> list:
        """[records (packed trace tuples, in order per collector), records lost] since the last
        take, at most about `most` bytes: call again while it returns any."""
        with self._mutex:
            if sum(len(chunk) for chunk in self._spilled) < most:
                for ring in self._rings:
                    self._read(ring)
            out, size = [], 0
            while self._spilled and (size < most or not out):
                chunk = self._spilled.pop(0)
                out.append(chunk)
                size += len(chunk)
            lost, self._lost = self._lost, 0
        return [b"".join(out), lost]


class ArchiveWriter:
    """On rank 0: takes every rank's records (the hosted TAKE) every `interval` seconds and at
    `close`, and appends them to the run's archive. Ranks whose node does not answer are left
    out of that round (their records wait on their node for the next). `token` is the run's, which
    the ranks host TAKE for (eventspace.mpi.rank.Rank.for_ranks)."""

    def __init__(self, archive: Archive, clients: dict[str, pastset.Client], token: str, interval: float = 0.1):
        self.archive = archive
        self.clients = clients
        self.token = token
        self.interval = interval
        self.tuples = 0
        self.lost = 0
        self.ignored = Ignored()   # records taken that no collector wrote (eventspace.ignored), by reason
        self._told: set[str] = set()
        self._mutex = threading.Lock()   # held around a round of takes (the thread's, or close's)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="eventspace-mpi-archive", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.round()
            except pastset.PastSetError:
                continue   # a rank gone: the job is ending (MPI ends it); close() says what was kept

    def round(self) -> int:
        """Take everything every rank has now; records appended. A rank's rings may hold what
        anyone wrote into them: what no collector could have written is left out (counted in
        `ignored`, and said once on the `eventspace.ignored` logger), so that the rest is kept."""
        appended = 0
        with self._mutex:
            for client in self.clients.values():
                while True:
                    data, lost = client.call(TAKE, self.token, TAKE_BYTES, timeout=30)
                    if data or lost:
                        records = decoded(data, self.archive.catalogue, self.ignored, from_rings=True)
                        appended += self.archive.append(records, discarded=lost)
                        self.lost += lost
                    if len(data) < TAKE_BYTES:
                        break
            self.ignored.tell(self._told, f"archive {self.archive.path}")
        self.tuples += appended
        return appended

    def close(self) -> None:
        """Stop the thread, take the last records (every rank has stopped writing), close."""
        self._stop.set()
        self._thread.join()
        try:
            self.round()
        finally:
            self.archive.set_meta("closed", time.strftime("%Y-%m-%dT%H:%M:%S"))
            self.archive.close()
