"""Equivalence classes on a live run: joins inside the node servers reduce every thread to its class, and
one representative per class, with its members, reaches the monitor."""

import dataclasses
import json
import time

import pytest

from eventspace import histogram
from eventspace.scope import EventScope
from eventspace.stages import ScopeStage, StageError, check_tree
from monitors.classes import ClassesMon, describe
from paths import Instrument, Selector, launch
from polling import until
from runs import ENV, THREE_NODES, finish, pathmap_for, read_until, ring_app, start_monitor

BUSY = "T4"


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    """Six threads on three nodes in a ring for a minute; T4 reads every tuple three times."""
    pm = pathmap_for(ring_app(6), THREE_NODES, rule="block", shape="kary:2", name="uneven")
    pm = dataclasses.replace(pm, instrument=Instrument(keep=5000, collectors=(
        Selector(at=("source", "sink")), Selector(trees=("count",))))).validate()
    with launch(pm, run_dir=tmp_path_factory.mktemp("runs"), env=ENV) as run:
        run.start("programs:uneven", {"stop_after": 60, "busy": BUSY, "extra": 2})
        with EventScope(run, "all", mode="latest") as scope:
            until(lambda: {f"T{i}" for i in range(6)} <= {scope.catalogue[int(c)].thread
                                                          for c in scope.pull().records["collector"]}, 30,
                  "events of all six threads")
        yield run


def test_the_odd_thread_is_a_class_of_its_own_and_the_rest_one_class(uneven):
    with ClassesMon(uneven) as mon:   # per-node joins in the node servers
        mon.read()
        time.sleep(1.0)   # the window the report covers (a monitor's interval)
        report = mon.read()
    assert [c.members for c in report.classes] == [("T0", "T1", "T2", "T3", "T5"), (BUSY,)]
    same, odd = report.classes
    observes = lambda c: sum(n for (op, _), n in c.counts.items() if op == "observe")   # noqa: E731
    moves = lambda c: sum(n for (op, _), n in c.counts.items() if op == "move")   # noqa: E731
    assert observes(odd) == pytest.approx(3 * moves(odd), rel=0.1) and observes(same) == pytest.approx(moves(same), rel=0.1)
    line = describe(report)
    assert line.startswith("6 threads: class 1 (5 threads: T0..T3, T5): ") and f"class 2 ({BUSY}): 3× the observes" in line


def test_classes_reach_the_monitor_in_a_tenth_of_the_bytes_of_a_flat_gather(uneven):
    with ClassesMon(uneven) as mon, EventScope(uneven, "all", mode="stream") as flat:
        mon.read()
        flat.pull()
        time.sleep(1.0)   # the window both pulls cover
        report = mon.read()
        before = flat.stats().bytes_in
        flat.pull()
        gathered = flat.stats().bytes_in - before
    assert len(report.classes) == 2 and report.bytes_in * 10 < gathered


def test_nodes_form_classes_too_and_a_tree_that_splits_a_member_is_refused(uneven):
    with ClassesMon(uneven, by="node", tree="per-cluster") as mon:
        mon.read()
        time.sleep(0.5)   # the window the report covers (a monitor's interval)
        report = mon.read()
    assert sorted(m for c in report.classes for m in c.members) == ["A", "B", "C"]
    # Trees are laid over nodes, so a k-ary one keeps each node's trace elements under one join...
    with ClassesMon(uneven, by="node", tree="kary:2") as mon:
        mon.read()
        time.sleep(0.5)   # the window the report covers (a monitor's interval)
        assert sorted(m for c in mon.read().classes for m in c.members) == ["A", "B", "C"]
    with EventScope(uneven, "all", tree="kary:2") as scope:
        catalogue, leaves = scope.catalogue, [spec.leaves for spec in scope.plan()]
    # ...and a tree whose joins would split a member's trace elements is refused.
    node, names = next((node, names) for mine in leaves for node, names in mine.items() if len(names) > 1)
    split = [{node: names[:1]}, {node: names[1:]}]
    with pytest.raises(StageError, match=f"node {node} are read by more than one join"):
        check_tree([ScopeStage.parse("classes:ops@node")], split, catalogue)


def test_histograms_of_durations_merge_in_the_node_servers(uneven):
    with EventScope(uneven, "role:source", mode="stream", tree="per-node", placement="near",
                    stages=["histogram:duration@thread"]) as scope, \
            EventScope(uneven, "role:source", mode="stream") as raw:
        scope.pull()
        raw.pull()
        time.sleep(0.5)   # the window both pulls cover
        got = histogram.decode(scope.pull().records, scope.catalogue, "thread")
        events = raw.pull().records
    assert {h.group for h in got} == {f"T{i}" for i in range(6)}
    assert {h.op for h in got} == {"move", "observe"}
    busy = {h.op: h.count for h in got if h.group == BUSY}
    assert busy["observe"] == pytest.approx(3 * busy["move"], rel=0.2)
    assert len(events) > sum(h.count for h in got) / 3   # the raw stream saw the same traffic


@pytest.mark.slow   # 7-12 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_the_classes_command_prints_the_classes_live_and_as_json(uneven):
    proc = start_monitor(["monitor", "classes"], uneven, "--duration", "3")
    text = read_until(proc, f"class 2 ({BUSY})")
    assert "6 threads: class 1 (5 threads: T0..T3, T5)" in text and "3× the observes of class 1" in text
    assert finish(proc)[0] == 0
    proc = start_monitor(["monitor", "classes"], uneven, "--duration", "2", "--json", "--signature", "durations")
    status, lines = finish(proc)
    assert status == 0
    *reports, end = [json.loads(line) for line in lines]
    assert end["ended"] is False and end["pulls"] == len(reports)
    assert reports and all(r["signature"] == "durations" and r["members"] == [f"T{i}" for i in range(6)]
                           for r in reports)
    assert sorted(m for c in reports[-1]["classes"] for m in c["members"]) == [f"T{i}" for i in range(6)]
