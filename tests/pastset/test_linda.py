"""The Linda facade: out, in_, rd, inp, rdp with values, types and ANY, local and remote."""

import pytest

from harness import blocked_on
from polling import until
from pastset import ANY, Linda, TemplateMismatch, Timeout


@pytest.fixture
def linda(space, names):
    return Linda(space, prefix=names("linda"))


def test_out_then_in_by_value(linda):
    linda.out("job", 1, b"payload")
    linda.out("job", 2, b"other")
    assert linda.in_("job", 2, b"other") == ("job", 2, b"other")
    assert linda.inp("job", 2, b"other") is None
    assert linda.in_("job", 1, b"payload") == ("job", 1, b"payload")


def test_rd_reads_without_removing(linda):
    linda.out("config", {"depth": 3})
    assert linda.rd("config", ANY) == ("config", {"depth": 3})
    assert linda.rdp("config", ANY) == ("config", {"depth": 3})
    assert linda.in_("config", ANY) == ("config", {"depth": 3})
    assert linda.rdp("config", ANY) is None


def test_types_and_any_are_wildcards(linda):
    linda.out("point", 1, 2.5)
    linda.out("point", True, 2.5)
    linda.out("label", "a", "b")
    assert linda.rdp(str, bool, float) == ("point", True, 2.5)
    assert linda.rdp("point", int, float) == ("point", 1, 2.5)     # a bool is not an int
    assert linda.rdp(ANY, str, ANY) == ("label", "a", "b")
    assert linda.rdp(bytes, ANY, ANY) is None
    assert linda.rdp("point", ANY, int) is None


def test_a_float_pattern_matches_int_values_but_values_match_exactly(linda):
    linda.out("n", 3)
    assert linda.rdp("n", float) == ("n", 3)
    assert linda.rdp("n", True) is None
    assert linda.rdp("n", 3) == ("n", 3)


def test_in_takes_the_oldest_match_and_out_of_order_takes_leave_the_rest(linda):
    for i in range(5):
        linda.out("t", i)
    assert linda.in_("t", 3) == ("t", 3)
    assert linda.in_("t", int) == ("t", 0)
    assert [linda.in_("t", int) for _ in range(3)] == [("t", 1), ("t", 2), ("t", 4)]
    assert linda.inp("t", int) is None


def test_arities_are_separate_spaces(linda):
    linda.out(1)
    linda.out(1, 2)
    assert linda.inp(ANY, ANY, ANY) is None
    assert linda.in_(ANY) == (1,)
    assert linda.in_(ANY, ANY) == (1, 2)


def test_in_blocks_until_a_matching_out(linda, space, names, background):
    taker = background(linda.in_, "result", int, timeout=30)
    until(lambda: blocked_on(space, names("linda") + "/2") == 1, what="the taker blocked")
    linda.out("result", "not an int")
    assert taker.running     # had it taken the tuple that does not match, it would not get 42 below
    linda.out("result", 42)
    assert taker.wait() == ("result", 42)
    assert linda.inp("result", str) == ("result", "not an int")


def test_rd_blocks_and_every_reader_sees_the_tuple(linda, space, names, background):
    readers = [background(linda.rd, "go", ANY, timeout=30) for _ in range(3)]
    until(lambda: blocked_on(space, names("linda") + "/2") == 3, what="the 3 readers blocked")
    linda.out("go", 1)
    assert [r.wait() for r in readers] == [("go", 1)] * 3
    assert linda.inp("go", 1) == ("go", 1)


def test_in_and_rd_time_out(linda):
    with pytest.raises(Timeout):
        linda.in_("never", timeout=0.1)
    with pytest.raises(Timeout):
        linda.rd("never", ANY, timeout=0)


def test_linda_on_a_binary_element_is_refused(space, names):
    e = space.enter(names(), "=II")
    with pytest.raises(TemplateMismatch, match="typed template"):
        e.find([(1, "any"), (1, "any")])


def test_an_empty_tuple_is_refused(linda):
    with pytest.raises(TemplateMismatch):
        linda.out()
