"""Track layout: a track per thread and per element/tree on a node; overflow lanes keep slices nesting."""

from __future__ import annotations

import numpy as np

from monitors.tracks import UNKNOWN_NODE, lanes, layout


def _nests(spans) -> bool:
    stack = []
    for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
        while stack and stack[-1] <= start:
            stack.pop()
        if stack and stack[-1] < end:
            return False
        stack.append(end)
    return True


def test_nesting_and_disjoint_intervals_stay_on_lane_zero():
    starts = [0, 10, 20, 50, 100, 100]
    ends = [90, 40, 30, 90, 120, 100]   # nested, touching (90/100 pairs), a zero-length slice
    assert lanes(starts, ends).tolist() == [0] * 6


def test_partial_overlaps_go_to_the_lowest_lane_where_they_nest():
    starts = [0, 5, 50, 60, 62]
    ends = [10, 15, 100, 110, 65]
    assert lanes(starts, ends).tolist() == [0, 1, 0, 1, 0]


def test_every_lane_nests_and_the_layout_is_deterministic():
    rng = np.random.default_rng(7)
    starts = rng.integers(0, 1000, 300)
    ends = starts + rng.integers(0, 200, 300)
    got = lanes(starts.tolist(), ends.tolist())
    assert np.array_equal(got, lanes(starts.tolist(), ends.tolist()))
    for lane in range(int(got.max()) + 1):
        assert _nests([(s, e) for s, e, g in zip(starts, ends, got) if g == lane])


def test_tracks_per_thread_on_its_node_and_per_element_or_tree(records, catalogue):
    starts = (records["t_start"] - records["t_start"].min()).tolist()
    ends = (records["t_end"] - records["t_start"].min()).tolist()
    lay = layout(records, catalogue, starts, ends)
    assert lay.nodes == ("A", "B")
    names = {(t.node, t.label) for t in lay.tracks}
    assert {("A", "T0"), ("A", "T1"), ("B", "T2"), ("B", "T3")} <= names
    assert {("A", "element row_0_1"), ("B", "element row_2_1"), ("A", "tree count"), ("B", "tree count")} <= names
    # T1's move into row_2_1 runs from node A (its source collector); the sink on B holds the element.
    assert lay.tracks[lay.of[10]].label == "T1" and lay.tracks[lay.of[11]].label == "element row_2_1"
    # Contributions are the member thread's; arrivals and departures the tree's, on their node.
    assert lay.tracks[lay.of[14]].label == "T0"
    assert lay.tracks[lay.of[23]].node == "B" and lay.tracks[lay.of[23]].name == "tree count"
    for t in range(len(lay.tracks)):
        members = np.flatnonzero(lay.of == t)
        assert len(members), f"empty track {lay.tracks[t]}"
        assert _nests([(starts[i], ends[i]) for i in members])


def test_unknown_collectors_keep_their_events_on_their_own_track(make, catalogue):
    recs = make([(1, "move", 0, 0, 10), (999, "move", 0, 0, 10)])
    lay = layout(recs, catalogue, [0, 0], [10, 10])
    assert lay.nodes == ("A", UNKNOWN_NODE)
    assert lay.tracks[lay.of[1]].label == "collector 999"
