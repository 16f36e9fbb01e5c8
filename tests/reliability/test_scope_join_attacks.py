"""Scope joins placed on a node by any client of it (issue #31, item 1): every field of an install is
bounded, a join reaches only its own run's nodes, a join cannot be its own child, one connection
cannot take every deferred-call slot, and under CURVE only an authorised client places joins.
The node answers each attack with one error, and a monitor's scope and a bystander go on."""

from __future__ import annotations

import dataclasses
import math
import uuid

import pytest
import zmq

import pastset
from eventspace.catalogue import Catalogue
from eventspace.gather import Pulled
from eventspace.hosted import INSTALL, LIST, PULL, RENEW
from eventspace.scope import EventScope
from paths import Instrument, NodeServer, Selector, launch
from pastset import protocol as p
from runs import ENV, THREE_NODES, pathmap_for, ring_app
from server_attacks import Bystander, Peer, memory_kb

# The bounds, as eventspace.gather.JoinLimits and pastset.Limits set them (written out: a test of
# today's main must run, and fail on what it does, not on an import).
MAX_TIMEOUT = 60.0
MAX_LEASE = 600.0
MAX_STAGES = 16
MAX_STAGE = 4096
JOIN_SHARE = 1_000           # JoinLimits().max_joins_per_client


def instrumented(name: str, keys=None):
    pm = pathmap_for(ring_app(6), THREE_NODES, rule="round-robin", shape="kary:2", name=name)
    pm = dataclasses.replace(pm, instrument=Instrument(keep=50, collectors=(Selector(at=("source", "sink")),)))
    if keys is not None:
        pm = dataclasses.replace(pm, security=dataclasses.replace(pm.security, keys=str(keys)))
    return pm.validate()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Three node processes (A, B, C) whose program has ended: their trace elements hold still."""
    with launch(instrumented("joins"), run_dir=tmp_path_factory.mktemp("runs"), env=ENV) as run:
        run.run("programs:ring", {"steps": 20}, timeout=120)
        yield run


def spec(run, node="A", **changes) -> dict:
    """A join on `node` that reads the trace elements of `node`, as a scope would place it."""
    catalogue = Catalogue(run.pathmap)
    base = dict(key=f"attack-{uuid.uuid4().hex[:8]}/j", level=1, node=node,
                leaves={node: [e.trace for e in catalogue.on_node(node)]}, children=[], stages=[],
                mode="latest", concurrency="concurrent", timeout=10.0, endpoints=dict(run.endpoints), cursors={})
    base.update(changes)
    return base


def joins_on(run, node: str) -> list[str]:
    return run.client(node).call(LIST)


def assert_refused(run, node, wire, lease=10.0, match=None) -> str:
    """The install is refused with one error (the message, returned), and nothing is placed."""
    before = joins_on(run, node)
    with pytest.raises(pastset.PastSetError) as refused:
        run.client(node).call(INSTALL, wire, lease)
    assert joins_on(run, node) == before
    message = str(refused.value)
    if match is not None:
        assert match in message, message
    return message


def key_of(name: str) -> str:
    return f"attack-{uuid.uuid4().hex[:8]}/{name}"


# -- every field is bounded -------------------------------------------------------------------------

def test_a_filter_that_builds_a_huge_string_is_refused_when_placed(run):
    """Attack: `filter:"x" * 3_000_000_000 == op` (at the first pull: a 3 GB string, a 3 s stall)."""
    rss = memory_kb(run.pids["A"])["VmRSS"]
    message = assert_refused(run, "A", spec(run, stages=['filter:"x" * 3_000_000_000 == op']))
    assert "filter" in message and "number" in message, message
    assert memory_kb(run.pids["A"])["VmRSS"] - rss < 50_000


@pytest.mark.parametrize("stages, limit", [
    (["filter:" + " or ".join(["op == 1"] * 700)], "max_stage"),
    (["latest"] * (MAX_STAGES + 1), "max_stages"),
    ([7], None),
    ("latest", None),
], ids=["long-filter", "many-stages", "not-text", "not-a-list"])
def test_stages_are_bounded_in_number_and_size(run, stages, limit):
    message = assert_refused(run, "A", spec(run, stages=stages))
    if limit is not None:
        assert f"JoinLimits.{limit}" in message, message


def test_millions_of_leaf_names_are_refused_and_take_no_memory(run):
    """Attack: installs that name 3.5M leaves (1.7 GB kept for good, outside the memory budget). The
    wire refuses a list that long before it is decoded (Limits.max_objects); a list the wire lets
    through but longer than a join may read is refused by the join's own bound."""
    rss = memory_kb(run.pids["A"])["VmRSS"]
    for _ in range(3):
        assert_refused(run, "A", spec(run, leaves={"A": ["x"] * 3_500_000}), match="Limits.max_objects")
        assert_refused(run, "A", spec(run, leaves={"A": ["x"] * 150_000}), match="JoinLimits.max_leaves")
    assert memory_kb(run.pids["A"])["VmRSS"] - rss < 200_000


@pytest.mark.parametrize("leaves, words", [
    ({"A": ["trace/no-such"]}, "trace/no-such"),
    ({"Z": ["trace/1"]}, "not a node of this run"),
    ({"A": "trace/1"}, "list"),
    ({"A": ["trace/1", "trace/1"]}, "twice"),
], ids=["unknown-element", "unknown-node", "not-a-list", "twice"])
def test_a_leaf_is_a_trace_element_of_the_run_on_its_node(run, leaves, words):
    catalogue = Catalogue(run.pathmap)
    first = catalogue.on_node("A")[0].trace
    leaves = {node: [first if n == "trace/1" else n for n in names] if isinstance(names, list) else first
              for node, names in leaves.items()}
    assert_refused(run, "A", spec(run, leaves=leaves), match=words)


@pytest.mark.parametrize("lease", [math.nan, math.inf, -1.0, 0, MAX_LEASE * 10, "10", None, True])
def test_a_lease_is_a_finite_number_of_seconds_up_to_a_maximum(run, lease):
    """Attack: a lease of NaN never ends (its join is kept for good)."""
    assert_refused(run, "A", spec(run), lease=lease)


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -1.0, 0, 1e6, "2", None])
def test_a_pull_timeout_is_a_positive_number_of_seconds_up_to_a_maximum(run, timeout):
    assert_refused(run, "A", spec(run, timeout=timeout))


@pytest.mark.parametrize("changes", [
    {"key": "k" * 100_000}, {"key": 7}, {"level": -1}, {"level": 10 ** 9}, {"level": "1"},
    {"mode": "everything"}, {"concurrency": "all-at-once"}, {"node": "B"},
    {"cursors": {"A/trace/1": -5}}, {"cursors": {"elsewhere": 1}}, {"children": [["A"]]},
    {"children": [["Z", "k", ["Z"]]]}, {"endpoints": {"A": 7}},
], ids=lambda c: f"{next(iter(c))}={str(next(iter(c.values())))[:12]}")
def test_every_other_field_is_checked(run, changes):
    assert_refused(run, "A", spec(run, **changes))


def test_a_renewal_cannot_make_a_lease_endless(run):
    wire = spec(run)
    run.client("A").call(INSTALL, wire, 10.0)
    for lease in (math.nan, math.inf, MAX_LEASE * 10):
        with pytest.raises(pastset.PastSetError):
            run.client("A").call(RENEW, [wire["key"]], lease)
    run.client("A").call("eventspace.scope.remove", wire["key"])


def test_one_connection_places_at_most_its_share_of_joins(run):
    """Attack: one connection places join after join (each a few kB, leased for long): it is refused
    at its share, and another connection still places one."""
    ctx = zmq.Context()
    try:
        greedy = Peer(ctx, run.endpoints["A"])
        wire = spec(run)
        for rid in range(JOIN_SHARE + 1):
            greedy.request(rid, p.CALL, INSTALL, [{**wire, "key": f"greedy/{rid}"}, MAX_LEASE])
        replies = [greedy.reply(30)[0] for _ in range(JOIN_SHARE + 1)]
        refused = [r for r in replies if r[1] != p.OK]
        assert len(refused) == 1 and refused[0][0] == JOIN_SHARE, refused[:3]
        assert refused[0][2] == "LimitExceeded" and "JoinLimits.max_joins_per_client" in refused[0][3]
        run.client("A").call(INSTALL, wire, 10.0)
        for rid in range(JOIN_SHARE):
            greedy.request(rid, p.CALL, "eventspace.scope.remove", [f"greedy/{rid}"])
        assert all(greedy.reply(30)[0][1] == p.OK for _ in range(JOIN_SHARE))
        run.client("A").call("eventspace.scope.remove", wire["key"])
    finally:
        ctx.destroy(0)


def test_joins_are_counted_in_the_nodes_memory_budget_while_they_are_there():
    """Joins of long filters on a node with a small budget: placed until the budget is spent
    (LimitExceeded naming it), and the bytes come back when they go."""
    node = NodeServer(instrumented("budget"), "A", limits=pastset.Limits(max_memory=64 << 20, max_reply=1 << 20))
    try:
        catalogue = Catalogue(node.pathmap)
        long_filter = "filter:" + " or ".join(["op == 1"] * 350)
        wire = dict(key="", level=1, node="A", leaves={"A": [e.trace for e in catalogue.on_node("A")]},
                    children=[], stages=[long_filter] * MAX_STAGES, mode="latest", concurrency="concurrent",
                    timeout=2.0, endpoints={}, cursors={})
        budget = node.server.budget
        before = budget.used
        placed = 0
        with pytest.raises(pastset.LimitExceeded, match="Limits.max_memory"):
            while placed < 100:
                node.server.call(INSTALL, {**wire, "key": f"big/{placed}"}, 10.0)
                placed += 1
        assert 0 < placed < 100 and budget.used - before > placed * MAX_STAGES * len(long_filter) * 100
        for i in range(placed):
            node.server.call("eventspace.scope.remove", f"big/{i}")
        assert budget.used == before
    finally:
        node.close()


# -- a join reaches its own run only, and is never its own descendant ---------------------------------

def test_a_join_reaches_the_runs_nodes_where_they_listen_never_where_a_caller_says(run):
    """Attack: a join on A whose spec names B at an address of the attacker's (any address: the node
    connects to it). The join reads B where B listens; the attacker's socket hears nothing."""
    ctx = zmq.Context()
    trap = ctx.socket(zmq.ROUTER)
    trap.setsockopt(zmq.LINGER, 0)
    port = trap.bind_to_random_port("tcp://127.0.0.1")
    try:
        catalogue = Catalogue(run.pathmap)
        wire = spec(run, leaves={"B": [e.trace for e in catalogue.on_node("B")]},
                    endpoints={**run.endpoints, "B": f"tcp://127.0.0.1:{port}"})
        run.client("A").call(INSTALL, wire, 10.0)
        pulled = Pulled.from_wire(run.client("A").call(PULL, wire["key"], timeout=30), Catalogue(run.pathmap))
        assert not trap.poll(200), "the node connected to the address the caller named"
        assert pulled.missing == set() and len(pulled.records) == len(catalogue.on_node("B"))
        run.client("A").call("eventspace.scope.remove", wire["key"])
    finally:
        trap.close(0)
        ctx.destroy(0)


def test_a_join_reaches_an_address_the_pathmap_allows(tmp_path):
    """The pathmap's security.join_endpoints lets a monitor name another address of a node (a relay):
    a join placed by that monitor asks there."""
    ctx = zmq.Context()
    relay = ctx.socket(zmq.ROUTER)
    relay.setsockopt(zmq.LINGER, 0)
    address = f"tcp://127.0.0.1:{relay.bind_to_random_port('tcp://127.0.0.1')}"
    pm = instrumented("relayed")
    pm = dataclasses.replace(pm, security=dataclasses.replace(pm.security, join_endpoints=(address,))).validate()
    try:
        with launch(pm, run_dir=tmp_path, env=ENV) as run:
            catalogue = Catalogue(run.pathmap)
            wire = spec(run, timeout=0.5, leaves={"B": [e.trace for e in catalogue.on_node("B")]},
                        endpoints={**run.endpoints, "B": address})
            run.client("A").call(INSTALL, wire, 10.0)
            pulled = Pulled.from_wire(run.client("A").call(PULL, wire["key"], timeout=30), Catalogue(run.pathmap))
            assert relay.poll(1000), "the join did not ask at the address the pathmap allows"
            assert pulled.missing == {"B"}   # the relay never answers
    finally:
        ctx.destroy(0)


def test_the_joins_below_a_join_on_its_node_reach_the_nodes_they_read(run):
    """A join on A whose child on A reads C: the parent's round asks C for the child (found by the
    join fuzzer: the round knew only the parent's own nodes, and the pull failed with ServerGone)."""
    below, above = key_of("below"), key_of("above")
    run.client("A").call(INSTALL, spec(run, key=below, level=2, children=[["C", "anything", ["C"]]]), 10.0)
    run.client("A").call(INSTALL, spec(run, key=above, level=1, children=[["A", below, ["A", "C"]]]), 10.0)
    pulled = Pulled.from_wire(run.client("A").call(PULL, above, timeout=30), Catalogue(run.pathmap))
    assert pulled.missing == {"C"} and len(pulled.records)   # C has no join `anything`
    for key in (below, above):
        run.client("A").call("eventspace.scope.remove", key)


def test_a_join_cannot_be_its_own_child(run):
    key = key_of("self")
    assert_refused(run, "A", spec(run, key=key, children=[["A", key, ["A"]]]), match="own child")


def test_joins_that_are_each_others_children_do_not_recurse(run):
    """Two joins on A, each the other's child (and, across nodes, A's join below B's below A's):
    a child must be on a lower level of the tree than its parent, so a pull ends at once."""
    x, y = key_of("x"), key_of("y")
    client = run.client("A")
    client.call(INSTALL, spec(run, key=y, level=2, children=[["A", x, ["A"]]]), 10.0)
    client.call(INSTALL, spec(run, key=x, level=1, children=[["A", y, ["A"]]]), 10.0)
    for key in (x, y):
        with pytest.raises(pastset.PastSetError, match="level"):
            client.call(PULL, key, timeout=30)
    u, v = key_of("u"), key_of("v")
    run.client("B").call(INSTALL, spec(run, node="B", key=v, level=2, children=[["A", u, ["A"]]]), 10.0)
    client.call(INSTALL, spec(run, key=u, level=1, children=[["B", v, ["B", "A"]]]), 10.0)
    pulled = Pulled.from_wire(client.call(PULL, u, timeout=30), Catalogue(run.pathmap))
    assert pulled.missing == {"A"}   # A refused B's pull of A's join: it is not below B's
    for node, key in (("A", x), ("A", y), ("A", u), ("B", v)):
        run.client(node).call("eventspace.scope.remove", key)


# -- deferred slots: an endpoint that never answers, and one attacker ----------------------------

def pulls_handled(peer: Peer, key: str, n: int) -> list[list]:
    """Send `n` pulls of join `key` and a ping; the replies that came before the ping's (the node
    has handled every pull by then: each was answered, refused, or is waiting on its round)."""
    for rid in range(n):
        peer.request(rid, p.CALL, PULL, [key])
    peer.request(-1, p.PING)
    replies = []
    while True:
        reply, _ = peer.reply(30)
        if reply[0] == -1:
            return replies
        replies.append(reply)


def test_pulls_against_an_endpoint_that_never_answers_do_not_take_the_monitors_slots(tmp_path):
    """Attack: a join on A whose child is on C, at an address of the attacker's that accepts
    connections and never answers; then 600 pulls of it pipelined from one connection and 40 from
    each of 20 more, each waiting up to its timeout. The node reaches C where C listens (it answers
    at once), so no pull waits; a monitor's near scope over A and B is served all the while, and a
    bystander's moves on A too. (pastset's per-connection share of deferred calls, for pulls that do
    wait on a silent node of the run, is tested in test_client_shares.py.)"""
    with launch(instrumented("deferred"), run_dir=tmp_path, env=ENV) as run:
        run.run("programs:ring", {"steps": 5}, timeout=120)
        ctx = zmq.Context()
        trap = ctx.socket(zmq.ROUTER)
        trap.setsockopt(zmq.LINGER, 0)
        port = trap.bind_to_random_port("tcp://127.0.0.1")
        try:
            wire = spec(run, timeout=30.0, children=[["C", "anything", ["C"]]],
                        endpoints={**run.endpoints, "C": f"tcp://127.0.0.1:{port}"})
            run.client("A").call(INSTALL, wire, 60.0)
            with Bystander(run.endpoints["A"]) as bystander:
                greedy = Peer(ctx, run.endpoints["A"])
                crowd = [Peer(ctx, run.endpoints["A"]) for _ in range(20)]
                replies = pulls_handled(greedy, wire["key"], 600)
                for peer in crowd:
                    pulls_handled(peer, wire["key"], 40)
                with EventScope(run, "node:A | node:B", tree="per-node", placement="near", timeout=5.0,
                                stages=["reduce:max_t_end@thread"]) as scope:
                    assert scope.installed()
                    for _ in range(5):
                        pull = scope.pull()
                        assert pull.missing == set() and len(pull.records)
                replies += [greedy.reply(10)[0] for _ in range(600 - len(replies))]
                pulled = [Pulled.from_wire(r[2], Catalogue(run.pathmap)) for r in replies if r[1] == p.OK]
                refused = [r for r in replies if r[1] != p.OK]
                print(f"600 pulls from one connection: {len(pulled)} answered, {len(refused)} refused")
                assert pulled and all(pull.missing == {"C"} and pull.gone == set() for pull in pulled)
                assert all(r[2] == "LimitExceeded" and "Limits.max_deferred_per_client" in r[3] for r in refused)
                seen = bystander.finish()
            assert not trap.poll(100), "the node connected to the address the caller named"
            assert not seen["errors"] and seen["worst_s"] < 1.0, seen
        finally:
            ctx.destroy(0)


# -- under CURVE, only an authorised client places joins ------------------------------------------

def test_under_curve_a_client_whose_key_was_taken_away_places_no_join(tmp_path):
    """A second client key is authorised when the run starts, then removed from authorized_clients/:
    its connection stays up (CURVE checks a key once, at the handshake), but it can no longer place
    joins; the run's own key still can."""
    keys, other = tmp_path / "keys", tmp_path / "other"
    pastset.security.generate(keys)
    pastset.security.generate(other)
    (keys / "authorized_clients" / "other.key").write_bytes((other / "client.key").read_bytes())
    theirs = dataclasses.replace(pastset.Security.load(other),
                                 server_public=pastset.Security.load(keys).server_public)
    with launch(instrumented("curve", keys), run_dir=tmp_path, env=ENV) as run:
        run.run("programs:ring", {"steps": 3}, timeout=120)
        with pastset.connect(run.endpoints["A"], security=theirs) as intruder:
            placed = spec(run)
            intruder.call(INSTALL, placed, 10.0)       # authorised: placed
            intruder.call("eventspace.scope.remove", placed["key"])
            (keys / "authorized_clients" / "other.key").unlink()
            with pytest.raises(pastset.AuthError, match="authorized_clients"):
                intruder.call(INSTALL, spec(run), 10.0)
            assert intruder.call(LIST) == []
        pastset.security.use(pastset.Security.load(keys))   # the run's own keys for this process's scope
        try:
            with EventScope(run, "all", tree="per-node", placement="near", stages=["reduce:max_t_end@thread"]) as scope:
                assert scope.installed() and len(scope.pull().records)
        finally:
            pastset.security.use(None)


@pytest.mark.parametrize("where", ["t_end + -1 > 0", "t_end < 'x'", "t_end * 1" + "0" * 30 + " > 1"])
def test_a_filter_that_cannot_be_computed_on_records_is_one_clear_error(run, where):
    """Attack: a filter that parses but fails on trace records (a negative number added to an unsigned
    field, a field ordered against text, a number past 64 bits): the pull's answer was a Python
    exception's (`hosted call a deferred call failed: OverflowError`), or the join is refused."""
    wire = spec(run, stages=[f"filter:{where}"])
    try:
        run.client("A").call(INSTALL, wire, 10.0)
    except pastset.BadArgument as exc:
        assert "64-bit" in str(exc), exc
        return
    with pytest.raises(pastset.BadArgument) as refused:
        run.client("A").call(PULL, wire["key"], timeout=30)
    assert f"filter {where!r}: cannot be computed" in str(refused.value), refused.value
    run.client("A").call("eventspace.scope.remove", wire["key"])
