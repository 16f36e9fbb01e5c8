"""Synthetic trace batches over a real catalogue: four threads on two nodes, moves and the observes
that read them, an allreduce through a per-node tree, an error, and events that overlap on a track."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import paths
from eventspace import trace
from eventspace.catalogue import Catalogue
from synthetic import T0

INPUTS = Path(__file__).resolve().parents[2] / "pathmaps" / "inputs"


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return toy_catalogue()


def toy_catalogue() -> Catalogue:
    """The toy application (T0, T1 on node A; T2, T3 on node B) with a per-node `count` tree,
    collectors at every source and sink and every point of the tree. Collector ids used below:
    1 T0->row_0_1 source, 2 row_0_1 sink (A), 3 T0->row_1_0, 7 T0->row_0_3, 9 T1->row_0_1,
    10 T1->row_1_0, 13 T1->row_2_1 (remote, on A), 14 row_2_1 sink (B), 16 T2->row_2_1,
    17 T2->row_2_3, 18 row_2_3 sink (B), 21 T3->row_2_3, 23 T3->row_3_0, 24 T3->row_0_3,
    25-28 contribute T0-T3, 29 arrival root (A), 30 arrival node-A, 31 arrival node-B,
    32 departure node-A, 33 departure node-B."""
    pm = paths.generate(paths.AppMap.load(INPUTS / "toy-app.yaml"),
                        paths.ClusterMap.load(INPUTS / "toy-cluster.yaml"),
                        paths.Placement.load(INPUTS / "block.yaml"),
                        tree_shape="per-node", name="toy-monitors")
    pm = dataclasses.replace(pm, instrument=paths.Instrument(keep=200, collectors=(
        paths.Selector(at=("source", "sink")), paths.Selector(trees=("count",))))).validate()
    cat = Catalogue(pm)
    expected = {1: ("source", "T0", "row_0_1"), 2: ("sink", None, "row_0_1"), 13: ("source", "T1", "row_2_1"),
                14: ("sink", None, "row_2_1"), 18: ("sink", None, "row_2_3"), 24: ("source", "T3", "row_0_3")}
    for cid, (role, thread, element) in expected.items():
        e = cat[cid]
        assert (e.role, e.thread, e.element) == (role, thread, element), "the toy pathmap changed"
    assert [cat[c].role for c in range(25, 34)] == ["contribute"] * 4 + ["arrival"] * 3 + ["departure"] * 2
    return cat


def _make(catalogue, rows) -> np.ndarray:
    """Records from (collector, op name, arg, start, end[, flags]) with times in ns from T0; the
    element field and TREE flag come from the collector, as a real collector writes them."""
    out = np.zeros(len(rows), dtype=trace.DTYPE)
    for i, row in enumerate(rows):
        cid, op, arg, start, end, *rest = row
        entry = catalogue[cid] if 1 <= cid <= len(catalogue) else None
        flags = (rest[0] if rest else 0) | (entry.flags if entry else 0)
        out[i] = (trace.OP_CODES[op], flags, cid, entry.element_id if entry else 0, arg,
                  0 if op in ("allreduce",) else 16, T0 + start, T0 + end)
    return out


@pytest.fixture(scope="session")
def make(catalogue):
    """`make(rows)`: records from (collector, op name, arg, start ns, end ns[, flags]) rows."""
    return lambda rows: _make(catalogue, rows)


@pytest.fixture(scope="session")
def flows() -> set:
    """The flows `records` should produce: (move collector, observe collector, element, index)."""
    return FLOWS


FLOWS = {
    (1, 9, "row_0_1", 5),      # T0 -> T1 on node A
    (13, 16, "row_2_1", 2),    # T1 (A) -> T2 (B) through a remote stage
    (17, 21, "row_2_3", 0),    # T2 -> T3 on node B
    (10, 3, "row_1_0", 7),     # T1 -> T0, read by an observe that overlaps T0's next move
    (7, 24, "row_0_3", 1),     # from the move that lands on T0's overflow lane
}


@pytest.fixture(scope="session")
def records(make) -> np.ndarray:
    return make([
        # T0 moves tuple 5 into row_0_1 (source and sink see it); T1 observes it.
        (1, "move", 5, 100, 400), (2, "move", 5, 150, 350),
        (9, "observe", 5, 500, 900), (2, "observe", 5, 600, 800),
        # T0 moves tuple 6: nobody reads it, so no flow.
        (1, "move", 6, 1000, 1200), (2, "move", 6, 1050, 1150),
        # T2 -> T3 through row_2_3; on the element's sink track the move and observe overlap.
        (17, "move", 0, 200, 600), (18, "move", 0, 250, 550),
        (21, "observe", 0, 300, 700), (18, "observe", 0, 320, 680),
        # T1 on A moves into row_2_1 on B; T2 reads it.
        (13, "move", 2, 1000, 1500), (14, "move", 2, 1200, 1400), (16, "observe", 2, 1600, 1700),
        # An observe that raised.
        (23, "observe", 0, 2000, 2500, trace.ERROR),
        # allreduce over `count`: contributions, arrivals at the node joins and the root, departures.
        (25, "allreduce", 0, 3000, 3900), (26, "allreduce", 0, 3050, 3900),
        (27, "allreduce", 0, 3100, 3950), (28, "allreduce", 0, 3150, 3950),
        (30, "allreduce", 0, 3010, 3890), (30, "allreduce", 0, 3060, 3880),
        (32, "allreduce", 0, 3400, 3850), (29, "allreduce", 0, 3450, 3800), (29, "allreduce", 0, 3500, 3820),
        (31, "allreduce", 0, 3110, 3940), (31, "allreduce", 0, 3160, 3945), (33, "allreduce", 0, 3300, 3930),
        # T1 moves tuple 7 into row_1_0; T0 observes it while (say, from a helper thread) it also
        # moves tuple 1 into row_0_3: the two overlap on T0's track. T3 reads tuple 1.
        (10, "move", 7, 1800, 1900), (3, "observe", 7, 4000, 4600),
        (7, "move", 1, 4300, 4900), (24, "observe", 1, 5000, 5200),
    ])
