"""MPI records as an MPI run's collectors write them, call by call, over the run's real catalogue
(eventspace.mpi.generate): for tests of analyses that read them without a run (the wait states)."""

from __future__ import annotations

import numpy as np

from eventspace import trace
from eventspace.catalogue import Catalogue
from eventspace.mpi import encoding as e
from eventspace.mpi.generate import Communicator, collector_ids, run_pathmap

MS = 1_000_000           # ns
T0 = 5_000_000_000_000   # the ranks' clock does not start at zero


class MpiTrace:
    """Records of a run of `ranks` ranks (COMM_WORLD is communicator 0; `comms` more, as
    (id, members)), appended in the order the calls are written here, as each rank's collectors
    append them (a call's record when it returns). Times in ms from T0."""

    def __init__(self, ranks: int, comms=(), hosts=None):
        communicators = [Communicator(0, tuple(range(ranks)), "COMM_WORLD")]
        communicators += [Communicator(c, tuple(members), "Split") for c, members in comms]
        hosts = list(hosts or ["h0"] * ranks)
        self.catalogue = Catalogue(run_pathmap("waitstates", hosts, {h: "default" for h in hosts}, communicators))
        self.rows: list[tuple] = []
        self._rounds: dict[tuple[int, int], int] = {}

    def _row(self, rank, op, flags, peer, arg, nbytes, start, end, comm=0, collective=False):
        p2p, coll = collector_ids(self.catalogue, comm, rank)
        self.rows.append((op, flags, coll if collective else p2p, peer, arg, nbytes,
                          T0 + round(start * MS), T0 + round(end * MS)))

    def send(self, rank, to, start, end, tag=0, op=e.SEND, comm=0, nbytes=8):
        self._row(rank, op, 0, to, tag, nbytes, start, end, comm)

    def recv(self, rank, source, start, end, tag=0, op=e.RECV, comm=0, nbytes=8):
        self._row(rank, op, 0, source, tag, nbytes, start, end, comm)

    def sendrecv(self, rank, to, source, start, end, tag=0, comm=0):
        self._row(rank, e.SENDRECV_SEND, 0, to, tag, 8, start, end, comm)
        self._row(rank, e.SENDRECV_RECV, 0, source, tag, 8, start, end, comm)

    def post(self, rank, peer, start, end, tag=0, op=e.IRECV, comm=0):
        """An MPI_Irecv (or Isend: `op`) posted; its request, for `wait`."""
        self._row(rank, op, 0, peer, tag, 0 if op == e.IRECV else 8, start, end, comm)
        return (rank, op, peer, tag, start, comm)

    def wait(self, rank, requests, start, end, op=e.WAITALL):
        """A completion call that completed `requests`: their request records, then its own."""
        for owner, post_op, peer, tag, posted, comm in requests:
            assert owner == rank
            self._row(rank, post_op, e.REQUEST, peer, tag, 8, posted, end, comm)
        comm = requests[0][5]
        self._row(rank, op, 0, len(requests), len(requests), 0, start, end, comm)

    def collective(self, op, times: dict[int, tuple[float, float]], root=None, comm=0):
        """One collective call on `comm`: {rank: (enter, leave)} of every member, numbered as its round."""
        for rank, (start, end) in times.items():
            r = self._rounds.get((rank, comm), 0)
            self._rounds[(rank, comm)] = r + 1
            self._row(rank, op, 0, e.PEER_NONE if root is None else root, r, 8, start, end, comm, collective=True)

    def icollective(self, op, posts: dict[int, tuple[float, float]], waits: dict[int, tuple[float, float]],
                    root=None, comm=0):
        """One nonblocking collective on `comm` (MPI_Iallreduce...), numbered as its round: each member's
        post {rank: (enter, leave)} and the Wait that completed it {rank: (enter, leave)}, recorded as
        its collective collector writes them: the post, then the request record and the Wait's."""
        peer = e.PEER_NONE if root is None else root
        for rank, (start, end) in posts.items():
            r = self._rounds.get((rank, comm), 0)
            self._rounds[(rank, comm)] = r + 1
            self._row(rank, op, 0, peer, r, 8, start, end, comm, collective=True)
            wait_start, wait_end = waits[rank]
            self._row(rank, op, e.REQUEST, peer, r, 8, start, wait_end, comm, collective=True)
            self._row(rank, e.WAIT, 0, 1, 1, 0, wait_start, wait_end, comm, collective=True)

    def records(self) -> np.ndarray:
        return np.array(self.rows, dtype=trace.DTYPE)
