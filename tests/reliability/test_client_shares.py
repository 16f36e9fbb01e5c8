"""One client that takes every shared slot of a node server: the parked (blocked) requests, or the
element table. It is refused once it holds its share; its neighbours go on parking and entering."""

from __future__ import annotations

import threading

import pytest
import zmq

import pastset
from pastset import protocol as p
from polling import until
from server_attacks import Peer

PARKED = 10_000            # pastset.Limits().max_parked: the whole server
PARKED_SHARE = 1_000       # pastset.Limits().max_parked_per_client: one connection
ELEMENT_SHARE = 10_000     # pastset.Limits().max_elements_per_client: one connection


def pipelined(peer: Peer, requests: list[tuple]) -> list[list]:
    """Send every request, then a ping; every reply that came before the ping's."""
    for fields in requests:
        peer.request(*fields)
    peer.request(-1, p.PING)
    replies = []
    while True:
        reply, _ = peer.reply()
        if reply[0] == -1:
            return replies
        replies.append(reply)


def observe_in_background(element, timeout: float):
    got = {}

    def run():
        try:
            got["value"] = element.observe(timeout=timeout)
        except pastset.PastSetError as exc:
            got["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


@pytest.fixture
def target(spawn_server):
    """(node server process, zmq context, a client of it)."""
    server = spawn_server()
    ctx = zmq.Context()
    with pastset.connect(server.endpoint) as client:
        yield server, ctx, client
    ctx.destroy(linger=0)


def assert_neighbour_is_served(client, name: str) -> None:
    """Another client parks an observe, and is answered when a tuple arrives."""
    mine = client.enter(name, ["int"])
    thread, got = observe_in_background(mine, timeout=20)
    until(lambda: client.call("parked", name) == 1, what="the neighbour's observe parked")
    mine.move((7,))
    thread.join(25)
    assert got == {"value": (7,)}, f"the neighbour's blocking observe got {got}"


def test_one_connection_cannot_park_every_blocked_request(target):
    """Attack: 10,001 observes that must wait, pipelined from one connection, then a neighbour's observe."""
    server, ctx, client = target
    eid = client.enter("starved", ["int"]).id
    greedy = Peer(ctx, server.endpoint)
    refusals = pipelined(greedy, [(rid, p.OBSERVE, eid, None, None) for rid in range(PARKED + 1)])
    print(f"{PARKED + 1} pipelined observes: {PARKED + 1 - len(refusals)} parked, {len(refusals)} refused")
    assert_neighbour_is_served(client, "neighbour")
    assert len(refusals) == PARKED + 1 - PARKED_SHARE
    assert all(r[2] == "LimitExceeded" and "Limits.max_parked_per_client" in r[3] for r in refusals)
    client.element("starved").move((1,))                 # the greedy one's own requests still work
    reply, _ = greedy.reply()
    assert reply[1:] == [p.OK, [1]]


def test_many_connections_cannot_take_the_reserve(target):
    """Attack: 12 connections of one client each park their share (12,000), then a neighbour's observe."""
    server, ctx, client = target
    eid = client.enter("starved", ["int"]).id
    greedy = [Peer(ctx, server.endpoint) for _ in range(12)]
    parked = 0
    for k, peer in enumerate(greedy):
        refused = pipelined(peer, [(rid, p.OBSERVE, eid, None, None) for rid in range(PARKED_SHARE)])
        parked += PARKED_SHARE - len(refused)
    print(f"12 connections x {PARKED_SHARE} observes: {parked} parked")
    assert_neighbour_is_served(client, "neighbour")
    assert parked < PARKED


def test_one_connection_cannot_fill_the_element_table(target):
    """Attack: one connection enters element after element, then a neighbour enters one."""
    server, ctx, client = target
    greedy = Peer(ctx, server.endpoint)
    made = ELEMENT_SHARE + 1
    replies = pipelined(greedy, [(i, p.ENTER, f"greedy/{i}", ["int"], None, None) for i in range(made)])
    refused = [r for r in replies if r[1] == p.ERROR]
    print(f"{made} elements entered by one connection: {len(replies) - len(refused)} made, {len(refused)} refused")
    assert client.enter("neighbour", ["int"]).move((1,)) == 0
    assert len(refused) == 1 and refused[0][0] == ELEMENT_SHARE
    assert refused[0][2] == "LimitExceeded" and "Limits.max_elements_per_client" in refused[0][3]
    # Binding to elements that exist takes no share; deleting one of its own gives one back.
    assert pipelined(greedy, [(1, p.ENTER, "neighbour", ["int"], None, None)])[0][1] == p.OK
    assert pipelined(greedy, [(2, p.ENTER, "greedy/new", ["int"], None, None)])[0][2] == "LimitExceeded"
    client.delete("greedy/0")
    assert pipelined(greedy, [(3, p.ENTER, "greedy/new", ["int"], None, None)])[0][1] == p.OK


# A node server whose hosted call `hold(seconds)` is answered that many seconds later, by the loop that
# carries it (an inline call returning a Deferred, as a scope join's pull that waits on a silent node is).
HOLDING_SERVER = """\
import sys, time
import pastset
from pastset.deferred import Deferred


class Held(Deferred):
    def __init__(self, seconds):
        super().__init__()
        self.at = time.monotonic() + seconds

    def sockets(self):
        return []

    def wake_at(self):
        return self.at

    def readable(self, sock):
        pass

    def tick(self):
        if time.monotonic() >= self.at:
            self._settle("held")


server = pastset.TupleServer("holding")
server.host("hold", lambda seconds: Held(float(seconds)), inline=True)
print(server.serve("tcp://127.0.0.1:0"), flush=True)
sys.stdin.read()
server.close()
"""
DEFERRED = 512             # pastset.Limits().max_calls: deferred calls one endpoint carries at once
DEFERRED_SHARE = 32        # pastset.Limits().max_deferred_per_client: of them, one connection's


@pytest.fixture
def holding(spawn_server):
    """(endpoint of a node server process hosting `hold`, zmq context)."""
    server = spawn_server(HOLDING_SERVER)
    ctx = zmq.Context()
    yield server.endpoint, ctx
    ctx.destroy(linger=0)


def test_one_connection_cannot_take_every_deferred_call_slot(holding):
    """Attack: 600 calls that wait 60 s on the loop (as pulls of a join whose child is on a silent node
    do), pipelined from one connection, then 40 from each of 20 more; then a neighbour's call."""
    endpoint, ctx = holding
    greedy = Peer(ctx, endpoint)
    refused = pipelined(greedy, [(rid, p.CALL, "hold", [60]) for rid in range(600)])
    print(f"600 pipelined deferred calls: {600 - len(refused)} carried, {len(refused)} refused")
    crowd = [Peer(ctx, endpoint) for _ in range(20)]
    carried = 600 - len(refused)
    for peer in crowd:
        carried += 40 - len(pipelined(peer, [(rid, p.CALL, "hold", [60]) for rid in range(40)]))
    with pastset.connect(endpoint) as neighbour:
        assert neighbour.call("hold", 0, timeout=10) == "held"
    assert len(refused) == 600 - DEFERRED_SHARE
    assert all(r[2] == "LimitExceeded" and "Limits.max_deferred_per_client" in r[3] for r in refused)
    assert carried < DEFERRED
