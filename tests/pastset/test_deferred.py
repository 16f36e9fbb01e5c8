"""Deferred answers: an inline hosted call that waits on other servers is carried by its endpoint's
loop, which goes on answering everything else meanwhile."""

import time

import msgpack
import pytest
import zmq

import pastset
from pastset import PastSetError
from pastset import protocol as p
from pastset.deferred import Deferred
from polling import until


def asking(server: pastset.TupleServer, endpoints: dict[str, str]):
    """Host `ask(node, name)` on `server`, inline: it calls `name` on `node` and answers with what
    that answered, as a Deferred (no thread, no wait in the loop)."""
    fanouts = []

    def ask(node: str, name: str):
        fanout = pastset.Fanout(endpoints)
        fanouts.append(fanout)
        pulls = fanout.round(30)
        reply = pulls.call(node, name) if name != "ping" else pulls.ping(node)
        return pulls.start().then(lambda missing: ["missing", sorted(missing)] if missing else reply.result())

    server.host("ask", ask, inline=True)
    return fanouts


def asking_back(server: pastset.TupleServer, endpoints: dict[str, str], me: str, other: str):
    """Host `ask-back()` on `server`, inline: it asks `other` for its `ask` of a ping of `me`."""
    fanouts = []

    def ask_back():
        fanout = pastset.Fanout(endpoints)
        fanouts.append(fanout)
        pulls = fanout.round(30)
        reply = pulls.call(other, "ask", me, "ping")
        return pulls.start().then(lambda missing: reply.result())

    server.host("ask-back", ask_back, inline=True)
    return fanouts


def bound(ctx: zmq.Context, kind: int) -> tuple[zmq.Socket, int]:
    """A socket of `kind` bound to a free port of 127.0.0.1, and the port."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    return sock, sock.bind_to_random_port("tcp://127.0.0.1")


class _Closer:
    """Closes the fan-outs of the lists it was given (filled as the calls ran)."""

    def __init__(self, *lists):
        self.lists = lists

    def close(self):
        for fanouts in self.lists:
            for fanout in fanouts:
                fanout.close()


@pytest.fixture
def two(closing):
    """Servers X and Y over TCP, each hosting `ask` and `ask-back`, and a client of each."""
    servers = {name: closing(pastset.TupleServer(name)) for name in "XY"}
    endpoints = {name: s.serve("tcp://127.0.0.1:0") for name, s in servers.items()}
    for me, other in (("X", "Y"), ("Y", "X")):
        closing(_Closer(asking(servers[me], endpoints), asking_back(servers[me], endpoints, me, other)))
    clients = {name: closing(pastset.connect(ep)) for name, ep in endpoints.items()}
    return servers, clients


def test_two_servers_whose_calls_ask_each_other_both_answer(two):
    """X's call asks Y's, which asks X for a ping while X's call still waits: a loop that waited
    there would never answer it (each would stall until its round gave up)."""
    _, clients = two
    assert clients["X"].call("ask-back") == "X"
    assert clients["Y"].call("ask-back") == "Y"
    assert clients["X"].call("ask", "Y", "ask-back") == "Y"   # three calls deep, across both loops


def test_a_loop_answers_others_while_a_deferred_call_waits(closing, background):
    """X asks a server that does not answer yet (a bare ROUTER the test holds): X still answers a
    ping, and its call's answer comes once the silent one replies."""
    ctx = closing(_ContextCloser(zmq.Context())).ctx
    silent, port = bound(ctx, zmq.ROUTER)
    server = closing(pastset.TupleServer("X"))
    endpoint = server.serve("tcp://127.0.0.1:0")
    closing(_Closer(asking(server, {"S": f"tcp://127.0.0.1:{port}"})))
    asker = closing(pastset.connect(endpoint))
    job = background(asker.call, "ask", "S", "echo")
    peer, frame = silent.recv_multipart()          # X's request, still unanswered
    request = msgpack.unpackb(frame)
    rid = request[0]
    assert request[1:3] == [p.CALL, "echo"]
    pinger = closing(pastset.connect(endpoint))
    assert pinger.ping() == "X"                    # X's loop answers while its call waits
    assert job.running
    silent.send_multipart([peer, msgpack.packb([rid, p.OK, "echoed"])])
    assert job.wait(30) == "echoed"



def test_a_loop_whose_deferred_call_loses_one_of_its_nodes_answers_and_serves_on(closing, background):
    """X asks two servers; one's connection closes under the request (its process ended) while
    the other has not answered yet: the fan-out drops the gone one's socket, and X's loop must
    stop polling it (polling a closed socket ends the loop), answer once the other replies, with
    the gone one missing, and serve on."""
    ctx = closing(_ContextCloser(zmq.Context())).ctx
    (gone, gone_port), (slow, slow_port) = bound(ctx, zmq.ROUTER), bound(ctx, zmq.ROUTER)
    server = closing(pastset.TupleServer("X"))
    endpoint = server.serve("tcp://127.0.0.1:0")
    fanouts, rounds = [], []

    def ask_both():
        fanout = pastset.Fanout({"G": f"tcp://127.0.0.1:{gone_port}", "S": f"tcp://127.0.0.1:{slow_port}"})
        fanouts.append(fanout)
        pulls = fanout.round(30)
        rounds.append(pulls)
        replies = [pulls.call(node, "echo") for node in "GS"]
        return pulls.start().then(lambda missing: [sorted(missing), [r.value for r in replies if r.ok]])

    server.host("ask-both", ask_both, inline=True)
    closing(_Closer(fanouts))
    asker = closing(pastset.connect(endpoint))
    job = background(asker.call, "ask-both")
    gone.recv_multipart()                          # X's request to G, never answered: G goes
    peer, frame = slow.recv_multipart()            # X's request to S, answered once G is gone
    gone.close(linger=0)
    until(lambda: "G" in rounds[0].missing, 20, "the fan-out giving G up")   # at its look at silent connections
    assert job.running
    slow.send_multipart([peer, msgpack.packb([msgpack.unpackb(frame)[0], p.OK, "echoed"])])
    assert job.wait(30) == [["G"], ["echoed"]]
    assert closing(pastset.connect(endpoint)).ping() == "X"

def test_a_deferred_call_in_process_is_waited_for(closing):
    """server.call and a local:// client wait for the answer as a remote call does."""
    servers = {name: closing(pastset.TupleServer(name)) for name in "XY"}
    endpoints = {"Y": servers["Y"].serve("tcp://127.0.0.1:0")}
    closing(_Closer(asking(servers["X"], endpoints)))
    assert servers["X"].call("ask", "Y", "ping") == "Y"
    local = closing(pastset.connect(servers["X"].serve("local://")))
    assert local.call("ask", "Y", "ping") == "Y"


def test_a_deferred_call_whose_node_is_gone_says_so(closing):
    """A node that has no server: the answer names it missing (its connection never comes up)."""
    server = closing(pastset.TupleServer("X"))
    endpoint = server.serve("tcp://127.0.0.1:0")
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as s:   # a port nobody serves
        port = s.bind_to_random_port("tcp://127.0.0.1")
    closing(_Closer(asking(server, {"S": f"tcp://127.0.0.1:{port}"})))
    client = closing(pastset.connect(endpoint))
    assert client.call("ask", "S", "ping") == ["missing", ["S"]]
    assert client.ping() == "X"


class _ContextCloser:
    def __init__(self, ctx):
        self.ctx = ctx

    def close(self):
        self.ctx.destroy(linger=0)


class _Exploding(Deferred):
    """A deferred answer that raises when its socket has input: a bug in a deferred call."""

    def __init__(self, sock):
        super().__init__()
        self.sock = sock

    def sockets(self):
        return [self.sock]

    def wake_at(self):
        return time.monotonic() + 60

    def readable(self, sock):
        sock.recv()
        raise RuntimeError("a bug in a deferred call")

    def tick(self):
        pass


def test_a_deferred_call_that_raises_is_answered_with_the_error_and_the_loop_serves_on(closing, background):
    ctx = closing(_ContextCloser(zmq.Context())).ctx
    inbox, port = bound(ctx, zmq.PULL)
    server = closing(pastset.TupleServer("X"))
    server.host("explode", lambda: _Exploding(inbox), inline=True)
    endpoint = server.serve("tcp://127.0.0.1:0")
    job = background(closing(pastset.connect(endpoint)).call, "explode")
    pinger = closing(pastset.connect(endpoint))
    assert pinger.ping() == "X"                 # the call is deferred, the loop answers
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(f"tcp://127.0.0.1:{port}")
    push.send(b"go")
    with pytest.raises(PastSetError, match="a bug in a deferred call"):
        job.wait(30)
    push.close()
    assert pinger.ping() == "X"                 # and goes on serving
