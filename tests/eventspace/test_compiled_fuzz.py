"""The compiled collector's entry points (eventspace/collector_c/: Collect, RingAppender, TypedSize)
fuzzed against the pure-Python references they stand in for (eventspace.collector.collecting,
BinaryElement.reference_appender, Template.sizer): any type, any value. Each pair returns the same and writes
the same records, or both raise (the same exception, where the values an operation hands back are
odd; some exception, where the element's own cursors were set to what no element holds).

In this process: a crash here would end pytest, which the fixed code must not do (the reproducers
of the crashes, in processes of their own, are in tests/reliability/test_compiled_collector.py)."""

from __future__ import annotations

import itertools
import operator
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventspace import compiled, trace
from eventspace.collector import _COLLECTIVES_MASK, _payload_size, collecting
from eventspace.table import Page
from paths import operation as op
from pastset import TemplateMismatch, TupleServer
from pastset.template import Template

C = compiled._built   # the compiled module whatever EVENTSPACE_PURE says
if C is None:
    pytest.fail(f"the compiled collector is not built ({compiled._NOT_BUILT}): `make .venv/.installed` builds it",
                pytrace=False)

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Index:
    """An object with __index__ and nothing else (what numpy's integers are to struct)."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value

    def __repr__(self):
        return f"Index({self.value!r})"


class SelfAnd:
    """`x & mask` is x itself: the compiled masking recursed on such a value until the stack ended."""

    def __and__(self, other):
        return self

    __rand__ = __and__

    def __repr__(self):
        return "SelfAnd()"


class Hostile:
    """Raises `error` from everything a collector might ask of it."""

    def __init__(self, error):
        self.error = error

    def _raise(self, *args):
        raise self.error("hostile")

    __index__ = __bool__ = __and__ = __rand__ = __eq__ = __hash__ = __getitem__ = __len__ = _raise

    def __repr__(self):
        return f"Hostile({self.error.__name__})"


class Tricky(int):
    """An int whose `&` and comparisons are its own (a C fast path for ints must not take it)."""

    def __and__(self, other):
        return Tricky(int(self) >> 1)

    def __eq__(self, other):
        return False

    def __lt__(self, other):
        return True

    __le__ = __gt__ = __ge__ = __lt__
    __hash__ = int.__hash__

    def __repr__(self):
        return f"Tricky({int(self)})"


class Stop(BaseException):
    """What a stage raises that is no Exception (as KeyboardInterrupt is not)."""


SCALARS = st.one_of(
    st.integers(), st.integers(-(2 ** 64), 2 ** 65), st.sampled_from([0, 1, 2, 2 ** 16, 2 ** 32 - 1, 2 ** 32, -1]),
    st.booleans(), st.none(), st.floats(), st.text(max_size=4), st.binary(max_size=4),
    st.integers(-(2 ** 63), 2 ** 63 - 1).map(np.int64), st.integers(0, 2 ** 64 - 1).map(np.uint64),
    st.integers(-128, 127).map(np.int8), st.integers(0, 2 ** 32 - 1).map(np.uint32), st.booleans().map(np.bool_),
    st.floats().map(np.float64), st.integers(-(2 ** 70), 2 ** 70).map(Index),
    st.just(SelfAnd()), st.sampled_from([ValueError, TypeError]).map(Hostile), st.just(np.arange(2)),
    st.integers(-5, 2 ** 33).map(Tricky),
)
ANY = st.recursive(SCALARS, lambda inner: st.one_of(st.tuples(inner), st.tuples(inner, inner),
                                                    st.lists(inner, max_size=3)), max_leaves=4)
# Operation codes: the real ones, as ints and as what compares equal to them, and anything else.
CODES = st.one_of(
    st.sampled_from(sorted(op.NAMES)),
    st.sampled_from([op.MOVE, op.OBSERVE, *sorted(op.COLLECTIVES)]).flatmap(
        lambda c: st.sampled_from([c, np.int64(c), np.uint16(c), float(c), Index(c), c + 2 ** 64])),
    ANY,
)
# What a stage hands back: anything, an observe's (index, tuple) of any kind, or an exception.
RESULTS = st.one_of(ANY, st.tuples(ANY, ANY), st.tuples(st.integers(-5, 2 ** 40), st.tuples(st.integers(0, 9))),
                    st.sampled_from([ValueError("stage"), TimeoutError("stage"), Stop()]))
ARGS = st.one_of(st.tuples(ANY, ANY), st.tuples(st.tuples(st.integers(-5, 300), st.binary(max_size=3)), st.none()),
                 st.tuples(), ANY)
FIELDS = ["int", "bytes"]
# size_of as a collector gets it: every tuple's size, or a function of the tuple (the compiled
# TypedSize, the template's own), or a function giving anything
SIZES = st.one_of(st.sampled_from([36, 0, np.int64(12), True, "typed", "template"]),
                  ANY.map(lambda value: (lambda values: value)))

_server = TupleServer("fuzz")
_names = itertools.count()


def trace_element():
    """A fresh trace element (=HHIIIIQQ, keep 4: a few appends wrap its ring)."""
    return _server.enter(f"t{next(_names)}", trace.FORMAT, keep=4)


def size_function(size):
    if size == "typed":
        return _payload_size(_Pathmap(FIELDS), "e", C)
    if size == "template":
        return Template.typed(*FIELDS).sizer()
    return size


class _Pathmap:
    """What _payload_size reads of a pathmap: one typed element's template."""

    def __init__(self, fields):
        self.fields = fields

    def element(self, name):
        return type("Spec", (), {"template": self.fields})


def outcome(call):
    """("ok", what `call()` returned) or ("raised", the exception)."""
    try:
        return "ok", call()
    except BaseException as exc:   # noqa: BLE001 - Stop too: compared below
        return "raised", exc


def same_exception(a: BaseException, b: BaseException) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, TemplateMismatch):
        assert str(a) == str(b)


def written(element):
    """(first, last, the held records with their times zeroed) of a trace element."""
    records = trace.decode(element.read_range(0, 1 << 40)[1]).copy()
    records["t_start"], records["t_end"] = 0, 0
    return element.first(), element.last(), records.tobytes()


def stage(result):
    """The next stage: returns `result`, or raises it."""
    def next_stage(code, args):
        if isinstance(result, BaseException):
            raise result
        return result
    return next_stage


@FUZZ
@given(calls=st.lists(st.tuples(CODES, ARGS, RESULTS), min_size=1, max_size=6), size=SIZES,
       on=st.booleans(), ring=st.booleans())
def test_the_compiled_collect_does_what_the_pure_closure_does(calls, size, on, ring):
    """Collect and eventspace.collector.collecting, given the same stage results: the same return or
    the same exception, and the same records (but for their times). `ring`: the compiled one appends
    with the compiled RingAppender, or through the pure appender as a Python call."""
    size = size_function(size)
    sides = {}
    for side in ("compiled", "pure"):
        element = trace_element()
        page = Page()
        page.switches[1] = on
        results = iter([result for _, _, result in calls])
        nxt = lambda code, args: stage(next(results))(code, args)   # noqa: E731
        if side == "compiled":
            append = C.RingAppender(element, True) if ring else element.reference_appender(True)
            collect = C.Collect(nxt, C.TableSlot(page, 1), 1, 7, 3, 3 | trace.ERROR, size, append, 0, op.MOVE,
                                op.OBSERVE, _COLLECTIVES_MASK)
        else:
            collect = collecting(nxt, page, 1, 1, 7, 3, 3 | trace.ERROR, size,
                                 element.reference_appender(True), time.monotonic_ns)
        sides[side] = ([outcome(lambda: collect(code, args)) for code, args, _ in calls], written(element),
                       page.starts[1])
        _server.delete(element.name)
    (compiled_outcomes, compiled_written, compiled_inflight), (pure_outcomes, pure_written, pure_inflight) = \
        sides["compiled"], sides["pure"]
    for (how, got), (pure_how, expected) in zip(compiled_outcomes, pure_outcomes):
        assert how == pure_how, (got, expected)
        if how == "ok":
            assert got is expected
        else:
            same_exception(got, expected)
    assert compiled_written == pure_written
    assert compiled_inflight == pure_inflight == 0


# What happens to a trace element between two records of its collector: a record, its cursors moved
# on from outside (new int objects, held elsewhere too), or another writer's record.
OUTSIDE = st.lists(st.one_of(st.just(("record",)), st.tuples(st.just("jump"), st.integers(0, 15)),
                             st.just(("other",))), min_size=1, max_size=12)


@FUZZ
@given(steps=OUTSIDE)
def test_records_land_where_the_pure_collectors_do_when_the_element_changed_since_the_last(steps):
    """A compiled Collect prefetches where its next record will go when it starts an operation (the
    element's cursors and the ring's next slot, noted at its last record): what changed the element
    in between (its cursors replaced, another writer's records) must not move a record, which lands
    where the pure collector's does."""
    sides = {}
    for side in ("compiled", "pure"):
        element = trace_element()
        page = Page()
        if side == "compiled":
            collect = C.Collect(stage(5), C.TableSlot(page, 1), 1, 7, 3, 3 | trace.ERROR, 12,
                                C.RingAppender(element, True), 0, op.MOVE, op.OBSERVE, _COLLECTIVES_MASK)
        else:
            collect = collecting(stage(5), page, 1, 1, 7, 3, 3 | trace.ERROR, 12,
                                 element.reference_appender(True), time.monotonic_ns)
        other, held = element.appender(), []
        for step in steps:
            if step[0] == "record":
                collect(op.MOVE, ((1, b"x"), None))
            elif step[0] == "other":
                other(2, 0, 9, 9, 0, 0, 0, 0)
            else:   # as if records were appended elsewhere: new int objects, which others hold too
                element._last = int(str(element._last + step[1]))
                element._first = int(str(max(element._first, element._last - element.keep)))
                held.append((element._last, element._first))
        sides[side] = written(element)
        _server.delete(element.name)
    assert sides["compiled"] == sides["pure"]


def test_a_collect_refuses_a_fixed_size_that_no_record_holds():
    element = trace_element()
    for size in (-1, 2 ** 32, 2 ** 64, 1.5, "8"):
        with pytest.raises(ValueError, match="u32"):
            C.Collect(stage(0), C.TableSlot(Page(), 1), 1, 0, 0, 1, size, C.RingAppender(element), 0,
                      op.MOVE, op.OBSERVE, _COLLECTIVES_MASK)


@pytest.mark.parametrize("field, value", [("cid", 2 ** 64 + 1), ("cid", -1), ("eid", 2 ** 32), ("flags", 2 ** 16),
                                          ("failed", -1), ("offset_ns", 2 ** 62 + 1), ("offset_ns", -(2 ** 63)),
                                          ("collectives", -1)])
def test_a_collect_refuses_ids_flags_and_offsets_that_do_not_fit_instead_of_wrapping_them(field, value):
    arguments = {"next": stage(0), "slot": C.TableSlot(Page(), 1), "cid": 1, "eid": 0,
                 "flags": 0, "failed": 1, "size_of": 36, "append": C.RingAppender(trace_element()), "offset_ns": 0,
                 "move": op.MOVE, "observe": op.OBSERVE, "collectives": _COLLECTIVES_MASK}
    with pytest.raises((ValueError, OverflowError)):
        C.Collect(**{**arguments, field: value})


# -- RingAppender against BinaryElement.reference_appender ------------------------------------------

# An element's cursors as something outside may have set them: ints within the +-2^62 a ring ever
# counts, numpy integers and bools (taken as the ints their __index__ gives). What is no index, or
# beyond, is refused as it is set (tests/pastset/test_appender.py), so no append ever sees it; an
# append at 2^62 itself is refused (below).
def cursors(top: int):
    return st.one_of(st.integers(-(2 ** 62), top), st.integers(-12, 12), st.integers(-12, 12).map(np.int64),
                     st.integers(-(2 ** 62), top).map(np.int64), st.booleans())


FIRSTS, CURSORS = cursors(2 ** 62), cursors(2 ** 62 - 1)
WAITERS = st.one_of(st.just(0), st.just(0), st.integers(0, 2), ANY)
VALUES = st.lists(st.one_of(st.integers(0, 2 ** 16 - 1), st.integers(-1, 2 ** 64), ANY), min_size=8, max_size=8)


def twin(state: dict):
    """A trace element holding six records, then `state` set on it (its cursors, its waiters...)."""
    element = trace_element()
    for i in range(6):
        element.move((1, 0, 2, 3, i, 5, 6, 7))
    for name, value in state.items():
        setattr(element, name, value)
    return element


def index_or_repr(value):
    try:
        return operator.index(value)
    except TypeError:
        return repr(value)


@FUZZ
@given(last=CURSORS, first=FIRSTS, sleepers=WAITERS, parked=WAITERS, values=VALUES, single_writer=st.booleans())
def test_the_compiled_appender_does_what_the_pure_one_does(last, first, sleepers, parked, values, single_writer):
    """Any values appended, onto any cursors: the same index, cursors and ring, or both raise (the
    same exception when the waiter counts are ints: the values' fault)."""
    state = {"_last": last, "_first": first, "_sleepers": sleepers, "_parked": parked}
    got = {}
    for side in ("compiled", "pure"):
        element = twin(state)
        make = C.RingAppender if side == "compiled" else type(element).reference_appender
        how, result = outcome(lambda: make(element, single_writer)(*values))
        got[side] = how, result, element
    (how, result, element), (pure_how, expected, pure_element) = got["compiled"], got["pure"]
    assert how == pure_how, (result, expected)
    if how == "raised" and type(sleepers) is type(parked) is int:
        same_exception(result, expected)
    if how == "ok":
        assert index_or_repr(result) == index_or_repr(expected)
        assert (element._last, element._first) == (pure_element._last, pure_element._first)
        assert bytes(element._ring) == bytes(pure_element._ring)
    for e in (element, pure_element):
        e._sleepers = e._parked = 0
        _server.delete(e.name)


def test_an_append_at_2_62_is_refused_and_nothing_is_written():
    """No ring's cursors reach 2**62 (that many appends take a century at one a nanosecond), and a
    cursor cannot be set past it; at it, the append refuses: the collector's and pastset's own, which
    are one append (pastset/ring_c/ring.c)."""
    element = twin({"_last": 2 ** 62, "_first": 0})
    ring = bytes(element._ring)
    for append in (C.RingAppender(element, True), element.appender(True), element.appender()):
        with pytest.raises(OverflowError, match="2\\^62"):
            append(1, 0, 2, 3, 4, 5, 6, 7)
    assert bytes(element._ring) == ring and element._last == 2 ** 62
    _server.delete(element.name)


SHAPES = st.one_of(st.integers(-1, 12), st.sampled_from([2 ** 62, 2 ** 61 + 1, 2 ** 63, 2 ** 64]),
                   st.integers(-(2 ** 64), 2 ** 64), st.integers(0, 10).map(np.int64), st.floats(), st.none())
RINGS = st.one_of(st.integers(0, 12).map(lambda n: bytearray(36 * n + 3)), st.integers(0, 12).map(lambda n: bytes(36 * n)),
                  st.integers(0, 12).map(lambda n: np.zeros(36 * n, np.uint8)), st.none())


@FUZZ
@given(cap=SHAPES, keep=st.one_of(st.integers(1, 5), SHAPES), size=st.one_of(st.just(36), SHAPES), ring=RINGS,
       last=st.integers(-20, 10 ** 12),
       values=VALUES)
def test_the_compiled_appender_checks_the_ring_it_is_given(cap, keep, size, ring, last, values):
    """A ring whose size, capacity or keep is not what the element says (set from outside) is
    refused when the appender is made; one that it takes, it appends to as the pure appender does."""
    state = {"_cap": cap, "keep": keep, "_size": size, "_last": last, "_first": max(0, last - 3)}
    if ring is not None:
        state["_ring"] = ring
    element = twin(state)
    try:
        append = C.RingAppender(element, True)
    except (ValueError, TypeError, OverflowError, BufferError):
        return
    pure = twin({**state, "_ring": bytearray(bytes(memoryview(element._ring).cast("B")))})
    assert 0 < keep < cap <= len(memoryview(element._ring).cast("B")) // 36 and size == 36
    how, result = outcome(lambda: append(*values))
    pure_how, expected = outcome(lambda: type(pure).reference_appender(pure, True)(*values))
    assert how == pure_how, (result, expected)
    if how == "ok":
        assert result == expected and element._last == pure._last and element._first == pure._first
        assert bytes(memoryview(element._ring).cast("B")) == bytes(memoryview(pure._ring).cast("B"))


# -- TypedSize against Template.sizer --------------------------------------------------------------

KINDS = {"int": "i", "float": "f", "str": "s", "bytes": "b", "bool": "?"}


@FUZZ
@given(fields=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=5), values=st.one_of(ANY, st.tuples(ANY)),
       as_list=st.booleans())
def test_the_compiled_size_of_any_values_is_the_template_functions(fields, values, as_list):
    reference = Template.typed(*fields).sizer()
    size = C.TypedSize("".join(KINDS[f] for f in fields).encode(), reference)
    if as_list and isinstance(values, tuple):
        values = list(values)
    how, got = outcome(lambda: size(values))
    pure_how, expected = outcome(lambda: reference(values))
    assert how == pure_how, (got, expected)
    if how == "ok":
        assert got == expected
    else:
        same_exception(got, expected)


def test_an_int_subclass_is_measured_as_the_template_function_measures_it():
    """The compiled size took any int subclass as a plain int; one with comparisons of its own is
    sized by the template's function, whose comparisons it answers."""
    reference = Template.typed("int", "float").sizer()
    values = (Tricky(2 ** 33), Tricky(-(2 ** 40)))
    assert C.TypedSize(b"if", reference)(values) == reference(values) == 3
