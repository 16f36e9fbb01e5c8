"""latest_records: the newest records of many binary elements as one bytes, in one request."""

import struct

import pytest

import pastset

FMT = "=IQ"


def test_the_newest_records_of_many_elements_in_order(space, names):
    a = space.enter(names("a"), FMT, keep=5)
    b = space.enter(names("b"), FMT, keep=5)
    empty = space.enter(names("empty"), FMT, keep=5)
    for i in range(8):
        a.move((1, i))
    b.move((2, 40))
    data = space.latest_records([names("a"), names("empty"), names("b")], 2)
    assert list(struct.iter_unpack(FMT, data)) == [(1, 6), (1, 7), (2, 40)]
    assert space.latest_records([a if isinstance(space, pastset.TupleServer) else names("a")], 1) == struct.pack(FMT, 1, 7)
    assert empty.last() == 0


def test_typed_and_unknown_elements_are_refused(space, names):
    space.enter(names("typed"), ["int"])
    with pytest.raises(pastset.TemplateMismatch, match="binary elements only"):
        space.latest_records([names("typed")])
    with pytest.raises(pastset.UnknownElement):
        space.latest_records([names("nothing")])


def test_rings_entered_together_share_a_slab_and_read_the_same():
    server = pastset.TupleServer("slab")
    rings = server.enter_rings([f"r{i}" for i in range(6)], FMT, keep=4)
    assert len({id(r.slab) for r in rings}) == 1
    for i, ring in enumerate(rings[:5]):
        for j in range(i * 3):
            ring.move((i, j))
    names = [f"r{i}" for i in (5, 4, 0, 2, 1, 3)]
    expected = b"".join(server.element(n).latest(1)[1] for n in names)
    assert server.latest_records(names) == expected                   # r0 and r5 hold nothing: skipped
    assert list(struct.iter_unpack(FMT, expected)) == [(4, 11), (2, 5), (1, 2), (3, 8)]
    assert server.latest_records(names, 2) == b"".join(server.element(n).latest(2)[1] for n in names)
    with pytest.raises(pastset.BadArgument, match="both keep and delta"):
        rings[2].delta(2)                                               # a kept ring takes no delta: unchanged
    assert server.latest_records(names) == expected
    server.delete("r4")
    with pytest.raises(pastset.UnknownElement):
        server.latest_records(names)
    with pytest.raises(pastset.TemplateMismatch, match="exist already"):
        server.enter_rings(["r1", "new"], FMT, keep=4)
