"""A node server in its own process under a protocol fuzzer: every hostile frame is answered with an
error reply (or its connection is dropped), the process lives on with bounded memory, and a
well-behaved client interleaved with the fuzzer sees every one of its own operations succeed."""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pastset
from pastset import protocol as p
from pastset.errors import ERRORS_BY_NAME

TRACE = "=HHIIIIQQ"
LIMITS = p.Limits()
# The protocol's contract: arguments after [rid, op] per operation, and which may wait (be parked).
ARITY = {p.PING: 0, p.ENTER: 4, p.LOOKUP: 1, p.MOVE: 3, p.OBSERVE: 3, p.FIRST: 1, p.LAST: 1, p.DELTA: 2,
         p.AXE: 2, p.READ_RANGE: 3, p.LATEST: 2, p.LATEST_MANY: 2, p.DELETE: 1, p.ELEMENTS: 2, p.FIND: 4,
         p.CALL: 2, p.RANGE_MANY: 3, p.OBSERVE_INDEXED: 3}
MAY_WAIT = {p.MOVE, p.OBSERVE, p.OBSERVE_INDEXED, p.FIND, p.CALL}
FILLERS = 2_000        # elements entered first, so that the good client's element ids are not small ints
RSS_MARGIN_KB = 50 * 1024


def pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for process {pid}")


# -- what the fuzzer sends ----------------------------------------------------------------------------

ints = st.one_of(st.integers(-3, 70), st.integers(-(2 ** 63), 2 ** 64 - 1))
scalars = st.one_of(st.none(), st.booleans(), ints, st.floats(), st.text(max_size=12), st.binary(max_size=24))
values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                      st.dictionaries(st.text(max_size=6), kids, max_size=3)),
                      max_leaves=10)
names = st.one_of(st.text(max_size=20).map(lambda s: "fuzz/" + s), st.text(max_size=8),
                  st.integers(300, 4_000).map(lambda n: "n" * n), values)
timeouts = st.one_of(st.sampled_from([None, 0, 0.0, 0.001, 0.02, -1, -0.5, float("inf"), float("-inf"),
                                      float("nan"), 1e308, 2 ** 64 - 1, "1", True, [1]]), values)
indices = st.one_of(st.integers(-2, 40), st.sampled_from([2 ** 62, 2 ** 63 - 1, 2 ** 64 - 1, -(2 ** 63)]), values)
bounds = st.one_of(st.none(), st.integers(1, 64), st.integers(2 ** 30, 2 ** 62), values)


def nested(depth: int, leaf=None):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


# A binary template's preallocated ring must never reach Limits.max_ring from a request of a few
# bytes: huge records, or a huge keep of small ones.
huge_records = st.integers(LIMITS.max_ring + 1, 2 ** 40).map(lambda n: f"={n}s")
templates = st.one_of(
    st.lists(st.sampled_from(["int", "float", "str", "bytes", "bool", "any", "complex", ""]), max_size=4),
    st.sampled_from([TRACE, "=i", "=0s", "<i", "=x", "=q", "=", "=Z", "=4096s"]),
    huge_records, values,
)
payloads = st.one_of(
    values,
    st.tuples(ints, st.text(max_size=8)),
    st.tuples(*[ints] * 8),
    st.lists(st.binary(max_size=40), max_size=3),
    st.integers(490, 508).map(lambda d: [nested(d)]),     # just under msgpack's 511-level packing limit
)
patterns = st.one_of(values, st.lists(st.tuples(st.sampled_from([0, 1, 2]), values), max_size=3))
unknown_ops = st.one_of(st.integers(max(ARITY) + 1, 2 ** 64 - 1), st.integers(-(2 ** 63), -1))

# Raw msgpack headers that declare far more than the frame holds.
HUGE_HEADERS = [b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff",
                b"\xdb\xff\xff\xff\xff", b"\xc9\x7f\xff\xff\xff\x01", b"\xdc\xff\xff", b"\xde\xff\xff",
                b"\xc5\xff\xff", b"\xda\xff\xff", b"\xc8\xff\xff\x05"]


def requests(eids):
    """Well-formed requests with arguments of every shape, aimed at the fuzzer's own elements or none."""
    eid = st.one_of(st.sampled_from(eids), st.sampled_from([0, -1, 2 ** 63 - 1, 2 ** 64 - 1, 10 ** 12]), values)
    refs = st.one_of(st.lists(st.one_of(eid, names), max_size=6), values)
    ops = st.one_of(
        st.tuples(st.just(p.PING)),
        st.tuples(st.just(p.ENTER), names, templates, bounds, bounds),
        st.tuples(st.just(p.LOOKUP), names),
        st.tuples(st.just(p.MOVE), eid, payloads, timeouts),
        st.tuples(st.sampled_from([p.OBSERVE, p.OBSERVE_INDEXED]), eid, indices, timeouts),
        st.tuples(st.sampled_from([p.FIRST, p.LAST]), eid),
        st.tuples(st.just(p.DELTA), eid, bounds),
        st.tuples(st.just(p.AXE), eid, indices),
        st.tuples(st.just(p.READ_RANGE), eid, indices, indices),
        st.tuples(st.just(p.LATEST), eid, indices),
        st.tuples(st.just(p.LATEST_MANY), refs, indices),
        st.tuples(st.just(p.RANGE_MANY), refs, st.one_of(st.lists(indices, max_size=6), values), indices),
        st.tuples(st.just(p.DELETE), names),
        st.tuples(st.just(p.ELEMENTS), st.one_of(st.none(), names), bounds),
        st.tuples(st.just(p.FIND), eid, patterns, values, timeouts),
        st.tuples(st.just(p.CALL), names, st.one_of(st.lists(values, max_size=3), values)),
        # right operation, wrong number of arguments
        st.tuples(st.sampled_from(sorted(ARITY)), st.lists(values, max_size=6)).map(lambda t: (t[0], *t[1])),
        st.tuples(unknown_ops, st.lists(values, max_size=3)).map(lambda t: (t[0], *t[1])),
        st.tuples(st.one_of(st.floats(), st.text(max_size=4), st.none()), st.lists(values, max_size=3))
        .map(lambda t: (t[0], *t[1])),
    )
    return st.tuples(st.one_of(ints, values), ops).map(lambda t: pack([t[0], *t[1]]))


@st.composite
def mutated(draw, frames):
    """A frame with a few bytes flipped, inserted, deleted, or its tail cut off."""
    frame = bytearray(draw(frames))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(frame)))
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if kind == "flip" and at < len(frame):
            frame[at] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            frame[at:at] = bytes([draw(st.integers(0, 255))])
        elif kind == "delete":
            del frame[at:at + 1]
        else:
            del frame[at:]
    return bytes(frame)


def declared_huge(eids):
    """A frame, alone or after a request's first fields, whose header declares up to 4 GiB."""
    prefix = st.sampled_from([b"", b"\x95\x01\x03" + pack(eids[0]), b"\x96\x01\x01\xa3big", b"\x93\x01\x0b"])
    header = st.one_of(st.sampled_from(HUGE_HEADERS),
                       st.integers(64, 2 ** 32 - 1).map(lambda n: b"\xdd" + struct.pack(">I", n)),
                       st.integers(64, 2 ** 32 - 1).map(lambda n: b"\xc6" + struct.pack(">I", n)))
    return st.tuples(prefix, header, st.binary(max_size=16)).map(lambda t: b"".join(t))


def depth_bombs(eids):
    """Deeply nested arrays or maps: alone, or as a move's values (msgpack unpacks 1024 levels)."""
    depth = st.one_of(st.integers(8, 1_100), st.integers(1_100, 200_000), st.integers(1_010, 1_024))
    body = st.one_of(depth.map(lambda d: b"\x91" * d + b"\xc0"), depth.map(lambda d: b"\x81\xa1k" * d + b"\xc0"))
    as_move = st.tuples(st.sampled_from(eids), body).map(
        lambda t: b"\x95\x01\x03" + pack(t[0]) + b"\x91" + t[1] + b"\xc0")
    return st.one_of(body, as_move)


def messages(eids):
    """One message: a list of frames (one, or several, which a request never is)."""
    valid = requests(eids)
    frame = st.one_of(
        valid,
        mutated(valid),
        valid.flatmap(lambda f: st.integers(0, len(f)).map(lambda n: f[:n])),   # truncated, or empty
        declared_huge(eids),
        depth_bombs(eids),
        st.binary(max_size=64),
        st.just(b""),
    )
    return st.one_of(frame.map(lambda f: [f]), st.lists(st.one_of(frame, st.just(b"")), min_size=2, max_size=4))


# -- what the server owes each message ------------------------------------------------------------------

def owed(frames: list[bytes]) -> tuple[str, bool, bool]:
    """(key of the request id the reply must carry, must it be an error, may it be parked unanswered).
    A frame that is not a request is answered with an error carrying the id its head names, if any."""
    if len(frames) != 1:
        return repr(None), True, False
    try:
        request = msgpack.unpackb(frames[0], raw=False, strict_map_key=True, use_list=True)
    except Exception:  # noqa: BLE001 - as the server: msgpack raises several unrelated types
        return repr(p.request_id(frames[0])), True, False
    if not (isinstance(request, list) and len(request) >= 2 and isinstance(request[0], int)
            and isinstance(request[1], int)):
        return repr(p.request_id(frames[0])), True, False
    rid, op = request[0], request[1]
    if op not in ARITY or len(request) - 2 != ARITY[op]:
        return repr(rid), True, False
    return repr(rid), False, op in MAY_WAIT


def exchange(sock: zmq.Socket, batch: list[list[bytes]], ping_rid: int, timeout: float = 15.0) -> list:
    """Send every message, then a ping; every reply that came before the ping's."""
    for frames in batch:
        sock.send_multipart(frames)
    sock.send(pack([ping_rid, p.PING]))
    replies = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0 and sock.poll(max(1, int(left * 1000))), \
            f"no answer to a ping sent after {len(batch)} fuzz messages within {timeout}s"
        raw = sock.recv()
        if not raw:
            continue  # the server's liveness probe
        reply = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        if reply[:2] == [ping_rid, p.OK]:
            return replies
        replies.append(reply)


def check_replies(batch: list[list[bytes]], replies: list) -> None:
    for reply in replies:
        assert isinstance(reply, list) and reply[1] in (p.OK, p.ERROR), reply
        if reply[1] == p.ERROR:
            assert len(reply) == 4 and reply[2] in ERRORS_BY_NAME and isinstance(reply[3], str), reply
        else:
            assert len(reply) == 3 and reply[0] is not None, reply
    least: dict[str, int] = {}
    most: dict[str, int] = {}
    errors_only: dict[str, bool] = {}
    for frames in batch:
        key, error, may_wait = owed(frames)
        least[key] = least.get(key, 0) + (0 if may_wait else 1)
        most[key] = most.get(key, 0) + 1
        errors_only[key] = errors_only.get(key, True) and error
    got: dict[str, list] = {}
    for reply in replies:
        got.setdefault(repr(reply[0]), []).append(reply)
    for key in set(least) | set(got):
        n = len(got.get(key, []))
        assert least.get(key, 0) <= n <= most.get(key, 0), \
            f"{n} replies with request id {key}, owed {least.get(key, 0)} to {most.get(key, 0)}: {got.get(key)}"
        if errors_only.get(key):
            assert all(r[1] == p.ERROR for r in got.get(key, [])), got[key]


# -- the well-behaved client ------------------------------------------------------------------------------

class WellBehaved(threading.Thread):
    """A client that moves, observes (by index and consuming) and batch-reads its own elements in a loop,
    checking every value, until stopped; `error` is the first thing that went wrong."""

    def __init__(self, endpoint: str):
        super().__init__(daemon=True)
        self.client = pastset.connect(endpoint)
        stem = f"good-{uuid.uuid4().hex}"
        self.log = self.client.enter(f"{stem}/log", ["int", "bytes"])
        self.queue = self.client.enter(f"{stem}/queue", ["int", "str"])
        self.ring = self.client.enter(f"{stem}/ring", TRACE, keep=16)
        self.done = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self):
        try:
            i = 0
            while not self.stop.is_set():
                payload = i.to_bytes(4, "big") * (i % 7)
                assert self.log.move((i, payload)) == i
                assert self.log.observe(i) == (i, payload)
                self.queue.move((i, str(i)))
                assert self.queue.observe(timeout=10) == (i, str(i))
                assert self.ring.move((1, 2, 3, 4, i, 6, 7, 8)) == i
                if i % 4 == 0:
                    (log_at, log_items), (ring_at, ring_items) = self.client.latest_many([self.log, self.ring])
                    assert (log_at, log_items) == (i, [(i, payload)])
                    assert ring_at == i and struct.unpack(TRACE, ring_items)[4] == i
                i += 1
                self.done = i
        except BaseException as exc:  # noqa: BLE001 - kept for the test to report
            self.error = exc

    def abandon(self) -> None:
        self.stop.set()
        self.join(30)
        self.client.close()

    def finish(self) -> int:
        """Stop; check the whole log and queue; the rounds done. AssertionError if anything failed."""
        self.stop.set()
        self.join(30)
        assert not self.is_alive(), "the well-behaved client never returned"
        try:
            if self.error is None:
                n = self.done
                start, items = self.log.read_range(0, n + 10)
                assert start == 0 and [v for v, _ in items] == list(range(n))
                assert self.queue.first() == self.queue.last() == n
        finally:
            self.client.close()
        if self.error is not None:
            raise AssertionError(f"the well-behaved client failed after {self.done} rounds: "
                                 f"{type(self.error).__name__}: {self.error}") from self.error
        return self.done


# -- the tests ----------------------------------------------------------------------------------------------

def enter_fillers(sock: zmq.Socket, count: int) -> None:
    """Pipelined: `count` small elements, answered before anything else is entered."""
    for i in range(count):
        sock.send(pack([i, p.ENTER, f"filler/{i}", ["int"], None, None]))
    for _ in range(count):
        assert sock.poll(10_000)
        assert msgpack.unpackb(sock.recv(), raw=False)[1] == p.OK


@pytest.fixture
def fuzz_target(spawn_server):
    """(node server process, zmq context, the fuzzer's own element ids)."""
    server = spawn_server()
    ctx = zmq.Context()
    setup = ctx.socket(zmq.DEALER)
    setup.setsockopt(zmq.LINGER, 0)
    setup.connect(server.endpoint)
    enter_fillers(setup, FILLERS)
    setup.close()
    with pastset.connect(server.endpoint) as mine:
        eids = [mine.enter("fuzz/typed", ["int", "str"]).id, mine.enter("fuzz/any", ["any"]).id,
                mine.enter("fuzz/trace", TRACE, keep=8).id, mine.enter("fuzz/flow", ["int"], delta=1).id,
                mine.enter("fuzz/bytes", ["bytes"]).id]
    yield server, ctx, eids
    ctx.destroy(linger=0)


@pytest.mark.slow   # 10-20 s: a few thousand messages
def test_fuzzed_frames_are_answered_and_a_good_client_is_served_throughout(fuzz_target):
    server, ctx, eids = fuzz_target
    good = WellBehaved(server.endpoint)
    sent = 0
    base = int.from_bytes(os.urandom(6), "big") + 2 ** 61   # ping ids no fuzz frame carries

    @settings(max_examples=200, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(st.lists(messages(eids), min_size=8, max_size=40))
    def fuzz(batch):
        nonlocal sent
        sock = ctx.socket(zmq.DEALER)   # one per batch: late replies to parked requests go nowhere
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(server.endpoint)
        try:
            replies = exchange(sock, batch, base + sent)
        finally:
            sock.close()
        sent += len(batch)
        assert server.proc.poll() is None, "the node server process died"
        check_replies(batch, replies)

    before = rss_kb(server.proc.pid)
    good.start()
    try:
        fuzz()
    except BaseException:
        good.abandon()   # the fuzzer's failure is the one to report
        raise
    rounds = good.finish()
    after = rss_kb(server.proc.pid)
    assert server.proc.poll() is None, "the node server process died"
    assert sent >= 1_500, f"only {sent} messages were sent"
    assert rounds >= 20, f"the good client did only {rounds} rounds alongside {sent} fuzz messages"
    assert after - before < RSS_MARGIN_KB, f"the server grew from {before} kB to {after} kB over {sent} messages"
    with pastset.connect(server.endpoint) as fresh:
        assert fresh.ping() == "test-node"
    print(f"{sent} fuzz messages; server RSS {before} -> {after} kB; {rounds} good-client rounds")


# name -> the frame, made for the id of an empty element of template ["any"]
NASTY = {
    # A few bytes asking for a preallocated ring of gigabytes.
    "huge binary record": lambda eid: pack([1, p.ENTER, "nasty/records", "=100000000s", None, None]),
    "huge keep of small records": lambda eid: pack([1, p.ENTER, "nasty/keep", TRACE, 10 ** 9, None]),
    # Megabytes of name to look up: no close-name search over them.
    "megabyte name to look up": lambda eid: pack([1, p.LOOKUP, os.urandom(4_000_000).hex()]),
    "megabyte name to delete": lambda eid: pack([1, p.DELETE, "x" * 8_000_000]),
    # Deadlines that cannot be turned into a socket timeout.
    "infinite timeout": lambda eid: pack([1, p.OBSERVE, eid, None, float("inf")]),
    "NaN timeout": lambda eid: pack([1, p.OBSERVE, eid, None, float("nan")]),
    "timeout of 1e308 seconds": lambda eid: pack([1, p.OBSERVE, eid, None, 1e308]),
    "timeout of 2**64-1 seconds": lambda eid: pack([1, p.OBSERVE, eid, None, 2 ** 64 - 1]),
    "depth bomb of 100000 arrays": lambda eid: b"\x91" * 100_000 + b"\xc0",
    "4 GiB array declared": lambda eid: b"\x93\x01\x03\xdd\xff\xff\xff\xff",
    # A value that unpacks, but would not pack again inside a batch reply (msgpack nests 1024 deep).
    "a move of a value nested 1021 deep": lambda eid: (b"\x95\x01\x03" + pack(eid) + b"\x91" * 1022 + b"\xc0"
                                                       + b"\xc0"),
}


@pytest.mark.parametrize("case", list(NASTY))
def test_a_nasty_frame_gets_a_prompt_error_and_others_are_still_served(server_process, case):
    """Each of these once stalled the server's loop, made it allocate gigabytes, or broke every
    blocking request that came after it."""
    endpoint = server_process.endpoint
    with pastset.connect(endpoint) as client:
        e = client.enter(f"nasty-{uuid.uuid4().hex}", ["any"])
        frame = NASTY[case](e.id)
        ctx = zmq.Context()
        try:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            started = time.monotonic()
            sock.send(frame)
            assert sock.poll(5_000), "no reply"
            reply = msgpack.unpackb(sock.recv(), raw=False)
            assert reply[1] == p.ERROR and reply[2] in ERRORS_BY_NAME, reply
            assert len(reply[3]) < 1_000, "the error echoes the whole request"
            assert time.monotonic() - started < 1.0, f"the server took {time.monotonic() - started:.1f}s"
        finally:
            ctx.destroy(linger=0)
        # Another client's blocking operations still time out, and complete, as they should.
        with pytest.raises(pastset.Timeout):
            e.observe(0, timeout=0.05)
        e.move((1,))
        assert e.observe(timeout=2) == (1,)


def test_a_frame_beyond_the_limit_is_refused_and_far_beyond_it_drops_only_that_connection(spawn_server):
    server = spawn_server()
    with pastset.connect(server.endpoint) as client:
        e = client.enter("big", ["bytes"])
        ctx = zmq.Context()
        try:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(server.endpoint)
            sock.send(pack([5, p.MOVE, e.id, [bytes(LIMITS.max_frame + 1)], None]))
            assert sock.poll(10_000)
            reply = msgpack.unpackb(sock.recv(), raw=False)
            assert reply[:3] == [5, p.ERROR, "LimitExceeded"], reply   # the id read from its head
            sock.send(bytes(2 * LIMITS.max_frame + 1))   # libzmq drops this peer unanswered
            assert not sock.poll(500)
        finally:
            ctx.destroy(linger=0)
        assert e.move((b"ok",)) == 0 and e.observe(0) == (b"ok",)
    assert server.proc.poll() is None
