"""Rounds of requests to several node servers, over both backends: merged batch reads, hosted
calls, errors and nodes that are not there."""

import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq

import pastset
from pastset import protocol as p
from pastset import transport
from pastset.fanout import _merged
from polling import until

FMT = "=HI"


@pytest.fixture(params=["local", "tcp"])
def nodes(request):
    """Two node servers A and B in this process, served under the backend's scheme; their endpoints."""
    servers = {name: pastset.TupleServer(name) for name in "AB"}
    bind = "local://" if request.param == "local" else "tcp://127.0.0.1:0"
    endpoints = {name: server.serve(bind) for name, server in servers.items()}
    for name, server in servers.items():
        rings = server.enter_rings([f"r{i}" for i in range(4)], FMT, keep=8)
        for i, ring in enumerate(rings):
            for j in range(i + 1):
                ring.move((i, j))
        server.enter("typed", ["int"]).move((7,))
        server.host("echo", lambda *args: list(args))
        server.host("fails", lambda: 1 / 0)
    fanout = pastset.Fanout(endpoints)
    yield servers, fanout
    fanout.close()
    for server in servers.values():
        server.close()


def test_batch_reads_of_one_node_in_one_round_each_get_their_own_part(nodes):
    _, fanout = nodes
    for _ in range(2):   # the names are encoded once, and read right the second time too
        pulls = fanout.round(5)
        a1 = pulls.latest_records("A", ["r0", "r2"])
        b = pulls.latest_records("B", ["r1"])
        a2 = pulls.latest_records("A", ["r3", "r1"])
        ranged1 = pulls.range_many("A", ["r2"], [1], 1 << 40)
        ranged2 = pulls.range_many("A", ["r3", "typed"], [0, 0], 1 << 40)
        many = pulls.latest_many("B", ["typed", "r0"])
        echoed = pulls.call("A", "echo", 1, "x")
        assert pulls.wait() == set()
        assert list(struct.iter_unpack(FMT, a1.result())) == [(0, 0), (2, 2)]
        assert list(struct.iter_unpack(FMT, b.result())) == [(1, 1)]
        assert list(struct.iter_unpack(FMT, a2.result())) == [(3, 3), (1, 1)]
        assert [(start, len(data)) for start, data in ranged1.result()] == [(1, 12)]
        assert ranged2.result()[1] == (0, [(7,)])
        assert many.result() == [(0, [(7,)]), (0, struct.pack(FMT, 0, 0))]
        assert echoed.result() == [1, "x"]


def test_errors_come_back_per_request_and_unknown_nodes_are_missing(nodes):
    servers, fanout = nodes
    fanout.add("C", "tcp://127.0.0.1:1")   # nothing listens there
    pulls = fanout.round(0.5)
    unknown = pulls.latest_records("A", ["nope"])
    typed = pulls.call("B", "fails")
    absent = pulls.ping("C")
    fine = pulls.ping("B")
    assert pulls.wait() == {"C"}
    with pytest.raises(pastset.UnknownElement):
        unknown.result()
    with pytest.raises(pastset.ProtocolError, match="ZeroDivisionError"):
        typed.result()
    assert not absent.answered and fine.result() == "B"
    with pytest.raises(pastset.ServerGone):
        absent.result()
    assert fanout.gone({"C"}) == {"C"}


def test_a_node_that_stops_serving_is_missing_and_gone(nodes):
    servers, fanout = nodes
    servers["B"].close()
    pulls = fanout.round(0.5)
    pulls.ping("A")
    pulls.ping("B")
    missing = pulls.wait()
    assert missing == {"B"}
    assert fanout.gone(missing) == {"B"}


def test_sequential_rounds_answer_each_request_in_turn(nodes):
    _, fanout = nodes
    pulls = fanout.round(5, sequential=True)
    replies = [pulls.call(node, "echo", i) for i, node in enumerate("ABAB")]
    assert pulls.wait() == set()
    assert [r.result() for r in replies] == [[0], [1], [2], [3]]



def test_a_started_round_asks_its_loop_to_poll_only_the_live_sockets_it_sent_on(nodes):
    """A node server's joins share pooled fan-outs, which come to hold a socket to every node any
    join asked; a round that asks one node must not make the loop carrying it poll them all
    (each socket polled costs that loop system calls on every wake-up: per-cluster joins were
    1.06x slower beside a flat near scope's). Nor a socket dropped under it: its node's
    connection closed while the round waits for another (a closed socket polled is always
    "ready": the loop would spin until the round ends)."""
    servers, fanout = nodes
    if not fanout._endpoint("A").startswith("tcp://"):
        pytest.skip("local nodes are direct calls: no socket to poll")
    both = fanout.round(5)
    both.ping("A"), both.ping("B")
    assert both.wait() == set()
    one = fanout.round(5)
    reply = one.ping("A")
    exchange = one.start()
    assert exchange.sockets() == [fanout._link("A").sock]
    assert exchange.wait() == set() and reply.result() == "A"

    ctx = zmq.Context.instance()
    silent = {}
    for node in "GS":   # G goes away under the round, S answers only after that
        sock = silent[node] = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        fanout.add(node, f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}")
    pulls = fanout.round(30)
    replies = [pulls.call(node, "echo") for node in "GS"]
    exchange = pulls.start()
    silent["G"].recv_multipart()
    peer, frame = silent["S"].recv_multipart()
    silent["G"].close()
    def gave_g_up() -> bool:
        exchange.tick()
        return "G" in pulls.missing

    until(gave_g_up, 20, "the exchange giving G up")
    assert pulls.missing == {"G"} and not exchange.done
    assert exchange.sockets() == [fanout._link("S").sock]
    silent["S"].send_multipart([peer, msgpack.packb([msgpack.unpackb(frame)[0], 0, "echoed"])])
    silent["S"].close()
    assert exchange.wait() == {"G"} and replies[1].result() == "echoed"

def test_only_batch_reads_of_one_kind_node_and_bound_are_merged():
    requests = [(node, op, None, (), last, i) for i, (node, op, last) in enumerate([
        ("A", 18, 1), ("B", 18, 1), ("A", 18, 1), ("A", 15, None), ("A", 16, 9), ("A", 16, 9), ("A", 16, 8)])]
    groups = [[request[-1] for request in group] for group in _merged(requests)]
    assert groups == [[0, 2], [1], [3], [4, 5], [6]]


HOLDING_NODE = """
import sys, time
import pastset
from pastset import protocol as p
from pastset import transport
server = pastset.TupleServer("H")
server.host("hold", lambda: time.sleep(120))   # a call that does not return
print(server.serve("tcp://127.0.0.1:0"), flush=True)
time.sleep(120)                                # serves until the test kills it
"""


def test_a_round_gives_up_on_a_node_whose_process_ends_under_it_without_waiting_out_its_timeout():
    """A node killed while it holds a round's request will never answer: the round says so as soon
    as its connection closes (a dashboard's panels each waited out their timeout after a run stopped)."""
    node = subprocess.Popen([sys.executable, "-c", HOLDING_NODE], stdout=subprocess.PIPE, text=True)
    fanout = pastset.Fanout({"H": node.stdout.readline().strip()})
    try:
        pulls = fanout.round(60)
        held = pulls.call("H", "hold")
        threading.Timer(0.5, node.kill).start()
        started = time.monotonic()
        missing = pulls.wait()
        waited = time.monotonic() - started
    finally:
        fanout.close()
        node.kill()
        node.wait()
    assert missing == {"H"} and fanout.gone(missing) == {"H"} and not held.answered
    assert waited < 30, f"the round waited {waited:.1f} s of its 60 s for a node that was gone"


@pytest.mark.parametrize("garbage, words", [
    (lambda rid: b"\xc1\xc1", "not msgpack"),
    (lambda rid: b"\x91" * 5000 + b"\xc0", "not msgpack"),
    (lambda rid: msgpack.packb([rid, 0, 7]), "malformed reply to latest_records"),
    (lambda rid: msgpack.packb([rid, 0, [b"\x05\x00\x00\x00", b"x" * 7]]), "malformed reply to latest_records"),
    (lambda rid: msgpack.packb([rid, 9]), "malformed reply"),
], ids=["not msgpack", "nested 5000 deep", "a number", "5 records in 7 bytes", "too short"])
def test_a_node_that_answers_garbage_answers_its_requests_with_a_protocol_error(garbage, words):
    """A node is not trusted: whatever it sends that is not a reply to what was asked is the error of
    its requests in the round, named after it; the round goes on, and so do the other nodes' requests."""
    good = pastset.TupleServer("good")
    good.enter_rings(["r"], FMT, keep=4)[0].move((1, 2))
    ctx = zmq.Context()
    hostile = ctx.socket(zmq.ROUTER)
    hostile.setsockopt(zmq.LINGER, 0)
    bad = f"tcp://127.0.0.1:{hostile.bind_to_random_port('tcp://127.0.0.1')}"

    stop = threading.Event()

    def answer():
        while not stop.is_set():
            if hostile.poll(50):
                peer, frame = hostile.recv_multipart()
                hostile.send_multipart([peer, garbage(msgpack.unpackb(frame)[0])])

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    fanout = pastset.Fanout({"good": good.serve("tcp://127.0.0.1:0"), "bad": bad})
    try:
        pulls = fanout.round(5)
        mine = [pulls.latest_records("bad", ["a"]), pulls.latest_records("bad", ["b", "c"])]
        fine = pulls.latest_records("good", ["r"])
        assert pulls.wait() == set()
        for reply in mine:
            assert isinstance(reply.error, pastset.ProtocolError) and "node bad" in str(reply.error), reply.error
            assert words in str(reply.error), reply.error
        assert fine.result() == struct.pack(FMT, 1, 2)
    finally:
        fanout.close()
        stop.set()
        thread.join(10)
        ctx.destroy(linger=0)
        good.close()


def test_a_monitor_may_hold_many_fanouts_over_64_nodes():
    """Each node a fan-out reaches takes three ZeroMQ sockets: ZeroMQ's default limit of 1,023 sockets
    per context ended a benchmark's sixth scope over 64 nodes with "Too many open files"."""
    zmq.Context.instance().socket(zmq.DEALER).close()   # another part of the process made the usual context first
    server = pastset.TupleServer("N")
    endpoint = server.serve("tcp://127.0.0.1:0")
    endpoints = {f"n{i}": endpoint for i in range(64)}   # one server under 64 names: a socket each
    fanouts = [pastset.Fanout(endpoints) for _ in range(8)]
    try:
        for fanout in fanouts:
            pulls = fanout.round(10)
            for node in endpoints:
                pulls.ping(node)
            assert pulls.wait() == set()
    finally:
        for fanout in fanouts:
            fanout.close()
        server.close()



_THREADS = """
import glob, json, os, sys
import pastset
sys.path.append(sys.argv[1])   # tests/
from polling import until
from pastset import protocol as p
from pastset import transport

def io_threads():
    found = {}
    for task in glob.glob("/proc/self/task/*"):
        with open(task + "/comm") as f:
            if f.read().startswith("ZMQbg/IO"):
                tid = int(task.rsplit("/", 1)[1])
                found[tid] = os.sched_getscheduler(tid)
    return found

server = pastset.TupleServer("A")
endpoint = server.serve("tcp://127.0.0.1:0")
serving = until(io_threads, 10, "the server's ZeroMQ I/O thread")
fanout = pastset.Fanout({"A": endpoint})
pulls = fanout.round(5)
ping = pulls.ping("A")
assert pulls.wait() == set() and ping.result() == "A"
pulling = {tid: policy for tid, policy in io_threads().items() if tid not in serving}
print(json.dumps([sorted(serving.values()), sorted(pulling.values())]))
fanout.close()
server.close()
"""


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")
def test_a_fanouts_io_thread_yields_to_the_running_thread_and_a_servers_does_not():
    """A fan-out carries an observer's traffic: its ZeroMQ I/O thread, woken, must not take the
    CPU from the thread running (a join between its sends, an application's thread), so it runs
    under SCHED_BATCH; a node server's endpoint answers the application too, and keeps the
    default policy. Checked in a fresh process, whose only ZeroMQ threads are these."""
    out = subprocess.run([sys.executable, "-c", _THREADS, str(Path(__file__).parents[1])], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    serving, pulling = json.loads(out.stdout)
    assert serving == [os.SCHED_OTHER] and pulling == [os.SCHED_BATCH], out.stdout


class Twin(pastset.LocalClient):
    """A third backend, registered as backends are (`pastset.transport.register`): `twin://NAME`
    reaches the server this process serves as `local://NAME`, and keeps the operations it was asked."""

    asked: list[int] = []

    def __init__(self, endpoint: str, **options):
        super().__init__("local://" + endpoint[len("twin://"):], **options)

    def submit(self, op, args):
        Twin.asked.append(op)
        return super().submit(op, args)


def test_a_fanout_reaches_a_third_backend_through_its_own_submit(monkeypatch):
    """A fan-out reaches a node through the backend its endpoint's scheme names, whatever it is:
    one took every endpoint that was not local:// for ZeroMQ (and failed to connect to twin://)."""
    monkeypatch.setattr(transport, "_BACKENDS", dict(transport._BACKENDS))   # registered for this test only
    transport.register("twin", Twin)
    Twin.asked.clear()
    server = pastset.TupleServer("T")
    server.serve("local://twin-T")
    rings = server.enter_rings(["r0", "r1"], FMT, keep=8)
    for i, ring in enumerate(rings):
        ring.move((i, 9))
    server.host("echo", lambda *args: list(args))
    fanout = pastset.Fanout({"T": "twin://twin-T"})
    try:
        pulls = fanout.round(5)
        ping = pulls.ping("T")
        first = pulls.latest_records("T", ["r0"])
        second = pulls.latest_records("T", ["r1"])
        echoed = pulls.call("T", "echo", 2)
        assert pulls.wait() == set()
        assert (ping.result(), first.result(), second.result(), echoed.result()) == \
            ("T", struct.pack(FMT, 0, 9), struct.pack(FMT, 1, 9), [2])
        assert sorted(Twin.asked) == sorted([p.PING, p.LATEST_RECORDS_COUNTED, p.CALL])
        server.close()   # no longer served: missing, and gone
        pulls = fanout.round(5)
        pulls.ping("T")
        assert pulls.wait() == {"T"} and fanout.gone({"T"}) == {"T"}
    finally:
        fanout.close()
        server.close()


def test_arguments_a_request_cannot_take_are_the_same_error_over_both_backends(nodes):
    _, fanout = nodes
    pulls = fanout.round(5)
    bad = pulls.latest_records("A", [[1]])
    assert pulls.wait() == set()
    with pytest.raises(pastset.ProtocolError, match=r"^bad arguments for latest_records: TypeError: unhashable"):
        bad.result()
