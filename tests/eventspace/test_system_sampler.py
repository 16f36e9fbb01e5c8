"""System summary records (SESAME): every node server samples its CPU, memory and communication per
interval into a trace element of its own, found through views and switched like collectors."""

import dataclasses
import time

import numpy as np
import pytest

from eventspace import system, trace
from eventspace.catalogue import Catalogue
from eventspace.cli import main
from eventspace.scope import EventScope
from eventspace.view import View
from paths import Instrument, Selector, launch
from polling import until
from runs import ENV, THREE_NODES, pathmap_for, ring_app


def instrumented(name):
    pm = pathmap_for(ring_app(6), THREE_NODES, rule="block", shape="kary:2", name=name)
    return dataclasses.replace(pm, instrument=Instrument(keep=100, collectors=(
        Selector(at=("source",)), Selector(trees=("count",))))).validate()


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """Six threads on three nodes passing a token round the ring for a minute."""
    with launch(instrumented("system"), run_dir=tmp_path_factory.mktemp("runs"), env=ENV) as run:
        run.start("programs:ring_forever", {"stop_after": 60, "pause": 0.002})
        catalogue = Catalogue(run.pathmap)
        until(lambda: all(run.client(n.name).element(catalogue.system_of(n.name).trace).last() > 0
                          for n in run.pathmap.nodes), 30, "a sample of every node")
        yield run


def samples_of(run, seconds=1.0):
    with EventScope(run, "role:system", mode="stream") as scope:
        scope.pull()
        time.sleep(seconds)   # the window the samples come from
        return system.samples(scope.pull().records, scope.catalogue)


def test_each_node_has_a_system_element_numbered_after_the_collectors():
    pm = instrumented("ids")
    catalogue = Catalogue(pm)
    assert len(catalogue) == len(pm.collector_points())      # collector ids do not move
    assert [(e.id, e.node, e.role, e.trace) for e in catalogue.system] == [
        (len(catalogue) + i, node, "system", f"trace/{len(catalogue) + i}") for i, node in enumerate("ABC", 1)]
    assert catalogue[len(catalogue) + 2].node == "B"
    # Only a view that names them chooses them.
    ids = lambda text: {e.id for e in View.parse(text).select(catalogue)}   # noqa: E731
    assert ids("role:system") == {e.id for e in catalogue.system}
    assert ids("role:system & node:B") == {catalogue.system_of("B").id}
    assert ids("all") == ids("node:A | node:B | node:C") == {e.id for e in catalogue.entries}
    assert ids("all | role:system") == {e.id for e in catalogue.entries + catalogue.system}


def test_every_node_samples_its_cpu_memory_and_communication_every_interval(busy):
    found = samples_of(busy)
    nodes = {s.node for s in found}
    assert nodes == {"A", "B", "C"}
    for node in nodes:
        mine = [s for s in found if s.node == node]
        assert 4 <= len(mine) <= 25                         # about ten in a second
        spans = [(s.t_end - s.t_start) / 1e6 for s in mine]
        assert all(50 < ms < 1_000 for ms in spans), spans  # 100 ms apart, give or take a busy machine
        assert sum(s.cpu_user + s.cpu_system for s in mine) > 0
        assert all(s.rss_bytes > 10 * 2**20 for s in mine)
        assert sum(s.msgs_in for s in mine) > 0 and sum(s.bytes_out for s in mine) > 0
        threads = {t for s in mine for t in s.threads}
        assert threads == {t.name for t in busy.pathmap.threads_on(node)}


def test_a_samples_records_are_trace_tuples_with_the_value_over_arg_and_nbytes(busy):
    with EventScope(busy, "role:system & node:A", mode="backlog") as scope:
        records = scope.pull().records
    assert len(records) and (records["flags"] == trace.SYSTEM).all()
    assert set(records["op"].tolist()) == set(system.PROCESS_METRICS)
    assert set(records["element"].tolist()) == {0, 1, 2}     # the process, T0 and T1
    rss = records[records["op"] == system.RSS]
    assert (system.values(rss) == rss["arg"].astype(np.uint64) + (rss["nbytes"].astype(np.uint64) << 32)).all()
    labelled = Catalogue(busy.pathmap).label(records[records["element"] == 2][:1])[0]
    assert labelled["thread"] == "T1" and labelled["node"] == "A" and labelled["op"].startswith("cpu_")


def test_sampling_switches_off_and_on_like_collectors(busy, capsys):
    catalogue = Catalogue(busy.pathmap)
    element = busy.client("B").element(catalogue.system_of("B").trace)
    assert main(["space", "switch", "off", "--run", busy.run_file.path, "--view", "role:system & node:B"]) == 0
    assert "switched off 0 collectors and 1 system samplers on 1 nodes (B)" in capsys.readouterr().out
    time.sleep(0.3)   # a sample under way when the switch came
    stopped = element.last()
    time.sleep(0.5)   # what is under test: no sample within 0.5 s (more than an interval)
    assert element.last() == stopped
    assert samples_of(busy, 0.5) and {s.node for s in samples_of(busy, 0.5)} == {"A", "C"}
    assert main(["space", "switch", "on", "--run", busy.run_file.path, "--view", "role:system"]) == 0
    until(lambda: element.last() > stopped, 10, "a sample of node B once switched on again")
