"""Event collectors in one node server (in this process): what they record, discarding, switching, trees.

Every test runs over both implementations (the `implementation` fixture: compiled and pure)."""

import dataclasses
import platform
import struct
import threading
import time
import types

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventspace import compiled, trace
from eventspace.catalogue import Catalogue
from eventspace.collector import _payload_size
from eventspace.space import CONTROL, switch_collectors
from paths import DEFAULT_KEEP, AppMap, ClusterMap, Context, Instrument, NodeServer, Placement, Selector, generate
from pastset import Timeout
from pastset.template import Template
from polling import until

APP = """\
threads: 3
elements:
  - {name: rows, template: [int, bytes], delta: 4, users: [T0, T1]}
  - {name: samples, template: '=IQ', keep: 50, users: [T0, T2]}
trees:
  - {name: total, kind: allreduce, members: all}
"""
ONE_NODE = "clusters: {c1: {nodes: {A: {host: 127.0.0.1}}}}"


@pytest.fixture
def node(closing, implementation):
    """`node(*selectors, keep=, shape=, app=)` -> (NodeServer, Catalogue) of APP on one node, instrumented
    by `selectors`, running the collector `implementation`; every server is closed at teardown (its
    event space's threads end with it)."""

    def make(*selectors, keep=DEFAULT_KEEP, shape="kary:2", app=APP):
        pm = generate(AppMap.loads(app), ClusterMap.loads(ONE_NODE), Placement(), shape, name="col")
        pm = dataclasses.replace(pm, instrument=Instrument(keep=keep, collectors=selectors)).validate()
        server = closing(NodeServer(pm, "A"))
        assert server.services["eventspace"].implementation == implementation
        return server, Catalogue(pm)

    return make


def records(server, entry):
    """Everything collector `entry` (a catalogue Entry) has written, decoded."""
    element = server.server.element(entry.trace)
    return trace.decode(element.read_range(0, 1 << 40)[1])


def test_the_trace_tuple_is_36_bytes_and_decodes_with_numpy():
    packed = struct.pack(trace.FORMAT, 1, 2, 3, 4, 5, 6, 7, 8) * 2
    assert trace.SIZE == 36 and trace.DTYPE.itemsize == 36
    batch = trace.decode(packed)
    assert batch["t_end"].tolist() == [8, 8] and batch["collector"].tolist() == [3, 3]
    assert trace.encode(batch) == packed
    with pytest.raises(ValueError, match="whole number of 36-byte records"):
        trace.decode(packed[:-1])


def test_a_source_collector_records_each_operation_of_its_path(node):
    server, catalogue = node(Selector(at=("source",)))
    t0, t1 = Context(server, "T0", {}), Context(server, "T1", {})
    before = time.monotonic_ns()
    assert t0.path("rows").move((7, b"payload")) == 0
    assert t0.path("rows").move((8, b"xy")) == 1
    assert t1.path("rows").observe() == (7, b"payload")
    after = time.monotonic_ns()
    mine = {(e.thread, e.element): e for e in catalogue}
    moves = records(server, mine[("T0", "rows")])
    assert moves["op"].tolist() == [trace.OP_CODES["move"]] * 2
    assert moves["arg"].tolist() == [0, 1]              # the index each tuple got
    wire = [len(msgpack.packb(t)) for t in ((7, b"payload"), (8, b"xy"))]
    assert moves["nbytes"].tolist() == wire == [11, 6]  # each tuple as it crosses the wire
    assert moves["element"].tolist() == [0, 0]          # rows is the pathmap's element 0
    assert (moves["t_start"] <= moves["t_end"]).all()
    assert before <= moves["t_start"].min() and moves["t_end"].max() <= after
    observes = records(server, mine[("T1", "rows")])
    assert observes["op"].tolist() == [trace.OP_CODES["observe"]]
    assert observes["arg"].tolist() == [0] and observes["nbytes"].tolist() == [11]


WIRE_APP = """\
threads: 1
elements:
  - {name: counts, template: [int, int, float, bool], users: [T0]}
  - {name: names, template: [str, any], users: [T0]}
  - {name: samples, template: '=IQ', keep: 50, users: [T0]}
"""


@pytest.mark.parametrize("element, values", [
    ("counts", (1, 2, 0.5, True)),                     # small ints: one byte each
    ("counts", (200, -40_000, 3, False)),              # a float field may hold an int
    ("counts", (2 ** 64 - 1, -(2 ** 63), 1e300, True)),
    ("names", ("", None)),
    ("names", ("é" * 40, {"nested": [1, b"x" * 300]})),  # non-ASCII text; any field
    ("samples", (7, 2 ** 40)),                         # binary: the 12-byte record
])
def test_nbytes_is_the_size_of_the_tuple_on_the_wire(node, element, values):
    """nbytes of a move and of the observe that reads it: the tuple's msgpack encoding (a record's
    size for a binary template), whatever its fields; a tuple of ints is not 0 bytes."""
    server, catalogue = node(Selector(at=("source",)), shape="flat", app=WIRE_APP)
    handle = Context(server, "T0", {}).path(element)
    handle.move(values)
    assert handle.observe(0) is not None
    (entry,) = [e for e in catalogue if e.element == element]
    expected = 12 if element == "samples" else len(msgpack.packb(list(values), use_bin_type=True))
    assert records(server, entry)["nbytes"].tolist() == [expected, expected]


def test_an_operation_that_raises_is_recorded_with_the_error_flag(node):
    server, catalogue = node(Selector(at=("source",), threads=("T1",)))
    with pytest.raises(Timeout):
        Context(server, "T1", {}).path("rows").observe(timeout=0)
    (entry,) = [e for e in catalogue if e.element == "rows"]
    (record,) = records(server, entry)
    assert record["flags"] & trace.ERROR and record["op"] == trace.OP_CODES["observe"]


def test_keep_is_the_discard_threshold_of_each_trace_element(node):
    server, catalogue = node(Selector(at=("source",), threads=("T0",), elements=("samples",)), keep=10)
    handle = Context(server, "T0", {}).path("samples")
    for i in range(25):
        handle.move((i, i))
    (entry,) = catalogue
    element = server.server.element(entry.trace)
    assert (element.first(), element.last()) == (15, 25)
    assert records(server, entry)["arg"].tolist() == list(range(15, 25))


def test_a_sink_collector_sees_every_thread_using_its_element(node):
    server, catalogue = node(Selector(at=("sink",), elements=("samples",)))
    Context(server, "T0", {}).path("samples").move((1, 1))
    Context(server, "T2", {}).path("samples").move((2, 2))
    (entry,) = catalogue.entries
    assert entry.role == "sink" and entry.thread is None
    assert records(server, entry)["arg"].tolist() == [0, 1]


def test_tree_collectors_time_contributions_arrivals_and_departures(node):
    server, catalogue = node(Selector(trees=("total",)))
    results = {}

    def member(name):
        results[name] = Context(server, name, {}).allreduce(int(name[1:]) + 1, "sum", timeout=10)

    threads = [threading.Thread(target=member, args=(f"T{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == {"T0": 6, "T1": 6, "T2": 6}
    pm = server.pathmap
    for entry in catalogue:
        recs = records(server, entry)
        assert (recs["flags"] & trace.TREE).all() and (recs["op"] == trace.OP_CODES["allreduce"]).all()
        if entry.role == "contribute":
            assert len(recs) == 1                                        # one per member per round
        elif entry.role == "arrival":
            assert len(recs) == pm.fan_in("total", entry.stage)          # one per child of the join
        else:
            assert entry.role == "departure" and len(recs) == 1          # the join forwards once
            assert entry.stage != pm.tree("total").root
    assert {e.role for e in catalogue} == {"contribute", "arrival", "departure"}


def test_collectors_switch_off_and_on_through_the_control_element_within_100_ms(node):
    server, catalogue = node(Selector(at=("source",), threads=("T0",), elements=("samples",)))
    (entry,) = catalogue
    cid = entry.id
    handle = Context(server, "T0", {}).path("samples")
    handle.move((0, 0))
    switch_collectors(server.server, False, [cid])
    until(lambda: not server.services["eventspace"].switch(cid), 0.1)
    handle.move((1, 1))
    assert len(records(server, entry)) == 1        # switched off: forwarded, not recorded
    switch_collectors(server.server, True)       # None: every collector of the node
    until(lambda: server.services["eventspace"].switch(cid), 0.1)
    handle.move((2, 2))
    assert records(server, entry)["arg"].tolist() == [0, 2]
    assert server.server.element(CONTROL).last() == 2


def test_the_catalogue_names_each_collector_and_its_trace_element(node):
    server, catalogue = node(Selector(at=("source", "sink")), Selector(trees=("total",)))
    assert [e.id for e in catalogue] == list(range(1, len(catalogue) + 1))
    for entry in catalogue:
        assert entry.trace == f"trace/{entry.id}" and entry.trace_node == "A"
        assert server.server.element(entry.trace).template.fmt == trace.FORMAT
        assert catalogue.by_trace(entry.trace) is entry and catalogue[entry.id] is entry
    # Every collector's id is the one its point got, once, from the pathmap.
    assert [e.id for e in catalogue] == [p.id for p in server.pathmap.collector_points()]
    sources = [e for e in catalogue if e.role == "source"]
    assert {(e.thread, e.element) for e in sources} == {("T0", "rows"), ("T1", "rows"), ("T0", "samples"),
                                                        ("T2", "samples")}
    column, names = catalogue.column("thread"), catalogue.names("thread")
    assert [names[column[e.id]] for e in catalogue] == [e.thread for e in catalogue]


def test_an_operation_under_way_shows_in_the_in_flight_table_until_it_returns(node):
    server, catalogue = node(Selector(at=("source",), threads=("T1",), elements=("rows",)))
    (entry,) = catalogue
    space = server.services["eventspace"]
    got = []
    reader = threading.Thread(target=lambda: got.append(Context(server, "T1", {}).path("rows").observe(timeout=10)))
    before = time.monotonic_ns()
    reader.start()
    until(lambda: space.in_flight(), 5)
    ((cid, t0),) = space.in_flight()
    assert cid == entry.id and before <= t0 <= time.monotonic_ns()
    Context(server, "T0", {}).path("rows").move((1, b"x"))
    reader.join(10)
    assert got == [(1, b"x")] and space.in_flight() == []
    (record,) = records(server, entry)
    assert record["t_start"] == t0 and record["op"] == trace.OP_CODES["observe"]


@pytest.mark.parametrize("role", ["source", "sink"])   # a lock-free appender, and a locked one
def test_a_reader_waiting_on_a_trace_element_wakes_when_the_collector_writes(node, role):
    import pastset

    server, catalogue = node(Selector(at=(role,), threads=("T0",) if role == "source" else (),
                                      elements=("samples",)))
    (entry,) = catalogue
    element = server.server.element(entry.trace)
    remote = pastset.connect(server.serve("tcp://127.0.0.1:0"))
    got = {}
    local = threading.Thread(target=lambda: got.setdefault("local", element.observe(0, timeout=10)))
    parked = threading.Thread(target=lambda: got.setdefault("remote", remote.element(entry.trace).observe(0, timeout=10)))
    try:
        local.start()
        parked.start()
        until(lambda: element._sleepers == 1 and element.parked == 1, 5)
        Context(server, "T0", {}).path("samples").move((5, 6))
        local.join(10)
        parked.join(10)
    finally:
        remote.close()
    assert got["local"][:5] == got["remote"][:5] == (trace.OP_CODES["move"], 0, entry.id, entry.element_id, 0)


def test_the_compiled_and_the_pure_collector_write_the_same_records_but_for_the_times(closing, monkeypatch):
    """The same operations through a compiled node and a pure one leave byte-identical trace elements
    once t_start and t_end are zeroed: every op, flag, id, index, size, error and round."""
    from eventspace import compiled

    if compiled._built is None:
        pytest.fail("the compiled collector is not built: `make .venv/.installed` builds it")
    selectors = (Selector(at=("source", "sink")), Selector(trees=("total",)))
    written = {}
    for implementation in ("compiled", "pure"):
        if implementation == "pure":
            monkeypatch.setenv(compiled.PURE, "1")
        else:
            monkeypatch.delenv(compiled.PURE, raising=False)
        pm = generate(AppMap.loads(APP), ClusterMap.loads(ONE_NODE), Placement(), "kary:2", name="same")
        pm = dataclasses.replace(pm, instrument=Instrument(keep=8, collectors=selectors)).validate()
        server = closing(NodeServer(pm, "A"))
        assert server.services["eventspace"].implementation == implementation
        t0, t1, t2 = (Context(server, f"T{i}", {}) for i in range(3))
        t0.path("rows").move((7, b"payload"))
        t0.path("rows").move((-(2 ** 40), b"xy" * 100))
        t1.path("rows").observe()
        t1.path("rows").observe(1)
        t1.path("rows").observe()
        with pytest.raises(Timeout):
            t1.path("rows").observe(timeout=0)
        for i in range(12):                       # past keep=8: the rings wrap and discard
            t0.path("samples").move((i, 2 ** 63 + i))
        t2.path("samples").observe(11)
        t2.path("samples").first(), t2.path("samples").last()
        server.services["eventspace"].set(False, [e.id for e in Catalogue(pm) if e.thread == "T2"])
        t2.path("samples").observe(11)            # switched off: forwarded, not recorded
        sums = []
        for _ in range(2):
            members = [threading.Thread(target=lambda i=i: sums.append(
                Context(server, f"T{i}", {}).allreduce(i, "sum", timeout=10))) for i in range(3)]
            for m in members:
                m.start()
            for m in members:
                m.join(10)
        assert sums == [3] * 6
        written[implementation] = {}
        for entry in Catalogue(pm):
            element = server.server.element(entry.trace)
            recs = trace.decode(element.read_range(0, 1 << 40)[1]).copy()
            assert (recs["t_start"] <= recs["t_end"]).all()
            recs["t_start"], recs["t_end"] = 0, 0
            written[implementation][entry.id] = (element.first(), element.last(), trace.encode(recs))
    assert written["compiled"] == written["pure"]
    assert sum(last for _, last, _ in written["pure"].values()) > 40


def test_the_compiled_appender_refuses_what_the_pure_one_refuses(node, implementation):
    from pastset import TemplateMismatch

    server, catalogue = node(Selector(at=("source",), threads=("T0",), elements=("samples",)))
    (entry,) = catalogue
    element = server.server.element(entry.trace)
    append = server.services["eventspace"].appender(entry)
    assert (type(append).__name__ == "RingAppender") == (implementation == "compiled")
    assert append(1, 0, 2, 3, 4, 5, 6, 7) == 0 and append(1, 0, 2, 3, 4, 5, 6, 2 ** 64 - 1) == 1
    for bad in ((2 ** 16, 0, 0, 0, 0, 0, 0, 0), (1, 0, -1, 0, 0, 0, 0, 0), (1, 0, 0, 0, 0, 0, 0, 2 ** 64),
                (1.0, 0, 0, 0, 0, 0, 0, 0), ("1", 0, 0, 0, 0, 0, 0, 0)):
        with pytest.raises(TemplateMismatch) as refused:
            append(*bad)
        assert str(refused.value) == str(element.template._mismatch(bad))
    with pytest.raises(TypeError):
        append(1, 2, 3)
    assert element.last() == 2 and trace.decode(element.read_range(0, 2)[1])["t_end"].tolist() == [7, 2 ** 64 - 1]


@pytest.mark.parametrize("role", ["source", "sink"])
def test_an_append_never_changes_a_cursor_a_reader_holds(node, role):
    """The compiled appender rewrites `_last` and `_first` in place when nobody else holds them: a
    value a reader took before an append must keep its value after it, at every step of a ring
    that wraps (keep 8, 40 appends)."""
    server, catalogue = node(Selector(at=(role,), threads=("T0",), elements=("samples",)), keep=8)
    (entry,) = catalogue
    element = server.server.element(entry.trace)
    append = server.services["eventspace"].appender(entry)
    held = []
    for i in range(40):
        if i % 3 == 0:
            held.append((i, element._last, max(0, i - 8), element._first))
        assert append(1, 0, 2, 3, 4, 5, 6, i) == i
        assert (element._first, element._last) == (max(0, i + 1 - 8), i + 1)
    assert [(i, last, first) for i, last, first, _ in held] == [(i, i, first) for i, _, first, _ in held]
    assert all(first == expected for _, _, expected, first in held)
    assert element.first() == 32 and element.last() == 40
    assert trace.decode(element.latest_records(8))["t_end"].tolist() == list(range(32, 40))



_COMPILED = compiled.collector_module()
_EDGES = [0, 127, 128, 255, 256, 0xFFFF, 0x10000, 2 ** 32 - 1, 2 ** 32, 2 ** 64 - 1,
          -1, -32, -33, -128, -129, -(2 ** 15), -(2 ** 15) - 1, -(2 ** 31), -(2 ** 31) - 1, -(2 ** 63)]
_LENGTHS = [0, 31, 32, 255, 256, 0xFFFF, 0x10000]
_VALUES = {
    "int": st.one_of(st.sampled_from(_EDGES), st.integers(-(2 ** 63), 2 ** 64 - 1), st.booleans()),
    "float": st.one_of(st.floats(allow_nan=False), st.sampled_from(_EDGES), st.floats(allow_nan=False).map(np.float64)),
    "bool": st.booleans(),
    "str": st.one_of(st.text(max_size=40), st.sampled_from(_LENGTHS).map(lambda n: "a" * n),
                     st.sampled_from(_LENGTHS).map(lambda n: "é" * (n // 2))),
    "bytes": st.one_of(st.binary(max_size=40), st.sampled_from(_LENGTHS).map(lambda n: b"x" * n),
                       st.binary(max_size=300).map(bytearray)),
}


def _size_of(fields):
    """What a compiled collector measures a tuple of a typed element with `fields` by."""
    pathmap = types.SimpleNamespace(element=lambda name: types.SimpleNamespace(template=list(fields)))
    return _payload_size(pathmap, "e", _COMPILED)


needs_compiled = pytest.mark.skipif(_COMPILED is None, reason="the compiled collector is not built")


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_compiled_size_of_a_typed_tuple_is_its_msgpack_length(data):
    """A compiled collector measures a typed tuple in C; what it records is what crosses the wire."""
    fields = data.draw(st.lists(st.sampled_from(list(_VALUES)), min_size=1, max_size=20))
    size = _size_of(fields)
    assert type(size) is _COMPILED.TypedSize
    values = tuple(data.draw(_VALUES[f]) for f in fields)
    wire = len(msgpack.packb(list(values), use_bin_type=True))
    assert size(values) == size(list(values)) == Template.typed(*fields).sizer()(values) == wire


@needs_compiled
def test_the_compiled_size_leaves_other_values_and_any_fields_to_the_template_function():
    reference = Template.typed("float", "bytes", "str").sizer()
    size = _size_of(["float", "bytes", "str"])
    odd = (2.5, memoryview(b"abc"), "x")                        # a memoryview: measured by the template
    assert size(odd) == reference(odd) == 1 + 9 + 5 + 2
    with pytest.raises(UnicodeEncodeError):
        size((1.0, b"", "\ud800"))                              # not encodable: as the template says
    with pytest.raises(IndexError):
        size((1.0, b""))                                         # too few values: as the template says
    assert not isinstance(_size_of(["int", "any"]), _COMPILED.TypedSize)   # `any` is encoded to be measured


def _kernel_clocksource() -> str | None:
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            return f.read().strip()
    except OSError:
        return None


@pytest.mark.skipif(compiled.collector_module() is None, reason="the compiled collector is not built")
def test_the_compiled_collectors_clock_is_clock_monotonic_never_going_back():
    clock = compiled.collector_module()
    # 60 ms of readings: the TSC clock calibrates in its first 10 ms and re-anchors every 1 ms.
    start = time.monotonic_ns()
    last, readings, outside = 0, 0, []
    while time.monotonic_ns() - start < 60_000_000:
        before = time.monotonic_ns()
        t = clock.clock_ns()
        after = time.monotonic_ns()
        assert t >= last, "the collectors' clock went back"
        last, readings = t, readings + 1
        if not before - 1000 <= t <= after + 1000:   # within a µs of CLOCK_MONOTONIC
            outside.append((before, t, after))
    assert not outside, f"{len(outside)} of {readings} readings off CLOCK_MONOTONIC, e.g. {outside[:3]}"
    # Where the kernel keeps CLOCK_MONOTONIC on the TSC (x86-64), so do the collectors, once calibrated.
    assert clock.clock_source() == ("tsc" if _kernel_clocksource() == "tsc" and platform.machine() == "x86_64"
                                    else "clock_gettime")
