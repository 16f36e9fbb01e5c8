"""MRNet's two reductions as scope stages: equivalence classes and log2 histograms, on real record batches,
merged up a tree exactly as in one join."""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventspace import classes, histogram, trace
from eventspace.catalogue import Catalogue
from eventspace.stages import ScopeStage, StageError, check_tree, compile_stages
from paths import Instrument, Selector
from runs import FOUR_NODES, pathmap_for, ring_app
MOVE, OBSERVE, ALLREDUCE = (trace.OP_CODES[n] for n in ("move", "observe", "allreduce"))


@pytest.fixture(scope="module")
def catalogue():
    """Twelve threads on four nodes (T0..T2 on A, ...), collectors at sources, sinks and the tree."""
    pm = pathmap_for(ring_app(12), FOUR_NODES, shape="per-node", name="classes")
    pm = dataclasses.replace(pm, instrument=Instrument(collectors=(
        Selector(at=("source", "sink")), Selector(trees=("count",))))).validate()
    return Catalogue(pm)


def apply(stage, records, catalogue):
    return compile_stages([ScopeStage.parse(stage)], catalogue)(records)


def events(catalogue, per_thread, t=1_000):
    """Records of each thread's source collectors: {thread: [(op, n, duration ns), ...]}; a move
    or observe goes to the thread's collector on the element it moves to or observes from."""
    rows = []
    for thread, ops in per_thread.items():
        mine = [e for e in catalogue.entries if e.thread == thread and e.role in ("source", "contribute")]
        out = next(e for e in mine if e.element and e.element.startswith(f"row_{thread[1:]}_"))
        inn = next(e for e in mine if e.element and e.element.endswith(f"_{thread[1:]}"))
        tree = next(e for e in mine if e.role == "contribute")
        for op, n, duration in ops:
            entry = {MOVE: out, OBSERVE: inn, ALLREDUCE: tree}[op]
            for i in range(n):
                rows.append((op, entry.flags, entry.id, entry.element_id, i, 16, t + i, t + i + duration))
    return np.array(rows, dtype=trace.DTYPE)


def by_node(records, catalogue):
    """The batch cut as a per-node tree's leaf joins read it: by the node of each trace element."""
    nodes = np.array([""] + [e.trace_node for e in catalogue.entries + catalogue.system])
    return [records[nodes[records["collector"]] == n] for n in sorted(set(nodes[1:]))]


def as_sets(found):
    return sorted((c.members, tuple(sorted(c.counts.items()))) for c in found)


def test_threads_that_behave_alike_form_one_class_and_the_odd_one_its_own(catalogue):
    same = [(MOVE, 40, 500), (OBSERVE, 40, 9_000), (ALLREDUCE, 4, 20_000)]
    per_thread = {f"T{i}": same for i in range(12)}
    per_thread["T5"] = [(MOVE, 40, 500), (OBSERVE, 120, 9_000), (ALLREDUCE, 4, 20_000)]   # 3x the observes
    records = events(catalogue, per_thread)
    out = apply("classes:ops@thread", records, catalogue)
    found = classes.decode(out, catalogue, "ops", "thread")
    assert [c.members for c in found] == [tuple(f"T{i}" for i in range(12) if i != 5), ("T5",)]
    assert found[0].counts == {("move", "row"): 40, ("observe", "row"): 40, ("allreduce", "count"): 4}
    assert found[1].counts[("observe", "row")] == 120
    # What travels is a few records per class: its parts, and its members as runs (T0..T4, T6..T11).
    assert (out["flags"] & trace.CLASS).all() and len(out) == 3 + 2 + 3 + 1
    ranges = out[out["op"] == classes.RANGE]
    assert sorted(zip(ranges["arg"].tolist(), ranges["nbytes"].tolist())) == [(0, 4), (5, 5), (6, 11)]


def test_classes_merged_up_a_per_node_tree_are_the_classes_of_one_join(catalogue):
    per_thread = {f"T{i}": [(MOVE, 10 + (i % 3), 100), (OBSERVE, 10, 100 * (1 + i % 2))] for i in range(12)}
    records = events(catalogue, per_thread)
    for signature in ("ops", "durations"):
        stage = f"classes:{signature}@thread"
        flat = classes.decode(apply(stage, records, catalogue), catalogue, signature, "thread")
        leaves = [apply(stage, part, catalogue) for part in by_node(records, catalogue)]
        root = apply(stage, trace.concat(leaves), catalogue)
        assert as_sets(classes.decode(root, catalogue, signature, "thread")) == as_sets(flat)
        assert {m for c in flat for m in c.members} == set(per_thread)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 70), st.integers(1, 50_000)), min_size=1, max_size=12),
       st.sampled_from(["ops", "durations"]), st.sampled_from(["thread", "node"]))
def test_any_batch_gives_the_same_classes_through_a_tree_as_at_once(catalogue, mixes, signature, by):
    ops = (MOVE, OBSERVE, ALLREDUCE)
    per_thread = {f"T{i}": [(ops[(mix + j) % 3], n + j, d) for j in range(1 + mix % 3)]
                  for i, (mix, n, d) in enumerate(mixes)}
    records = events(catalogue, per_thread)
    stage = f"classes:{signature}@{by}"
    flat = apply(stage, records, catalogue)
    root = apply(stage, trace.concat([apply(stage, part, catalogue) for part in by_node(records, catalogue)]),
                 catalogue)
    assert as_sets(classes.decode(root, catalogue, signature, by)) == \
        as_sets(classes.decode(flat, catalogue, signature, by))
    # Twice through a join changes nothing either.
    assert as_sets(classes.decode(apply(stage, root, catalogue), catalogue, signature, by)) == \
        as_sets(classes.decode(root, catalogue, signature, by))


def test_a_tree_that_splits_a_thread_over_joins_is_refused(catalogue):
    stage = ScopeStage.parse("classes:ops@thread")
    t0 = [e for e in catalogue.entries if e.thread == "T0"]
    whole = [{"A": [e.trace for e in t0]}]
    check_tree([stage], whole, catalogue)
    split = [{"A": [t0[0].trace]}, {"A": [e.trace for e in t0[1:]]}]
    with pytest.raises(StageError, match="thread T0 are read by more than one join"):
        check_tree([stage], split, catalogue)


@pytest.mark.parametrize("text, words", [
    ("classes:colour@thread", "unknown signature 'colour'"),
    ("classes:ops@cluster", "classes are of thread or node"),
    ("histogram:weight@thread", "unknown field 'weight'"),
    ("histogram:duration@galaxy", "unknown group 'galaxy'"),
])
def test_bad_class_and_histogram_stages_say_what_to_write(text, words):
    with pytest.raises(StageError, match=words):
        ScopeStage.parse(text)


def test_log2_buckets_are_exact_at_every_power_of_two():
    values = [0, 1, 2, 3, 4, 7, 8, (1 << 53) - 1, 1 << 53, (1 << 53) + 1, (1 << 63) - 1, 1 << 63]
    assert histogram.bucket_of(values).tolist() == [v.bit_length() for v in values]
    assert [histogram.bounds(b) for b in (0, 1, 3)] == [(0, 0), (1, 1), (4, 7)]


@pytest.mark.parametrize("field", histogram.FIELDS)
def test_histograms_count_every_event_and_merge_up_a_tree(catalogue, field):
    rng = np.random.default_rng(7)
    per_thread = {f"T{i}": [(MOVE, 30, int(d)) for d in rng.integers(1, 1 << 20, 3)] for i in range(12)}
    records = events(catalogue, per_thread)
    records["nbytes"] = rng.integers(0, 1 << 16, len(records))
    stage = f"histogram:{field}@thread"
    flat = histogram.decode(apply(stage, records, catalogue), catalogue, "thread")
    root = apply(stage, trace.concat([apply(stage, p, catalogue) for p in by_node(records, catalogue)]), catalogue)
    assert histogram.decode(root, catalogue, "thread") == flat
    assert sum(h.count for h in flat) == len(records)
    values = records["t_end"] - records["t_start"] if field == "duration" else records[field]
    expected = {}
    for cid, v in zip(records["collector"].tolist(), values.tolist()):
        key = (catalogue[cid].thread, int(v).bit_length())
        expected[key] = expected.get(key, 0) + 1
    assert {(h.group, b): n for h in flat for b, n in h.buckets.items()} == expected
    assert (apply(stage, records, catalogue)["flags"] == trace.HISTOGRAM).all()
