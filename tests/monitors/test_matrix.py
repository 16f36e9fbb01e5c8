"""The traffic matrix of an MPI run: pairs, bytes, hop classes, per-host sums, rendering."""

from __future__ import annotations

import numpy as np
from rich.console import Console

from eventspace import trace
from eventspace.catalogue import Catalogue
from eventspace.mpi import encoding as e
from eventspace.mpi.generate import Communicator, collector_ids, run_pathmap
from monitors.matrix import Matrix
from monitors.render import matrix_tables

HOSTS = ["a", "a", "b", "c"]
CLUSTERS = {"a": "x", "b": "x", "c": "y"}


def catalogue():
    return Catalogue(run_pathmap("traffic", HOSTS, CLUSTERS, [Communicator(0, (0, 1, 2, 3), "COMM_WORLD")]))


def send(cat, op, src, dst, nbytes, flags=0, t=1):
    cid = collector_ids(cat, 0, src)[0]
    return trace.RECORD.pack(op, flags, cid, dst, 7, nbytes, t, t + 1)


def test_sends_count_at_their_sending_end_by_hop_class():
    cat = catalogue()
    records = trace.decode(b"".join([
        send(cat, e.SEND, 0, 1, 100),                      # same host
        send(cat, e.ISEND, 1, 2, 1000),                    # same cluster (a, b in x)
        send(cat, e.ISEND, 1, 2, 1000, flags=e.REQUEST),   # its completion: not a second message
        send(cat, e.SENDRECV_SEND, 2, 3, 10),              # across clusters
        send(cat, e.RECV, 3, 2, 10),                       # a receiving end: not counted
        send(cat, e.SEND, 3, e.PEER_NONE, 5),              # to MPI.PROC_NULL: no message
    ]))
    matrix = Matrix.empty(HOSTS, [CLUSTERS[h] for h in HOSTS])
    assert matrix.add(records, cat) == 3
    assert matrix.nbytes.tolist() == [[0, 100, 0, 0], [0, 0, 1000, 0], [0, 0, 0, 10], [0, 0, 0, 0]]
    assert matrix.messages.sum() == 3
    assert matrix.by_hop() == [("same host", 1, 100), ("same cluster", 1, 1000), ("across clusters", 1, 10)]
    assert matrix.per_host() == {"a": [100, 1000, 0], "b": [0, 0, 10], "c": [0, 0, 0]}
    assert Matrix.of_catalogue(cat).hosts == tuple(HOSTS)

    console = Console(width=160, record=True)
    console.print(matrix_tables(matrix))
    text = console.export_text()
    assert "across clusters" in text and "1,000 (1)" in text and "1,110" in text


def test_one_sided_calls_are_a_kind_of_their_own_from_origin_to_target():
    cat = Catalogue(run_pathmap("rma", HOSTS, CLUSTERS, [Communicator(0, (0, 1, 2, 3), "COMM_WORLD"),
                                                          Communicator(1, (0, 1, 2, 3), "Win.Create of comm 0")]))

    def call(op, origin, target, nbytes, flags=0, window=1):
        return trace.RECORD.pack(op, flags, collector_ids(cat, window, origin)[0], target, 0, nbytes, 1, 2)

    records = trace.decode(b"".join([
        call(e.PUT, 0, 1, 100),                          # same host
        call(e.RPUT, 1, 2, 10),                          # same cluster: its post...
        call(e.RPUT, 1, 2, 10, flags=e.REQUEST),         # ...and its completion, not a second call
        call(e.GET, 2, 3, 5),                            # across clusters: bytes the origin fetched
        call(e.PUT, 2, 3, 7, flags=trace.ERROR),         # failed: nothing moved
        call(e.WIN_LOCK, 3, 0, 0),                       # synchronisation: no data
        call(e.SEND, 3, 0, 1000, window=0),              # point to point, on COMM_WORLD
    ]))
    matrix = Matrix.empty(HOSTS, [CLUSTERS[h] for h in HOSTS])
    assert matrix.add(records, cat) == 1
    assert matrix.rma_bytes.tolist() == [[0, 100, 0, 0], [0, 0, 10, 0], [0, 0, 0, 5], [0, 0, 0, 0]]
    assert matrix.rma_calls.sum() == 3 and matrix.nbytes.sum() == 1000
    assert matrix.by_hop(rma=True) == [("same host", 1, 100), ("same cluster", 1, 10), ("across clusters", 1, 5)]
    assert matrix.as_dict()["rma"]["bytes"] == matrix.rma_bytes.tolist()
    assert matrix.copy().rma_calls.tolist() == matrix.rma_calls.tolist()

    console = Console(width=160, record=True)
    console.print(matrix_tables(matrix))
    text = console.export_text()
    assert "point-to-point traffic" in text and "one-sided (RMA) traffic, origin to target" in text
    assert "100 (1)" in text and "1,000 (1)" in text
