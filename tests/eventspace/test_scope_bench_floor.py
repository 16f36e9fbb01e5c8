"""benchmarks/scope_bench.py's bare peer, the floor the scope machinery is measured against, talks to
a real node server as any client must: it skips the empty frames (liveness probes) a node server sends
a peer it holds unacknowledged replies for (pastset/endpoint.py), and reads the reply after them."""

import msgpack
import numpy as np
import pytest

import pastset
from eventspace import trace
from pastset import protocol as p
from polling import until
from runs import benchmark


@pytest.mark.slow
def test_the_bare_peer_pulls_the_records_after_a_liveness_probe(spawn_server, closing):
    bench = benchmark("scope_bench")
    server = spawn_server()
    client = closing(pastset.connect(server.endpoint))
    names = [f"trace/{i}" for i in range(3)]
    for i, name in enumerate(names):
        element = client.enter(name, trace.FORMAT, keep=8)
        element.move_record(trace.RECORD.pack(1, 0, i, i, 0, 36, 10 + i, 20 + i))
    bare = closing(bench.Bare({"A": server.endpoint}, {"A": names}))
    assert list(bare.pull()["collector"]) == [0, 1, 2]
    # The reply was small, so a server that keeps serving (here: another client's pings, in the
    # benchmark the scopes' pulls) probes this peer within its probe interval (2 s): an empty frame
    # waits on the socket before the next pull's reply.
    sock = bare.sockets[0]
    until(lambda: client.ping() and sock.poll(100), timeout=30, what="a liveness probe reached the bare peer")
    pulled = bare.pull()
    assert isinstance(pulled, np.ndarray) and list(pulled["t_start"]) == [10, 11, 12]


@pytest.mark.slow
def test_the_round_trip_skips_a_liveness_probe(spawn_server, closing):
    bench = benchmark("scope_bench")
    server = spawn_server()
    client = closing(pastset.connect(server.endpoint))
    ping = closing(bench.RoundTrip(server.endpoint))
    until(lambda: client.ping() and ping.sock.poll(100), timeout=30, what="a liveness probe reached the pinging peer")
    ping.pull()
    # The probe was skipped and the ping's reply read: the next reply on the socket is the next
    # request's, not a reply left over that the next round trip would take for its own.
    ping.sock.send(msgpack.packb([2, p.PING]))
    assert ping.sock.poll(10_000), "the node server did not answer a ping"
    frames = iter(ping.sock.recv, None)
    assert msgpack.unpackb(next(frame for frame in frames if frame))[0] == 2
