"""Views over the catalogue, and the stages a scope applies at each join, on real record batches."""

import dataclasses

import numpy as np
import pytest

from eventspace import trace
from eventspace.catalogue import Catalogue
from eventspace.stages import ScopeStage, StageError, compile_stages
from eventspace.view import View, ViewError
from paths import Instrument, Pathmap, Selector


@pytest.fixture(scope="module")
def catalogue(pathmaps_dir=None):
    from pathlib import Path

    pm = Pathmap.load(Path(__file__).parents[2] / "pathmaps" / "toy-2node.yaml")
    pm = dataclasses.replace(pm, instrument=Instrument(collectors=(
        Selector(at=("source", "sink")), Selector(trees=("count", "step"))))).validate()
    return Catalogue(pm)


def ids(view, catalogue):
    return [e.id for e in View.parse(view).select(catalogue)]


def test_views_select_by_thread_node_cluster_tree_point_and_id(catalogue):
    every = [e.id for e in catalogue]
    assert ids("all", catalogue) == every
    assert {catalogue[i].thread for i in ids("thread:T0", catalogue)} == {"T0"}
    assert {catalogue[i].node for i in ids("node:B", catalogue)} == {"B"}
    assert ids("cluster:c1", catalogue) == every
    assert {catalogue[i].role for i in ids("tree:count:arrival", catalogue)} == {"arrival"}
    assert {catalogue[i].tree for i in ids("tree:step", catalogue)} == {"step"}
    assert ids("collector:3,1", catalogue) == [1, 3]
    assert {catalogue[i].role for i in ids("role:sink", catalogue)} == {"sink"}


def test_unions_and_intersections_compose(catalogue):
    t0, t1 = set(ids("thread:T0", catalogue)), set(ids("thread:T1", catalogue))
    on_a = set(ids("node:A", catalogue))
    assert set(ids("thread:T0 | thread:T1", catalogue)) == t0 | t1
    assert set(ids("thread:T0,T1", catalogue)) == t0 | t1
    assert set(ids("node:A & role:source | thread:T1", catalogue)) == (on_a & set(ids("role:source", catalogue))) | t1
    combined = View.parse("thread:T0") | "thread:T1"
    assert set(combined.select(catalogue)) == set(View.parse("thread:T0,T1").select(catalogue))
    narrowed = View.parse("all") & "tree:count"
    assert {e.tree for e in narrowed.select(catalogue)} == {"count"}


@pytest.mark.parametrize("text, words", [
    ("thread:T9", "unknown thread 'T9'"),
    ("node:Q", "unknown node 'Q'"),
    ("tread:T0", "did you mean 'thread'"),
    ("tree:count:leaving", "unknown tree point 'leaving'"),
    ("thread:", "thread needs a name"),
    ("", "an empty view"),
    ("collector:x", "collector ids are numbers"),
])
def test_bad_views_say_what_is_wrong(catalogue, text, words):
    with pytest.raises(ViewError, match=words.replace("(", r"\(")):
        View.parse(text).select(catalogue)


def test_a_view_that_selects_nothing_says_what_there_is(catalogue):
    with pytest.raises(ViewError, match="selects no collector.*roles"):
        View.parse("thread:T0 & role:sink").select(catalogue)


def batch(rows):
    out = np.zeros(len(rows), dtype=trace.DTYPE)
    for i, (collector, t_start, t_end, nbytes) in enumerate(rows):
        out[i] = (trace.OP_CODES["move"], 0, collector, 0, i, nbytes, t_start, t_end)
    return out


def run(stages, records, catalogue):
    return compile_stages([ScopeStage.parse(s) for s in stages], catalogue)(records)


def test_reduce_max_t_end_keeps_the_newest_record_per_thread(catalogue):
    t0 = [e.id for e in catalogue if e.thread == "T0"]
    t1 = [e.id for e in catalogue if e.thread == "T1"]
    records = batch([(t0[0], 1, 50, 0), (t0[1], 2, 90, 0), (t1[0], 3, 70, 0), (t1[0], 4, 60, 0)])
    out = run(["reduce:max_t_end@thread"], records, catalogue)
    assert sorted(out["t_end"].tolist()) == [70, 90]
    # Associative: reducing partial results gives the same as reducing everything at once.
    halves = np.concatenate([run(["reduce:max_t_end@thread"], records[:2], catalogue),
                             run(["reduce:max_t_end@thread"], records[2:], catalogue)])
    assert sorted(run(["reduce:max_t_end@thread"], halves, catalogue)["t_end"].tolist()) == [70, 90]


def test_count_and_sum_summaries_are_associative(catalogue):
    records = batch([(1, 10, 20, 5), (1, 30, 40, 6), (2, 5, 8, 7), (3, 1, 2, 8)])
    whole = run(["reduce:count"], records, catalogue)
    parts = np.concatenate([run(["reduce:count"], records[:3], catalogue), run(["reduce:count"], records[3:], catalogue)])
    twice = run(["reduce:count"], parts, catalogue)
    for out in (whole, twice):
        assert len(out) == 1 and out["flags"][0] & trace.SUMMARY
        assert (out["arg"][0], out["nbytes"][0], out["t_start"][0], out["t_end"][0]) == (4, 26, 1, 40)
    per_collector = run(["reduce:sum@collector"], records, catalogue)
    assert sorted(per_collector["arg"].tolist()) == [1, 1, 2]


def test_filter_sort_and_latest(catalogue):
    records = batch([(1, 50, 60, 10), (1, 10, 90, 99), (2, 30, 31, 0)])
    assert run(["filter:t_end - t_start > 5"], records, catalogue)["t_start"].tolist() == [50, 10]
    assert run(["sort:t_start"], records, catalogue)["t_start"].tolist() == [10, 30, 50]
    assert sorted(run(["latest"], records, catalogue)["t_end"].tolist()) == [31, 90]
    assert run(["filter:nbytes in (0, 10)", "sort:t_end"], records, catalogue)["nbytes"].tolist() == [0, 10]


def test_filters_name_ops_as_the_op_codes_do(catalogue):
    records = batch([(1, 10, 20, 0), (2, 30, 40, 0), (3, 50, 60, 0), (4, 70, 80, 1)])
    records["op"] = [trace.OP_CODES[name] for name in ("move", "observe", "allreduce", "move")]
    records["flags"] = [0, trace.ERROR, 0, trace.ERROR]
    for text in ('op == move', 'op == "move"', "op == 'move'", "move == op", f'op == {trace.OP_CODES["move"]}'):
        assert run([f"filter:{text}"], records, catalogue)["t_start"].tolist() == [10, 70], text
    assert run(['filter:op in (observe, "allreduce")'], records, catalogue)["t_start"].tolist() == [30, 50]
    assert run(["filter:op != move and nbytes == 0"], records, catalogue)["t_start"].tolist() == [30, 50]
    assert run(["filter:flags & 1"], records, catalogue)["t_start"].tolist() == [30, 70]   # trace.ERROR


@pytest.mark.parametrize("text", ['filter:op == mvoe', 'filter:op == "mvoe"', "filter:op in (move, 'mvoe')"])
def test_an_unknown_op_name_is_an_error_that_lists_the_ops(text):
    with pytest.raises(StageError) as error:
        ScopeStage.parse(text)
    message = str(error.value)
    assert "unknown op 'mvoe'" in message and "did you mean 'move'?" in message
    assert all(name in message for name in trace.OP_CODES)


@pytest.mark.parametrize("text, words", [
    ("filter:t_end >", "does not parse"),
    ("filter:__import__('os')", "not allowed"),
    ("filter:bogus > 1", "unknown field 'bogus'"),
    ("reduce:median", "unknown reduction"),
    ("reduce:max_t_end@galaxy", "unknown group"),
    ("reduce:os:system", "'os' is not listed in allow_modules"),
    ("sort:colour", "unknown field"),
    ("shuffle", "unknown scope stage"),
])
def test_bad_stages_fail_when_the_scope_is_built(text, words):
    with pytest.raises(StageError, match=words):
        ScopeStage.parse(text)
