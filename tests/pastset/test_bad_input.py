"""Bad input, through the API and raw on the wire: a clear PastSetError each time, and the server serves on."""

import re

import msgpack
import pytest

from harness import TRACE, blocked_on
from polling import until
from pastset import (BadArgument, Expired, LimitExceeded, Limits, PastSetError, TemplateMismatch, Timeout, TupleServer, UnknownElement, connect)
from pastset import protocol as p

# -- through the API, local and remote -------------------------------------------------------------


def test_unknown_element_is_named_with_close_names(space, names):
    space.enter(names("alpha"), ["int"])
    with pytest.raises(UnknownElement) as info:
        space.element(names("alpah"))
    assert repr(names("alpah")) in str(info.value) and names("alpha") in str(info.value)
    with pytest.raises(UnknownElement, match="enter it first"):
        space.element("~")


@pytest.mark.parametrize("spec, values, words", [
    (["int", "str"], (1, 2), ["field 1", "expected str", "got int"]),
    (["int", "str"], ("1", "2"), ["field 0", "expected int", "got str"]),
    (["int", "str"], (True, "x"), ["field 0", "expected int", "got bool"]),
    (["int", "str"], (1,), ["expected 2 fields", "got 1"]),
    (["int", "str"], 5, ["expected a tuple", "got int"]),
    (["bytes"], ("text",), ["field 0", "expected bytes", "got str"]),
    (TRACE, (1, 2, "x", 4, 5, 6, 7, 8), ["field 2", "'I'", "str"]),
    (TRACE, (1, 2, 3), ["expected 8 fields", "got 3"]),
    (TRACE, (-1, 2, 3, 4, 5, 6, 7, 8), ["field 0", "'H'", "-1"]),
    (TRACE, 5, ["expected a tuple", "got int"]),
    (TRACE, None, ["expected a tuple", "got NoneType"]),
])
def test_a_tuple_that_does_not_fit_names_the_field_and_types(space, names, spec, values, words):
    for keep in (None, 4):                 # a bounded binary element takes the inline path
        e = space.enter(names(f"keep{keep}"), spec, keep=keep)
        with pytest.raises(TemplateMismatch) as info:
            e.move(values)
        for word in words:
            assert word in str(info.value)
        assert e.last() == 0


def test_a_record_of_the_wrong_size_is_a_mismatch(space, names):
    e = space.enter(names(), TRACE)
    with pytest.raises(TemplateMismatch, match="36 bytes, got 35"):
        e.move_record(bytes(35))
    assert e.last() == 0


@pytest.mark.parametrize("index", [-1, 1.5, "0", None, True])
def test_an_invalid_index_is_expired(space, names, index):
    e = space.enter(names(), ["int"])
    e.move((1,))
    for op in (e.axe, lambda i: e.read_range(i, 5), lambda i: e.read_range(0, i), e.latest):
        with pytest.raises(Expired, match="not valid"):
            op(index)
    if index is not None:
        with pytest.raises(Expired, match="not valid"):
            e.observe(index)
    assert e.observe(0) == (1,)


def test_an_index_never_written_times_out_and_a_discarded_one_is_expired(space, names):
    e = space.enter(names(), ["int"], keep=2)
    for i in range(5):
        e.move((i,))
    with pytest.raises(Timeout):
        e.observe(5, timeout=0)
    with pytest.raises(Expired, match="tuple 2 was discarded \\(first held is 3\\)"):
        e.observe(2)


@pytest.mark.parametrize("what, value", [("keep", 0), ("keep", -3), ("delta", "5"), ("delta", 1.5),
                                         ("keep", True)])
def test_a_bad_bound_is_a_bad_argument(space, names, what, value):
    with pytest.raises(BadArgument, match=f"{what} must be a positive whole number of tuples, got {value!r}; "
                                          f"give one, or None for no {what}"):
        space.enter(names(), ["int"], **{what: value})
    with pytest.raises(UnknownElement):
        space.element(names())
    e = space.enter(names(), ["int"])
    if what == "delta":
        with pytest.raises(BadArgument):
            e.delta(value)
        assert e.delta() is None


def test_an_element_with_both_keep_and_delta_is_refused_and_the_server_serves_on(space, names):
    # keep discards and never blocks, delta blocks moves: pathmaps refused the pair, and now so does
    # pastset, whether the element is new, exists already, or gets its delta later.
    both = "both keep and delta are set; keep discards old tuples and never blocks, delta blocks moves: keep only one"
    with pytest.raises(BadArgument, match=re.escape(both)):
        space.enter(names(), ["int"], keep=4, delta=2)
    with pytest.raises(UnknownElement):
        space.element(names())
    kept = space.enter(names("kept"), ["int"], keep=4)
    with pytest.raises(BadArgument, match=re.escape(both)):
        space.enter(names("kept"), ["int"], keep=4, delta=2)
    with pytest.raises(BadArgument, match=re.escape(both)):
        kept.delta(2)
    assert kept.delta() is None and kept.keep == 4
    for i in range(6):
        kept.move((i,), timeout=0)
    assert kept.read_range(0, 10) == (2, [(2,), (3,), (4,), (5,)])


@pytest.mark.parametrize("keep, told", [(0, "keep must be a positive whole number of tuples, got 0"),
                                        ("4", "keep must be a positive whole number of tuples, got '4'"),
                                        (None, "rings are bounded: give keep, a positive whole number of tuples")])
def test_rings_with_a_bad_keep_are_refused_before_anything_is_made(keep, told):
    server = TupleServer("rings")
    with pytest.raises(BadArgument, match=told):
        server.enter_rings(["r0", "r1"], TRACE, keep)
    assert server.elements() == [] and server.enter_rings(["r0"], TRACE, 4)[0].keep == 4


@pytest.mark.parametrize("name", ["", 5, None])
def test_a_bad_name_is_a_bad_argument(space, name):
    with pytest.raises(BadArgument, match="non-empty string"):
        space.enter(name, ["int"])


def test_a_long_name_exceeds_the_default_limit(space):
    with pytest.raises(LimitExceeded, match="257 characters exceeds the limit of 256"):
        space.enter("n" * 257, ["int"])


def test_bad_templates_are_refused_before_anything_is_created(space, names):
    for spec in (["int", "complex"], "HHI", 3, []):
        with pytest.raises(TemplateMismatch):
            space.enter(names(), spec)
    with pytest.raises(UnknownElement):
        space.element(names())


def test_errors_leave_the_element_serving(space, names):
    e = space.enter(names(), ["int"])
    e.move((1,))
    for bad in (lambda: e.move(("x",)), lambda: e.observe(-1), lambda: e.observe(9, timeout=0),
                lambda: space.enter(names(), ["str"]), lambda: e.delta(0)):
        with pytest.raises(PastSetError):
            bad()
    e.move((2,))
    assert e.read_range(0, 10) == (0, [(1,), (2,)])


# -- raw frames on the wire --------------------------------------------------------------------------

def pack(*fields) -> bytes:
    return msgpack.packb(list(fields), use_bin_type=True)


# name -> (frames for element id `eid`, error class the reply names, words its message holds)
WIRE = {
    "not msgpack": (lambda eid: [b"\xc1\xc1"], "ProtocolError", ["malformed request: not msgpack"]),
    "truncated msgpack": (lambda eid: [pack(1, p.MOVE, eid, [1], None)[:-3]], "ProtocolError",
                          ["malformed request: not msgpack"]),
    "empty frame": (lambda eid: [b""], "ProtocolError", ["malformed request: not msgpack"]),
    "not an array": (lambda eid: [msgpack.packb({"op": 3})], "ProtocolError", ["[request_id, op, *args]"]),
    "too short": (lambda eid: [pack(1)], "ProtocolError", ["[request_id, op, *args]"]),
    "request id not an int": (lambda eid: [pack("one", p.PING)], "ProtocolError", ["[request_id, op"]),
    "two frames": (lambda eid: [pack(1, p.PING), b"extra"], "ProtocolError", ["exactly one frame"]),
    "unknown operation": (lambda eid: [pack(1, 99, eid)], "ProtocolError", ["unknown operation 99"]),
    "negative operation": (lambda eid: [pack(1, -1)], "ProtocolError", ["unknown operation -1"]),
    "too few arguments": (lambda eid: [pack(1, p.MOVE, eid)], "ProtocolError",
                          ["move takes 3 arguments, got 1"]),
    "too many arguments": (lambda eid: [pack(1, p.FIRST, eid, 2)], "ProtocolError",
                           ["first takes 1 arguments, got 2"]),
    "unhashable element id": (lambda eid: [pack(1, p.FIRST, [eid])], "ProtocolError",
                              ["bad arguments for first"]),
    "unknown element id": (lambda eid: [pack(1, p.LAST, 10 ** 9)], "UnknownElement", ["1000000000"]),
    "index not an int": (lambda eid: [pack(1, p.READ_RANGE, eid, "a", 3)], "Expired", ["'a' is not valid"]),
    "timeout not a number": (lambda eid: [pack(1, p.OBSERVE, eid, None, "soon")], "BadArgument",
                             ["timeout"]),
    "values not a tuple": (lambda eid: [pack(1, p.MOVE, eid, 5, None)], "TemplateMismatch",
                           ["expected a tuple"]),
    "values of the wrong type": (lambda eid: [pack(1, p.MOVE, eid, ["x"], None)], "TemplateMismatch",
                                 ["field 0", "expected int", "got str"]),
    "batch not a list": (lambda eid: [pack(1, p.LATEST_MANY, eid, 1)], "BadArgument", ["latest_many"]),
    "name not a string": (lambda eid: [pack(1, p.ENTER, 5, ["int"], None, None)], "BadArgument",
                          ["non-empty string"]),
    "template not a template": (lambda eid: [pack(1, p.ENTER, "x", 7, None, None)], "TemplateMismatch",
                                ["template 7"]),
    "call arguments not a list": (lambda eid: [pack(1, p.CALL, "nothing-hosted", 3)], "UnknownElement",
                                  ["nothing is hosted"]),
}


@pytest.mark.parametrize("case", list(WIRE))
def test_a_bad_request_gets_an_error_reply_and_others_are_served(client, raw_peer, endpoint, names,
                                                                 background, case):
    make_frames, error, words = WIRE[case]
    e = client.enter(names(), ["int"])
    e.move((1,))
    waiter = background(e.observe, 1, timeout=30)   # parked on the server while the bad request comes
    until(lambda: blocked_on(client, names()) == 1, what="the observe parked on the server")
    peer = raw_peer(endpoint)
    peer.send(*make_frames(e.id))
    reply = peer.reply()
    assert reply[1] == p.ERROR and reply[2] == error, reply
    for word in words:
        assert word in reply[3], reply
    e.move((2,))
    assert waiter.wait() == (2,)
    assert e.read_range(0, 5) == (0, [(1,), (2,)])
    peer.request(7, p.PING)
    assert peer.reply()[:3] == [7, p.OK, ["test-node", p.Limits().max_frame]]


def test_error_replies_carry_the_request_id(client, raw_peer, endpoint, names):
    e = client.enter(names(), ["int"])
    peer = raw_peer(endpoint)
    peer.request(41, p.OBSERVE, e.id, None, 0)
    assert peer.reply()[:3] == [41, p.ERROR, "Timeout"]
    peer.request(42, p.MOVE, e.id, [1], None)
    assert peer.reply() == [42, p.OK, 0]


# -- server limits ------------------------------------------------------------------------------------

SMALL = Limits(max_frame=4096, max_elements=3, max_name=16, max_parked=2, max_batch=4)


@pytest.fixture(params=["local", "remote"])
def small(request):
    """A server with small Limits: the TupleServer itself, or a client of its endpoint."""
    server = TupleServer("small", limits=SMALL)
    if request.param == "local":
        yield server
    else:
        with connect(server.serve("tcp://127.0.0.1:0")) as c:
            yield c
    server.close()


@pytest.fixture
def small_served():
    """(server, client): a server with small Limits and a client of its endpoint (wire limits)."""
    server = TupleServer("small", limits=SMALL)
    with connect(server.serve("tcp://127.0.0.1:0")) as c:
        yield server, c
    server.close()


def test_element_count_limit(small):
    for i in range(3):
        small.enter(f"e{i}", ["int"])
    with pytest.raises(LimitExceeded, match="already hosts 3 elements"):
        small.enter("e3", ["int"])
    assert small.enter("e0", ["int"]).last() == 0      # entering an existing one still works
    small.delete("e1")
    small.enter("e3", ["int"]).move((1,))
    assert [i.name for i in small.elements()] == ["e0", "e2", "e3"]


def test_name_length_limit(small):
    with pytest.raises(LimitExceeded, match="17 characters exceeds the limit of 16"):
        small.enter("n" * 17, ["int"])
    assert small.enter("n" * 16, ["int"]).move((1,)) == 0


def test_batch_limit(small_served):
    _, client = small_served
    handles = [client.enter(f"e{i}", ["int"]) for i in range(3)]
    with pytest.raises(BadArgument, match="at most 4"):
        client.latest_many(handles * 2)
    assert len(client.latest_many(handles)) == 3


def test_an_oversized_frame_is_refused_with_limit_exceeded(small_served, raw_peer):
    server, client = small_served
    e = client.enter("big", ["bytes"])
    for size in (5_000, 9_000, 100_000):    # over the limit, and beyond twice it
        with pytest.raises(LimitExceeded, match="4096-byte frame limit"):
            e.move((bytes(size),))
    assert e.move((bytes(3_000),)) == 0
    peer = raw_peer(server.endpoints[0])
    peer.request(5, p.MOVE, e.id, [bytes(5_000)], None)
    reply = peer.reply()
    assert reply[1:3] == [p.ERROR, "LimitExceeded"] and "4096-byte frame limit" in reply[3]
    peer.send(bytes(20_000))               # far beyond: the server drops that peer's connection
    assert e.last() == 1 and e.observe() == (bytes(3_000),)


def test_a_request_of_too_many_values_is_refused_to_the_client_that_sent_it(endpoint, raw_peer, names):
    """A request holds at most Limits.max_objects values (a frame of empty maps is a gigabyte of
    Python objects otherwise): refused, with the request's own id, so that its client hears of it."""
    with connect(endpoint) as client:
        e = client.enter(names(), ["any"])
        for value in ([0] * 400_000, [[0]] * 200_000, [{"k": i} for i in range(160_000)]):
            with pytest.raises(LimitExceeded, match=r"Limits\.max_objects"):
                e.move((value,))
        assert e.move(([0] * 200_000,)) == 0 and e.latest(1)[1] == [([0] * 200_000,)]
        peer = raw_peer(endpoint)
        peer.send(b"\x95\x07\x03" + p.pack(e.id) + b"\x91\xdd" + (1 << 20).to_bytes(4, "big") + b"\x80" * (1 << 20)
                  + b"\xc0")
        reply = peer.reply()
        assert reply[:3] == [7, p.ERROR, "LimitExceeded"] and "Limits.max_objects" in reply[3], reply
        assert e.last() == 1


def test_parked_request_limit(small_served, raw_peer, background):
    server, client = small_served
    e = client.enter("e", ["int"])
    peer = raw_peer(server.endpoints[0])
    for rid in (1, 2, 3):
        peer.request(rid, p.OBSERVE, e.id, None, None)
    assert peer.reply()[:3] == [3, p.ERROR, "LimitExceeded"]
    with pytest.raises(LimitExceeded, match="2 blocked requests"):
        e.observe(timeout=5)
    e.move((10,))
    e.move((11,))
    assert sorted([peer.reply(), peer.reply()]) == [[1, p.OK, [10]], [2, p.OK, [11]]]
    waiter = background(e.observe, timeout=30)     # room again
    until(lambda: blocked_on(server, "e") == 1, what="the observe parked again")
    e.move((12,))
    assert waiter.wait() == (12,)
