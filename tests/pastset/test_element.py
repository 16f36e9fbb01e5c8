"""Element semantics, the same test bodies in-process (TupleServer) and remote (a client of a server process)."""

import struct

import pytest

from harness import TRACE
from pastset import Expired, TemplateMismatch, Timeout, UnknownElement

REC = struct.Struct(TRACE)


def record(i: int) -> tuple:
    return (i % 65_536, 1, i, 2 * i, 3, 4, 10 * i, 10 * i + 5)


def records(lo: int, hi: int) -> bytes:
    return b"".join(REC.pack(*record(i)) for i in range(lo, hi))


# -- enter --------------------------------------------------------------------------------------

def test_enter_creates_then_binds_the_same_element(space, names):
    a = space.enter(names(), ["int", "str"])
    assert a.move((1, "one")) == 0
    b = space.enter(names(), ["int", "str"])
    assert b.last() == 1 and b.observe(0) == (1, "one")
    assert space.element(names()).observe(0) == (1, "one")


@pytest.mark.parametrize("other", [["str", "str"], ["int"], TRACE])
def test_second_enter_with_another_template_is_a_mismatch(space, names, other):
    space.enter(names(), ["int", "str"])
    with pytest.raises(TemplateMismatch) as info:
        space.enter(names(), other)
    assert "[int, str]" in str(info.value) and names() in str(info.value)


def test_second_enter_with_another_bound_is_a_mismatch_but_none_accepts_it(space, names):
    space.enter(names(), ["int"], keep=5)
    with pytest.raises(TemplateMismatch, match="keep=5"):
        space.enter(names(), ["int"], keep=6)
    assert space.enter(names(), ["int"]).keep == 5


# -- move, observe, first, last -------------------------------------------------------------------

def test_move_returns_consecutive_indices_and_last_counts_them(space, names):
    e = space.enter(names(), ["int"])
    assert (e.first(), e.last()) == (0, 0)
    assert [e.move((i,)) for i in range(5)] == [0, 1, 2, 3, 4]
    assert (e.first(), e.last()) == (0, 5)


def test_observe_without_index_is_a_consuming_cursor(space, names):
    e = space.enter(names(), ["int", "str"])
    for i in range(3):
        e.move((i, str(i)))
    assert [e.observe() for _ in range(3)] == [(0, "0"), (1, "1"), (2, "2")]
    assert (e.first(), e.last()) == (3, 3)
    with pytest.raises(Timeout):
        e.observe(timeout=0)


def test_observe_with_index_reads_and_moves_nothing(space, names):
    e = space.enter(names(), ["int"])
    for i in range(3):
        e.move((10 + i,))
    assert e.observe(2) == (12,)
    assert e.observe(0) == (10,)
    assert e.first() == 0
    assert e.observe() == (10,)


def test_consumed_index_is_expired(space, names):
    e = space.enter(names(), ["int"])
    e.move((1,))
    e.move((2,))
    e.observe()
    with pytest.raises(Expired, match="tuple 0 was discarded"):
        e.observe(0)
    assert e.observe(1) == (2,)


# -- delta (flow control) and keep (discard threshold) ---------------------------------------------

def test_delta_bounds_held_tuples(space, names):
    e = space.enter(names(), ["int"], delta=2)
    assert e.delta() == 2
    e.move((0,))
    e.move((1,))
    with pytest.raises(Timeout):
        e.move((2,), timeout=0)
    assert e.last() == 2
    e.observe()
    assert e.move((2,), timeout=0) == 2
    assert e.delta(3) == 3 and e.delta() == 3
    assert e.move((3,), timeout=0) == 3


def test_keep_never_blocks_and_drops_the_oldest(space, names):
    e = space.enter(names(), ["int", "bytes"], keep=3)
    for i in range(10):
        e.move((i, b"x"), timeout=0)
    assert (e.first(), e.last()) == (7, 10)
    with pytest.raises(Expired):
        e.observe(6)
    assert e.latest(5) == (7, [(7, b"x"), (8, b"x"), (9, b"x")])
    assert e.observe() == (7, b"x")


# -- axe, read_range, latest ---------------------------------------------------------------------------

def test_axe_discards_up_to_and_including(space, names):
    e = space.enter(names(), ["int"])
    for i in range(5):
        e.move((i,))
    assert e.axe(2) == 3
    with pytest.raises(Expired):
        e.observe(2)
    assert e.observe() == (3,)
    assert e.axe(1) == 4          # axing below first changes nothing
    assert e.axe(100) == 5        # never past last
    assert e.move((5,)) == 5 and e.observe() == (5,)


def test_read_range_returns_held_tuples_and_where_they_start(space, names):
    e = space.enter(names(), ["int"])
    assert e.read_range(0, 10) == (0, [])
    for i in range(6):
        e.move((i,))
    assert e.read_range(1, 3) == (1, [(1,), (2,)])
    assert e.read_range(4, 100) == (4, [(4,), (5,)])
    assert e.read_range(3, 3) == (3, [])
    e.axe(2)
    assert e.read_range(0, 5) == (3, [(3,), (4,)])
    assert e.read_range(50, 60) == (6, [])


def test_latest_returns_the_newest_n(space, names):
    e = space.enter(names(), ["str"])
    assert e.latest() == (0, [])
    for s in "abcd":
        e.move((s,))
    assert e.latest() == (3, [("d",)])
    assert e.latest(2) == (2, [("c",), ("d",)])
    assert e.latest(10) == (0, [("a",), ("b",), ("c",), ("d",)])
    assert e.latest(0) == (4, [])


# -- delete and listing ------------------------------------------------------------------------------

def test_delete_removes_the_element(space, names):
    e = space.enter(names(), ["int"])
    e.move((1,))
    space.delete(names())
    for op in (e.first, e.last, lambda: e.observe(0), lambda: e.move((2,)), e.latest):
        with pytest.raises(UnknownElement):
            op()
    with pytest.raises(UnknownElement, match=names()):
        space.element(names())
    with pytest.raises(UnknownElement):
        space.delete(names())
    again = space.enter(names(), ["str"])
    assert (again.first(), again.last()) == (0, 0)


def test_elements_describe_every_element(space, names):
    typed = space.enter(names("typed"), ["int", "bytes"], keep=10)
    binary = space.enter(names("binary"), TRACE, delta=100)
    for i in range(3):
        typed.move((i, b"abcd"))
        binary.move(record(i))
    typed.observe()
    infos = {i.name: i for i in space.elements()}
    t, b = infos[names("typed")], infos[names("binary")]
    assert (t.template, t.first, t.last, t.held, t.keep, t.delta, t.nbytes) == \
        ("[int, bytes]", 1, 3, 2, 10, None, 8)
    assert (b.template, b.first, b.last, b.held, b.keep, b.delta, b.nbytes) == \
        (TRACE, 0, 3, 3, None, 100, 3 * 36)
    assert typed.info() == t


def test_latest_many_reads_many_elements_in_order(space, names):
    typed = [space.enter(names(f"t{i}"), ["int"]) for i in range(5)]
    binary = [space.enter(names(f"b{i}"), TRACE, keep=4) for i in range(5)]
    for i, e in enumerate(typed):
        for j in range(i):
            e.move((j,))
    for i, e in enumerate(binary):
        for j in range(i + 3):
            e.move(record(j))
    got = space.latest_many(typed + binary, 2)
    assert got[:5] == [(0, []), (0, [(0,)]), (0, [(0,), (1,)]), (1, [(1,), (2,)]), (2, [(2,), (3,)])]
    assert got[5:] == [(1, records(1, 3)), (2, records(2, 4)), (3, records(3, 5)), (4, records(4, 6)),
                       (5, records(5, 7))]
    by_name = space.latest_many([names("t3"), binary[0], names("b4")])
    assert by_name == [(2, [(2,)]), (2, records(2, 3)), (6, records(6, 7))]
    with pytest.raises(UnknownElement):
        space.latest_many([typed[0], names("nope")])


# -- typed and binary templates --------------------------------------------------------------------------

def test_typed_fields_round_trip(space, names):
    e = space.enter(names(), ["int", "float", "str", "bytes", "bool", "any"])
    rows = [(-(2 ** 63), 1.5, "ü", b"\x00\xff", True, None),
            (2 ** 64 - 1, 2, "", b"", False, {"k": [1, "two", 3.0]})]
    for row in rows:
        e.move(row)
    assert [e.observe(i) for i in range(2)] == rows
    assert e.read_range(0, 2) == (0, rows)


def test_binary_reads_are_records_and_batches_are_bytes(space, names):
    e = space.enter(names(), TRACE)
    for i in range(5):
        assert e.move(record(i)) == i
    assert e.observe(3) == record(3)
    assert e.read_range(1, 4) == (1, records(1, 4))
    assert e.latest(2) == (3, records(3, 5))
    assert e.move_record(REC.pack(*record(5))) == 5
    assert e.observe() == record(0)
    assert e.read_range(0, 10) == (1, records(1, 6))


def test_binary_ring_wraps_when_bounded_by_keep(space, names):
    e = space.enter(names(), TRACE, keep=5)
    for i in range(13):
        e.move(record(i))
    assert (e.first(), e.last()) == (8, 13)
    assert e.read_range(0, 13) == (8, records(8, 13))
    assert e.latest(3) == (10, records(10, 13))
    assert [e.observe(i) for i in range(8, 13)] == [record(i) for i in range(8, 13)]


def test_binary_ring_wraps_after_an_unbounded_element_grows(space, names):
    e = space.enter(names(), TRACE)
    for i in range(50):
        e.move(record(i))
    for i in range(45):               # the held window now starts mid-ring
        assert e.observe() == record(i)
    for i in range(50, 300):          # grows (doubling) several times while wrapped
        e.move(record(i))
    assert e.read_range(0, 300) == (45, records(45, 300))
    assert e.latest(7) == (293, records(293, 300))
    assert e.observe(100) == record(100) and e.observe() == record(45)


def test_binary_ring_follows_a_delta_set_after_entering(space, names):
    e = space.enter(names(), TRACE)
    for i in range(70):
        e.move(record(i))
    for i in range(60):
        e.observe()
    assert e.delta(12) == 12
    for i in range(70, 72):
        e.move(record(i), timeout=0)
    with pytest.raises(Timeout):
        e.move(record(72), timeout=0)
    assert e.read_range(0, 100) == (60, records(60, 72))
    e.delta(20)
    for i in range(72, 80):
        e.move(record(i), timeout=0)
    assert e.read_range(0, 100) == (60, records(60, 80))


def test_binary_ring_follows_a_delta_raised_from_the_one_it_was_entered_with(space, names):
    e = space.enter(names(), TRACE, delta=2)
    e.delta(5)
    for i in range(5):
        e.move(record(i), timeout=0)
    assert e.read_range(0, 10) == (0, records(0, 5))
    assert [e.observe() for _ in range(5)] == [record(i) for i in range(5)]


def test_binary_ring_follows_a_delta_lowered_below_what_is_held(space, names):
    e = space.enter(names(), TRACE)
    for i in range(10):
        e.move(record(i))
    e.delta(4)
    with pytest.raises(Timeout):
        e.move(record(10), timeout=0)
    for i in range(7):
        assert e.observe() == record(i)
    e.move(record(10), timeout=0)
    with pytest.raises(Timeout):
        e.move(record(11), timeout=0)
    e.delta(30)
    for i in range(11, 37):
        e.move(record(i), timeout=0)
    assert e.read_range(0, 100) == (7, records(7, 37))
