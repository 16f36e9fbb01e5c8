"""The memory budget of a node server: what it holds is counted before it is allocated, a refusal
changes nothing, and everything comes back when elements are deleted or replies are sent."""

import tracemalloc

import msgpack
import pytest
import zmq

from harness import TRACE
from polling import until
from pastset import LimitExceeded, Limits, TemplateMismatch, TupleServer, connect
from pastset.protocol import ERROR, LATEST, MOVE, OK

KIB = 1024
MIB = 1024 * KIB
# 256 KiB, of which elements may hold 192 KiB (a quarter is kept for replies).
TIGHT = Limits(max_memory=256 * KIB, max_ring=64 * KIB, max_reply=48 * KIB)


@pytest.fixture(params=["local", "remote"])
def tight(request):
    """(server with a 256 KiB budget, the same server in-process or through a client)."""
    server = TupleServer("tight", limits=TIGHT)
    if request.param == "local":
        yield server, server
    else:
        with connect(server.serve("tcp://127.0.0.1:0")) as c:
            yield server, c
    server.close()


def test_a_move_past_the_budget_is_refused_and_changes_nothing(tight):
    server, space = tight
    e = space.enter("hoard", ["int", "bytes"])
    blob = bytes(30 * KIB)
    moved = 0
    with pytest.raises(LimitExceeded, match=r"Limits\.max_memory"):
        while moved < 100:
            e.move((moved, blob))
            moved += 1
    assert 5 <= moved < 9 and e.last() == moved and e.latest(1) == (moved - 1, [(moved - 1, blob)])
    assert e.observe() == (0, blob)                        # consuming frees room for one more
    assert e.move((moved, blob)) == moved
    space.delete("hoard")
    assert space.enter("next", ["bytes"]).move((blob,)) == 0


def test_rings_are_counted_when_made_and_when_resized(tight):
    server, space = tight
    with pytest.raises(LimitExceeded, match=r"Limits\.max_ring"):
        space.enter("wide", "=1000s", keep=100)          # 101 slots of 1000 bytes: over the ring limit
    ring = space.enter("ring", "=1000s")
    with pytest.raises(LimitExceeded, match=r"Limits\.max_ring"):
        ring.delta(100_000)                                # would be a ring of 100,000 slots
    assert ring.delta() is None and ring.move((b"x",)) == 0
    assert ring.delta(50) == 50
    rings = [space.enter(f"r{i}", "=1000s", keep=60) for i in range(2)]     # 61,000 bytes each
    with pytest.raises(LimitExceeded, match=r"Limits\.max_memory"):
        space.enter("r2", "=1000s", keep=60)
    for i in range(2):
        space.delete(f"r{i}")
    assert len(rings) == 2 and space.enter("r2", "=1000s", keep=60).move((b"y",)) == 0


def test_an_unbounded_ring_grows_only_within_the_budget(tight):
    server, space = tight
    e = space.enter("growing", "=1000s")
    with pytest.raises(LimitExceeded, match=r"Limits\.max_memory"):
        for i in range(1_000):
            e.move((b"z",))
    held = e.last()
    assert held == 128 and e.latest(1)[0] == 127             # 64 then 128 slots of 1000 bytes; not 256


def test_a_reply_past_the_reply_limit_is_refused_before_it_is_read():
    server = TupleServer("tight", limits=TIGHT)
    try:
        with connect(server.serve("tcp://127.0.0.1:0")) as client:
            e = client.enter("t", ["bytes"])
            e.move((bytes(20 * KIB),))
            assert client.latest_many([e, e]) == [(0, [(bytes(20 * KIB),)])] * 2
            with pytest.raises(LimitExceeded, match=r"Limits\.max_reply"):
                client.latest_many([e, e, e])
            with pytest.raises(LimitExceeded, match=r"Limits\.max_reply"):
                client.range_many([e, "t", e], [0, 0, 0], 10)
            e.move((bytes(20 * KIB),))
            e.move((bytes(20 * KIB),))
            with pytest.raises(LimitExceeded, match=r"Limits\.max_reply"):
                e.read_range(0, 3)
            # Within the limits, reads are served. The server counts a reply as unread until ZeroMQ lets go
            # of it, which pyzmq reports from a thread of its own: on a loaded machine that can come after
            # the client has read it (a clean `make test` saw `latest(2)` refused for 84,472 bytes unread;
            # with three busy processes on the two cores, 166 of 8,163 such sequences were), so a refusal
            # then is transient.
            assert until(lambda: e.read_range(1, 3)[0] == 1 and e.latest(2)[0] == 1, 10,
                         "reads within the limits", ignoring=LimitExceeded)
    finally:
        server.close()


def test_everything_comes_back_to_the_budget():
    """After typed and binary elements, keep and delta, consuming reads, Linda takes, axes, slabs,
    resizes and big replies, deleting every element leaves the budget as it found it."""
    server = TupleServer("count", limits=Limits(max_memory=64 * 1024 * 1024))
    assert server.budget.used == 0
    try:
        client = connect(server.serve("tcp://127.0.0.1:0"))
        typed = client.enter("typed", ["int", "any"], keep=5)
        queue = server.enter("queue", ["str"])
        ring = client.enter("ring", TRACE, keep=8)
        growing = server.enter("growing", TRACE)
        big = client.enter("big", ["bytes"])
        server.enter_rings([f"slab/{i}" for i in range(4)], TRACE, 16)
        for i in range(300):
            typed.move((i, {"k": [i] * (i % 7)}))
            queue.move((str(i) * (i % 50),))
            ring.move((1, 2, 3, 4, i, 6, 7, 8))
            growing.move((1, 2, 3, 4, i, 6, 7, 8))
        for _ in range(120):
            queue.observe()
        queue.find([(1, "str")], remove=True)              # a Linda take, out of order
        queue.axe(200)
        growing.delta(400)
        big.move((bytes(3 * 1024 * 1024),))
        assert client.latest_many([big, big])[0][0] == 0   # two megabyte replies, sent and reclaimed
        assert client.element("big").latest(1)[0] == 0
        with pytest.raises(TemplateMismatch):
            server.enter("typed", ["int"])
        assert server.budget.used > 0
        client.close()
        for info in server.elements():
            server.delete(info.name)
        until(lambda: server.budget.used == 0, timeout=5, what="every byte given back to the budget")
    finally:
        server.close()



def test_replies_a_client_does_not_read_are_counted_and_held_to_its_share():
    """Every reply counts in the budget until ZeroMQ has written it out, small ones too; a client may
    leave at most twice Limits.max_reply of them unread (then it is told LimitExceeded), and what it
    left unread comes back when it disconnects."""
    share = 2 * MIB
    server = TupleServer("unread", limits=Limits(max_memory=64 * MIB, max_reply=share // 2))
    ctx = zmq.Context()
    try:
        endpoint = server.serve("tcp://127.0.0.1:0")
        e = server.enter("e", ["bytes"])
        e.move((bytes(100 * KIB),))
        done = server.enter("done", ["int"])
        done.move((0,))
        held = server.budget.used
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 1)          # read nothing: the replies stay queued on the server
        sock.setsockopt(zmq.RCVBUF, 4096)
        sock.connect(endpoint)
        for rid in range(200):                    # 20 MB of replies of 100 KiB
            sock.send(msgpack.packb([rid, LATEST, e.id, 1]))
        sock.send(msgpack.packb([200, MOVE, done.id, [1], None]))
        until(lambda: done.last() == 2, timeout=10)
        unread = server.budget.used - held       # and the errors, and up to 256 KiB taken ahead for replies
        assert 0 < unread <= share + 512 * KIB, f"{unread:,} bytes of unread replies counted"
        replies = []
        while len(replies) < 201:
            assert sock.poll(10_000), f"only {len(replies)} replies came"
            frame = sock.recv()
            if frame:
                replies.append(msgpack.unpackb(frame, raw=False))
        refused = [r for r in replies if r[1] == ERROR]
        # The share's worth of replies (20), and what the kernel's socket buffers took off ZeroMQ (up
        # to 4 MB here): the rest are refused.
        assert 130 < len(refused) < 185, f"{len(refused)} of 200 refused"
        assert all(r[2] == "LimitExceeded" and "not read" in r[3] for r in refused), refused[0]
        assert replies[200] == [200, OK, 1]
        sock.close()
        until(lambda: server.budget.used == held, timeout=10, what=f"the budget back to the {held:,} bytes held")
    finally:
        ctx.destroy(linger=0)
        server.close()


@pytest.mark.parametrize("make", [lambda i: {"a": i}, lambda i: {"k": i, "v": "abc", "f": 1.5},
                                  lambda i: {"a": [i, {"b": "c"}]}, lambda i: [{"x": i}, {"y": -i}]],
                         ids=["small dict", "dict of three", "nested", "list of dicts"])
def test_an_any_field_is_counted_at_least_as_what_its_objects_take(make):
    """Values of `any` fields as they come off the wire (decoded, so each holds objects of its own):
    what holding them costs the server, measured, is never more than the budget counts."""
    server = TupleServer("objects")
    try:
        e = server.enter("e", ["any"])
        frames = [msgpack.packb(make(1000 + i)) for i in range(5_000)]
        before = server.budget.used
        tracemalloc.start()
        try:
            for frame in frames:
                e.move((msgpack.unpackb(frame, raw=False),))
            taken = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        counted = server.budget.used - before
        assert taken <= counted < 2 * taken, f"{taken / 5_000:.0f} bytes a tuple taken, {counted / 5_000:.0f} counted"
    finally:
        server.close()
