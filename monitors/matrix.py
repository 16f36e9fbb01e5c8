"""Matrix (INTAP-MPI): messages and bytes between the ranks of an MPI run, by hop class of its topology."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from eventspace import trace
from eventspace.mpi import encoding as e
from eventspace.mpi.matching import message_ends
from eventspace.scope import EventScope

from .scoped import ScopeMon

# Hop classes, nearest first: how far a message between two ranks travels.
SAME_HOST, SAME_CLUSTER, ACROSS_CLUSTERS = "same host", "same cluster", "across clusters"
HOPS = (SAME_HOST, SAME_CLUSTER, ACROSS_CLUSTERS)
# One-sided calls that move data (their R-forms counted at their post, as an Isend is).
_RMA = np.array(sorted(e.RMA), dtype=np.uint16)


@dataclass(frozen=True)
class Matrix:
    """Point-to-point traffic of an MPI run: `messages[s, d]` and `nbytes[s, d]` that world rank s
    sent to rank d (every communicator; a message counted once, at its sending end: a blocking
    send, a Sendrecv's send half or a nonblocking send's post; bytes as the record says: the
    buffer's, or the pickle's for the lowercase forms). One-sided traffic is a kind apart:
    `rma_calls[o, t]` and `rma_bytes[o, t]`, the data calls origin o made on a window with target t
    (Put, Get, Accumulate, Get_accumulate, Fetch_and_op, Compare_and_swap and their R-forms, those
    that did not fail; bytes: the origin buffer's, which a Put or Accumulate sends to the target and
    a Get fetches from it). `hosts[r]` and `clusters[r]` place rank r, so each pair has a hop class
    (HOPS). Collectives are not in it: they have no pairs. `add` counts more in, in place (the
    report of an archive; a live monitor reports copies)."""

    hosts: tuple[str, ...]
    clusters: tuple[str, ...]
    messages: np.ndarray
    nbytes: np.ndarray
    rma_calls: np.ndarray
    rma_bytes: np.ndarray

    @classmethod
    def empty(cls, hosts, clusters) -> Matrix:
        n = len(hosts)
        return cls(tuple(hosts), tuple(clusters), *(np.zeros((n, n), np.int64) for _ in range(4)))

    @classmethod
    def of_catalogue(cls, catalogue) -> Matrix:
        """An empty matrix for the run whose catalogue this is (ranks placed by its pathmap's nodes)."""
        nodes = sorted((n for n in catalogue.pathmap.nodes if e.rank_of(n.name) is not None),
                       key=lambda n: e.rank_of(n.name))
        return cls.empty([n.host for n in nodes], [n.cluster for n in nodes])

    @property
    def ranks(self) -> int:
        return len(self.hosts)

    def copy(self) -> Matrix:
        """A matrix of the counts so far, which later `add`s leave as they are."""
        return Matrix(self.hosts, self.clusters, self.messages.copy(), self.nbytes.copy(), self.rma_calls.copy(),
                      self.rma_bytes.copy())

    def add(self, records: np.ndarray, catalogue) -> int:
        """Count in the messages sent in `records` (trace.DTYPE), and their one-sided calls; how many
        messages there were."""
        self._add_rma(records, e.Collectors(catalogue))
        sends, _ = message_ends(records, catalogue)
        if not sends:
            return 0
        positions = np.array([i for i, _ in sends])
        src = np.array([channel[1] for _, channel in sends])
        dst = np.array([channel[2] for _, channel in sends])
        known = (src < self.ranks) & (dst < self.ranks)
        np.add.at(self.messages, (src[known], dst[known]), 1)
        np.add.at(self.nbytes, (src[known], dst[known]), records["nbytes"][positions[known]].astype(np.int64))
        return int(known.sum())

    def _add_rma(self, records: np.ndarray, collectors: e.Collectors) -> None:
        cid = collectors.index(records["collector"])
        origin, target = collectors.rank[cid], records["element"].astype(np.int64)
        done = (collectors.p2p[cid] & np.isin(records["op"], _RMA)
                & (records["flags"] & (e.REQUEST | trace.ERROR) == 0) & (origin >= 0) & (target < self.ranks)
                & (origin < self.ranks))
        np.add.at(self.rma_calls, (origin[done], target[done]), 1)
        np.add.at(self.rma_bytes, (origin[done], target[done]), records["nbytes"][done].astype(np.int64))

    def hop_classes(self) -> np.ndarray:
        """[s, d]: the index in HOPS of the pair's hop class."""
        hosts, clusters = np.array(self.hosts, dtype=object), np.array(self.clusters, dtype=object)
        same_host = hosts[:, None] == hosts[None, :]
        same_cluster = clusters[:, None] == clusters[None, :]
        return np.where(same_host, 0, np.where(same_cluster, 1, 2)).astype(np.int64)

    def by_hop(self, rma: bool = False) -> list[tuple[str, int, int]]:
        """(hop class, messages, bytes) for each class, nearest first; with `rma`, (hop class, one-sided
        calls, their bytes)."""
        classes = self.hop_classes()
        calls, nbytes = (self.rma_calls, self.rma_bytes) if rma else (self.messages, self.nbytes)
        return [(hop, int(calls[classes == k].sum()), int(nbytes[classes == k].sum())) for k, hop in enumerate(HOPS)]

    def per_host(self) -> dict[str, list[int]]:
        """{host: [bytes its ranks sent, per hop class in HOPS order]}, hosts in rank order."""
        classes = self.hop_classes()
        out: dict[str, list[int]] = {}
        for s, host in enumerate(self.hosts):
            row = out.setdefault(host, [0] * len(HOPS))
            for k in range(len(HOPS)):
                row[k] += int(self.nbytes[s][classes[s] == k].sum())
        return out

    def as_dict(self) -> dict:
        return {"hosts": list(self.hosts), "clusters": list(self.clusters), "messages": self.messages.tolist(),
                "bytes": self.nbytes.tolist(),
                "by_hop": [{"hop": h, "messages": m, "bytes": b} for h, m, b in self.by_hop()],
                "per_host": self.per_host(),
                "rma": {"calls": self.rma_calls.tolist(), "bytes": self.rma_bytes.tolist(),
                        "by_hop": [{"hop": h, "calls": m, "bytes": b} for h, m, b in self.by_hop(rma=True)]}}


def archive_matrix(archive) -> Matrix:
    """The matrix of every message in an MPI run's archive (eventspace.archive.Archive, opened);
    ValueError if the archive is not an MPI run's (it keeps no hosts)."""
    extra = archive.info.extra
    if "hosts" not in extra:
        raise ValueError(f"{archive.path} is not the archive of an MPI run (`eventspace mpirun --archive`): "
                         "it keeps no ranks' hosts")
    hosts, clusters = json.loads(extra["hosts"]), json.loads(extra.get("clusters", "{}"))
    ranks = sorted(hosts, key=e.rank_of)
    matrix = Matrix.empty([hosts[r] for r in ranks], [clusters.get(r, "default") for r in ranks])
    for _, records in archive.batches():   # a message is counted at its sending end alone: batch by batch
        matrix.add(records, archive.catalogue)
    return matrix


@dataclass(frozen=True)
class MatrixReport:
    """A live matrix as one read left it (a copy: the monitor's own goes on counting), and the
    records discarded before the monitor could read them, since it attached (then the matrix is
    short of them)."""

    matrix: Matrix
    discarded: int = 0

    def as_dict(self) -> dict:
        return self.matrix.as_dict() | {"discarded": self.discarded}


class MatrixMon(ScopeMon):
    """The matrix of a live MPI run: a stream scope over its ranks' point-to-point collectors
    (those it has when the monitor attaches), counted in at every `read`. It counts what the
    collectors still keep when it attaches and everything after; `discarded` says how many records
    were discarded before they were read (then the matrix is short of them)."""

    def __init__(self, run, *, timeout: float = 2.0):
        self.scope = EventScope(run, "role:source", mode="stream", timeout=timeout, name="matrix")
        self.matrix = Matrix.of_catalogue(self.scope.catalogue)
        self.discarded = 0

    def read(self) -> MatrixReport:
        pulled = self.scope.pull()
        self.discarded += pulled.discarded
        self.matrix.add(pulled.records, self.scope.catalogue)
        return MatrixReport(self.matrix.copy(), self.discarded)

