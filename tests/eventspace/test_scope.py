"""Event scopes over live runs: modes, tree shapes and placements, reconfiguring, leases, faults, clocks.

The tests of a finished run's events run over both of pastset's backends: node processes reached
over ZeroMQ (`launch`), and node servers in this process reached by direct calls (`local://`)."""

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import pastset
from eventspace import clock, trace
from eventspace.catalogue import Catalogue
from eventspace.hosted import CLOCK_CHILDREN
from eventspace.scope import EventScope, ScopeError
from eventspace.stages import StageError
from eventspace.view import ViewError
from paths import Instrument, Selector, launch
from polling import until
from runs import ENV, FOUR_NODES, THREE_NODES, TWO_NODES, InProcessRun, pathmap_for, ring_app

KEEP = 50


def instrumented(n=6, cluster=THREE_NODES, keep=KEEP, nodes=None, name="sc"):
    pm = pathmap_for(ring_app(n), cluster, rule="round-robin", shape="kary:2", name=name)
    if nodes:
        pm = dataclasses.replace(pm, nodes=tuple(dataclasses.replace(nd, **nodes.get(nd.name, {}))
                                                 for nd in pm.nodes))
    return dataclasses.replace(pm, instrument=Instrument(keep=keep, collectors=(
        Selector(at=("source", "sink")), Selector(trees=("count", "step"))))).validate()


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """A run of node processes whose program has ended: its trace elements hold still while the
    scopes read them."""
    pm = instrumented()
    with launch(pm, run_dir=tmp_path_factory.mktemp("runs"), env=ENV) as run:
        run.run("programs:ring", {"steps": 40}, timeout=120)
        yield run


@pytest.fixture(scope="module")
def in_process():
    """The same run with its node servers in this process, reached through `local://` names."""
    run = InProcessRun(instrumented(name="sc-local"))
    try:
        run.run("programs:ring", {"steps": 40}, timeout=120)
        yield run
    finally:
        run.close()


@pytest.fixture(scope="module", params=["zeromq", "local"])
def finished(request):
    """A finished run over each backend: the same test bodies read it over ZeroMQ and in-process."""
    return request.getfixturevalue("launched" if request.param == "zeromq" else "in_process")


def direct(run, mode="latest"):
    """What the trace elements hold, read element by element through plain pastset clients."""
    catalogue = Catalogue(run.pathmap)
    parts = []
    for entry in catalogue:
        element = run.client(entry.trace_node).element(entry.trace)
        start, data = element.latest(1) if mode == "latest" else element.read_range(0, 1 << 40)
        parts.append(trace.decode(data))
    return _sorted(np.concatenate(parts))


def _sorted(records):
    return records[np.lexsort((records["t_start"], records["collector"]))]


SETTINGS = [
    dict(tree="flat", placement="monitor"),
    dict(tree="flat", placement="near"),
    dict(tree="kary:3", placement="monitor", concurrency="sequential"),
    dict(tree="kary:3", placement="near"),
    dict(tree="per-node", placement="near"),
    dict(tree="per-cluster", placement="near", concurrency="sequential"),
    dict(tree="per-cluster", placement="monitor"),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "/".join(s.values()))
def test_every_tree_shape_and_placement_pulls_the_same_events(finished, settings):
    expected_latest, expected_backlog = direct(finished, "latest"), direct(finished, "backlog")
    with EventScope(finished, "all", mode="latest", **settings) as scope:
        pulled = scope.pull()
        assert pulled.missing == set()
        assert np.array_equal(_sorted(pulled.records), expected_latest)
        assert len(pulled.records) == len(Catalogue(finished.pathmap))  # one per trace element
    with EventScope(finished, "all", mode="backlog", **settings) as scope:
        assert np.array_equal(_sorted(scope.pull().records), expected_backlog)


@pytest.mark.parametrize("placement", ["near", "monitor"])
def test_a_fresh_stream_delivers_the_backlog_and_counts_nothing_discarded_before_it_began(finished, placement):
    backlog = direct(finished, "backlog")
    with EventScope(finished, "thread:T0 | tree:count", mode="stream", tree="per-node", placement=placement) as scope:
        chosen = {e.id for e in scope.entries}
        dropped = sum(finished.client(e.trace_node).element(e.trace).first() for e in scope.entries)
        assert dropped > 0  # the rings discarded events before the scope was made
        first = scope.pull()
        assert np.array_equal(_sorted(first.records), backlog[np.isin(backlog["collector"], list(chosen))])
        assert first.discarded == 0
        again = scope.pull()
        assert len(again.records) == 0 and again.discarded == 0


def test_a_view_and_stages_narrow_what_is_pulled(finished):
    with EventScope(finished, "thread:T1", stages=["filter:op == 1", "convert:records"]) as scope:
        events = scope.pull().records
    assert events and {e["thread"] for e in events} == {"T1"} and {e["op"] for e in events} == {"move"}


def test_near_reductions_cut_the_bytes_that_travel(launched):
    figures = {}   # over ZeroMQ: in-process, no byte travels
    for stages in (["gather"], ["reduce:max_t_end@thread"]):
        with EventScope(launched, "role:source", mode="backlog", tree="per-node", placement="near",
                        stages=stages) as scope:
            pulled = scope.pull()
            figures[stages[0]] = (len(pulled.records), scope.stats().bytes_in)
    (gathered, gathered_bytes), (reduced, reduced_bytes) = figures["gather"], figures["reduce:max_t_end@thread"]
    assert reduced == 6 and gathered > 10 * reduced
    assert reduced_bytes * 5 < gathered_bytes


def test_scopes_coexist_and_close_removes_their_joins(finished):
    nodes = [n.name for n in finished.pathmap.nodes]
    a = EventScope(finished, "all", tree="per-node", placement="near")
    b = EventScope(finished, "thread:T2", tree="kary:2", placement="near", stages=["latest"])
    try:
        assert len(a.pull().records) and len(b.pull().records)
        placed = {n: finished.client(n).call("eventspace.scope.list") for n in nodes}
        assert sum(len(keys) for keys in placed.values()) == len(a.installed()) + len(b.installed())
        a.close()
        assert len(b.pull().records)
    finally:
        a.close()
        b.close()
    assert all(finished.client(n).call("eventspace.scope.list") == [] for n in nodes)


def test_bad_settings_fail_when_the_scope_is_made(finished):
    with pytest.raises(ViewError, match="unknown thread 'T99'"):
        EventScope(finished, "thread:T99")
    with pytest.raises(ViewError, match="selects no collector"):
        EventScope(finished, "thread:T0 & tree:count:arrival")
    with pytest.raises(StageError, match="does not parse"):
        EventScope(finished, "all", stages=["filter:op =="])
    with pytest.raises(ScopeError, match="unknown placement"):
        EventScope(finished, "all", placement="cloud")
    with pytest.raises(ScopeError, match="unknown mode"):
        EventScope(finished, "all", mode="everything")
    with pytest.raises(ScopeError, match="convert:records.*must be the last"):
        EventScope(finished, "all", stages=["convert:records", "latest"])


def test_reconfiguring_while_the_application_runs_loses_and_repeats_nothing(tmp_path):
    pm = instrumented(keep=5000, name="live")
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        run.start("programs:ring_forever", {"stop_after": 3, "pause": 0.002})
        seen = []
        with EventScope(run, "all", mode="stream", tree="flat", placement="monitor") as scope:
            for i, (tree, placement) in enumerate([("per-node", "near"), ("kary:2", "monitor"),
                                                   ("per-cluster", "near"), ("flat", "near")] * 3):
                time.sleep(0.1)   # traffic between two reconfigurations: what must be neither lost nor repeated
                pulled = scope.pull()
                assert pulled.discarded == 0 and not pulled.missing
                seen.append(pulled.records)
                scope.reconfigure(tree=tree, placement=placement)
            run.wait(timeout=60)
            seen.append(scope.pull().records)
        everything = np.concatenate(seen)
        written = {e.id: run.client(e.trace_node).element(e.trace).last() for e in Catalogue(pm)}
    counts = dict(zip(*np.unique(everything["collector"], return_counts=True)))
    assert {int(c): int(n) for c, n in counts.items()} == {c: n for c, n in written.items() if n}
    assert len(np.unique(everything)) == len(everything)  # and none twice


@pytest.mark.parametrize("placement", ["near", "monitor"])
def test_a_node_that_dies_is_reported_missing_and_the_pull_does_not_hang(tmp_path, placement):
    pm = instrumented(cluster=TWO_NODES, name="dies")
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        run.run("programs:ring", {"steps": 5}, timeout=60)
        with EventScope(run, "node:A | node:B", tree="per-node", placement=placement, timeout=1.0) as scope:
            assert not scope.pull().missing
            run.kill("B")
            run._processes["B"].wait(10)
            started = time.monotonic()
            pulled = scope.pull()
            assert time.monotonic() - started < 3
            assert pulled.missing == {"B"}
            assert set(pulled.records["collector"]) <= {e.id for e in scope.entries if e.trace_node == "A"}
            assert len(pulled.records)


def test_a_join_that_does_not_answer_leaves_the_nodes_below_it_unreached_not_missing(tmp_path):
    pm = instrumented(8, FOUR_NODES, name="unreached")
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        run.run("programs:ring", {"steps": 3}, timeout=60)
        with EventScope(run, "all", tree="kary:2", placement="near", timeout=1.0) as scope:
            # The tree is laid over the nodes: joins (A, B) on A and (C, D) on C under the root on A.
            below_c = {n for spec in scope.plan() for node, _, nodes in spec.children if node == "C"
                       for n in nodes} - {"C"}
            assert below_c == {"D"}, "the join on C does not read D's trace elements"
            run.kill("C")
            run._processes["C"].wait(10)
            pulled = scope.pull()
            assert pulled.missing == {"C"} and pulled.unreached == below_c
            # Everything that does not hang below a join on B, or live on B, still came.
            specs = {spec.key: spec for spec in scope.plan()}

            def below(spec):
                return ({name for names in spec.leaves.values() for name in names}
                        | {name for _, key, _ in spec.children for name in below(specs[key])})

            lost = {name for spec in specs.values() if spec.node == "C" for name in below(spec)}
            expected = {e.id for e in scope.entries if e.trace_node != "C" and e.trace not in lost}
            assert expected
            assert expected <= set(pulled.records["collector"].tolist())


MONITOR = textwrap.dedent("""\
    import sys, time
    from eventspace.scope import EventScope
    # Each node keeps a join that sends only its threads' newest events (the heartbeat's tree).
    scope = EventScope(sys.argv[1], "all", tree="per-node", placement="near", lease=1.0,
                       stages=["reduce:max_t_end@thread"])
    scope.pull()
    print("placed", flush=True)
    time.sleep(600)   # lives until the test kills it
""")


def test_joins_of_a_monitor_that_died_go_when_their_lease_ends(launched):
    finished = launched   # a monitor in another process reaches the nodes over ZeroMQ
    proc = subprocess.Popen([sys.executable, "-c", MONITOR, finished.run_file.path], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, **ENV})
    try:
        assert proc.stdout.readline().strip() == "placed"
        nodes = [n.name for n in finished.pathmap.nodes]
        assert any(finished.client(n).call("eventspace.scope.list") for n in nodes)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        until(lambda: not any(finished.client(n).call("eventspace.scope.list") for n in nodes), 10,
              "the dead monitor's joins gone when their lease ended")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.mark.parametrize("scheme", ["direct", "tree"])
def test_clock_offsets_are_estimated_within_a_millisecond(tmp_path, scheme):
    """Direct: the monitor asks each node. Tree (MRNet's two phases): A asks B, its cluster's other
    node, while C is a cluster alone; the monitor asks A and C, and B's offset is A's plus B's from A."""
    offsets = {"A": 0, "B": 50_000_000, "C": -50_000_000}
    clusters = {"A": "c1", "B": "c1", "C": "c2"}
    pm = instrumented(nodes={n: {"clock_offset_ns": o, "cluster": clusters[n]} for n, o in offsets.items()},
                      name="clocks")
    pm = dataclasses.replace(pm, clock=dataclasses.replace(pm.clock, samples=16, scheme=scheme)).validate()
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        estimates = clock.synchronise(pm, run.endpoints)
        assert sorted(estimates) == sorted(offsets)
        # Within a millisecond here; never beyond half the round trip of the sample kept (NTP's bound),
        # which a loaded machine widens.
        for node, truth in offsets.items():
            bound = max(1_000_000, estimates[node].delay_ns / 2)
            assert abs(estimates[node].offset_ns - truth) <= bound, (node, estimates[node])
        bound = max(2_000_000, (estimates["B"].delay_ns + estimates["C"].delay_ns) / 2)
        assert abs(clock.relative_to(estimates, "B")["C"] - (-100_000_000)) <= bound
        run.run("programs:ring", {"steps": 3}, timeout=60)
        corrected = {n: e.offset_ns for n, e in estimates.items()}
        with EventScope(run, "all", mode="backlog", clock_offsets=corrected) as scope:
            events = scope.pull().records
        now = time.monotonic_ns()
        # On the monitor's clock, every event happened in the last minute, whatever its node's offset.
        assert ((now - events["t_end"].astype(np.int64)) < 60e9).all()
        assert ((now - events["t_end"].astype(np.int64)) > 0).all()


def test_a_node_measures_the_clocks_of_its_run_s_nodes_only(launched):
    """The tree scheme's first phase has a node open connections: to the run's nodes, never to an
    address a caller names."""
    with pastset.connect(launched.endpoints["A"]) as client:
        measured = client.call(CLOCK_CHILDREN, ["B", "C"], 2, 2.0)
        assert sorted(measured) == ["B", "C"] and all(delay > 0 for _, delay in measured.values())
        with pytest.raises(pastset.PastSetError, match="tcp://10.0.0.1:22: not a node of this run"):
            client.call(CLOCK_CHILDREN, ["tcp://10.0.0.1:22"], 1, 0.5)
        # A caller cannot keep the node measuring for ever: samples and the timeout are bounded.
        for samples, timeout, said in ((10**9, 0.5, "samples"), (0, 0.5, "samples"), (2, 1e9, "timeout"),
                                       (2, -1.0, "timeout"), ("8", 0.5, "samples")):
            with pytest.raises(pastset.PastSetError, match=said):
                client.call(CLOCK_CHILDREN, ["B"], samples, timeout)
        assert sorted(client.call(CLOCK_CHILDREN, ["B", "B"], 1, 2.0)) == ["B"]   # the node still serves


def test_a_pull_through_a_closed_scope_is_refused(finished):
    scope = EventScope(finished, "all", tree="per-node", placement="near", stages=["reduce:max_t_end@thread"])
    assert len(scope.pull().records) and scope.installed()
    scope.close()
    scope.close()  # a second close is harmless
    assert scope.installed() == []
    with pytest.raises(ScopeError, match="closed") as refused:
        scope.pull()
    # The caller's mistake, not a node fault: a monitor that rides out PastSetErrors does not swallow it.
    assert not isinstance(refused.value, pastset.PastSetError)


@pytest.mark.parametrize("tree, joins", [("per-node", {"root": "ABC"}),
                                         ("per-cluster", {"cluster-c1": "AB", "root": "C"})])
def test_a_join_that_would_read_one_node_only_is_not_made_its_node_answers_the_join_above(in_process, tree, joins):
    """Laid over the nodes, per-node would make a join per node that reads that node alone and only
    forwards its reply (a level that cost per-node near 0.56x flat's rate on the paper's layout)."""
    with EventScope(in_process, "all", tree=tree, placement="near") as scope:
        plan = {spec.key.rsplit("/", 1)[1]: "".join(sorted(spec.leaves)) for spec in scope.plan()}
        assert plan == joins
        assert len(scope.pull().records) == len(scope.entries)


def test_near_joins_run_in_node_servers_and_the_root_in_the_monitor(in_process):
    """MRNet's front end: a root placed on a node would only forward the tree's result to the
    monitor, one more hop per pull (per-cluster near pulled at 0.61x flat's rate that way)."""
    with EventScope(in_process, "all", tree="per-cluster", placement="near") as scope:
        where = {spec.key.rsplit("/", 1)[1]: spec.node for spec in scope.plan()}
        assert where == {"cluster-c1": "A", "root": None}
        assert [node for node, _ in scope.installed()] == ["A"]
        assert len(scope.pull().records) == len(scope.entries)


def test_with_a_reducing_stage_each_node_keeps_its_join_so_only_the_reduced_records_leave_it(in_process):
    """A join over one node's records is worth making when it runs the scope's stages: newest
    event per thread on each node sends one record per thread up, not every trace element's."""
    with EventScope(in_process, "all", tree="per-node", placement="near",
                    stages=["reduce:max_t_end@thread"]) as scope:
        plan = {spec.key.rsplit("/", 1)[1]: "".join(sorted(spec.leaves)) for spec in scope.plan()}
        assert sorted(plan.values()) == ["", "A", "B", "C"]
        assert {spec.node for spec in scope.plan() if spec.leaves} == {"A", "B", "C"}
        threads = {entry.thread for entry in scope.entries if entry.thread}
        assert len(scope.pull().records) <= len(threads) + 1


def test_a_pipelined_scope_delivers_whole_pulls_and_reshapes_and_closes_with_pulls_in_flight(launched):
    """pipeline=3 keeps three pulls under way: each one returned is the whole view, as unpipelined."""
    with EventScope(launched, "all", pipeline=3) as scope:
        whole = {e.id for e in scope.entries}
        for _ in range(5):
            pulled = scope.pull()
            assert set(pulled.records["collector"].tolist()) == whole and not pulled.missing
        assert scope.stats().pulls == 5     # the two still in flight are not counted until delivered
        scope.reconfigure(tree="per-cluster", placement="near", pipeline=2)
        assert scope.installed() and scope.pipeline == 2
        for _ in range(3):
            assert set(scope.pull().records["collector"].tolist()) == whole
        installed = scope.installed()
    # Closed with a pull in flight: its joins are gone from the node servers.
    for node, key in installed:
        assert key not in launched.client(node).call("eventspace.scope.list")


@pytest.mark.parametrize("kwargs, message", [
    (dict(mode="stream", pipeline=2), "needs latest or backlog mode"),
    (dict(pipeline=0), "whole number from 1 to 16"),
    (dict(pipeline=2.5), "whole number from 1 to 16"),
])
def test_a_pipeline_the_scope_cannot_keep_is_refused(launched, kwargs, message):
    with pytest.raises(ScopeError, match=message):
        EventScope(launched, "all", **kwargs)
