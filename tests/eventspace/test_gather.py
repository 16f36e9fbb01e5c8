"""Gather joins' plumbing: joining record batches, and merging the leaf reads of one round per node."""

import struct

import msgpack
import numpy as np

from eventspace import trace
from eventspace.gather import _merged
from pastset import protocol as p


def batch(*collectors):
    return trace.decode(b"".join(struct.pack(trace.FORMAT, 1, 0, c, 0, 0, 0, c, c + 1) for c in collectors))


def as_sent(request):
    """(node, op, args) as the server receives them."""
    node, op, args = request
    return node, op, tuple(msgpack.unpackb(p.pack_request(0, op, args), raw=False)[2:])


def test_concat_keeps_every_record_in_order():
    joined = trace.concat([batch(1, 2), batch(), batch(3)])
    assert joined.dtype == trace.DTYPE and joined["collector"].tolist() == [1, 2, 3]
    assert np.array_equal(trace.concat([batch(4)]), batch(4))
    assert len(trace.concat([])) == 0


def test_leaf_reads_to_one_node_travel_as_one_request_and_each_join_gets_its_part():
    got = {}
    requests = [
        ("A", p.LATEST_MANY, (["t/1", "t/2"], 1), lambda r: got.setdefault("j1", r), set()),
        ("B", p.LATEST_MANY, (["t/3"], 1), lambda r: got.setdefault("j2", r), set()),
        ("A", p.LATEST_MANY, (["t/4"], 1), lambda r: got.setdefault("j3", r), set()),
        ("A", p.CALL, ("eventspace.scope.pull", ["k"]), lambda r: got.setdefault("child", r), {"C"}),
        ("A", p.RANGE_MANY, (["t/5"], [7], 99), lambda r: got.setdefault("j4", r), set()),
        ("A", p.RANGE_MANY, (["t/6"], [9], 99), lambda r: got.setdefault("j5", r), set()),
    ]
    sent = _merged(requests, {})
    # The child join on A reads node C's trace elements: if A does not answer, C is unreached.
    assert [set(unreached) for _, _, unreached in sent] == [set(), set(), {"C"}, set()]
    assert [as_sent(request) for request, _, _ in sent] == [
        ("A", p.LATEST_MANY, (["t/1", "t/2", "t/4"], 1)),
        ("B", p.LATEST_MANY, (["t/3"], 1)),
        ("A", p.CALL, ("eventspace.scope.pull", ["k"])),
        ("A", p.RANGE_MANY, (["t/5", "t/6"], [7, 9], 99)),
    ]
    replies = [["r1", "r2", "r4"], ["r3"], "pulled", ["r5", "r6"]]
    for reply, (_, handlers, _) in zip(replies, sent):
        for handle, part in handlers:
            handle(reply if part is None else reply[part])
    assert got == {"j1": ["r1", "r2"], "j2": ["r3"], "j3": ["r4"], "child": "pulled", "j4": ["r5"], "j5": ["r6"]}


def test_merged_newest_records_are_cut_by_collector_for_each_join():
    got = {}
    requests = [
        ("A", p.LATEST_RECORDS, (["trace/1", "trace/2"], 1), lambda r: got.setdefault("j1", r), set()),
        ("A", p.LATEST_RECORDS, (["trace/3"], 1), lambda r: got.setdefault("j2", r), set()),
    ]
    (request, handlers, _), = _merged(requests, {})
    assert as_sent(request) == ("A", p.LATEST_RECORDS, (["trace/1", "trace/2", "trace/3"], 1))
    reply = trace.encode(batch(1, 3))  # trace/2 held nothing yet
    for handle, part in handlers:
        handle(part.of(reply))
    assert got["j1"]["collector"].tolist() == [1] and got["j2"]["collector"].tolist() == [3]


def test_a_joins_names_are_encoded_once_and_its_counters_every_round():
    names_a, names_b, cache = ["t/1"], ["t/2"], {}
    rounds = [_merged([("A", p.RANGE_MANY, (names_a, [lo], 9), print, set()),
                       ("A", p.RANGE_MANY, (names_b, [lo + 1], 9), print, set())], cache) for lo in (3, 5)]
    (first, _, _), = rounds[0]
    (second, _, _), = rounds[1]
    assert first[2][0] is second[2][0]  # the same encoded names, not encoded again
    assert as_sent(first) == ("A", p.RANGE_MANY, (["t/1", "t/2"], [3, 4], 9))
    assert as_sent(second) == ("A", p.RANGE_MANY, (["t/1", "t/2"], [5, 6], 9))
