"""BinaryElement.appender: the event collectors' append, against `move` on the same element kind,
with the lock (any writers) and without it (`single_writer`: one writer, many readers); the ring
appender contract it hands C code (pastset/ring_c/pastset_ring.h), and the C append against the
Python reference (ring.py's `_APPEND`)."""

import ctypes
import json
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pastset
from pastset import Expired, TemplateMismatch, TupleServer
from pastset.element import WOULD_BLOCK
from polling import until

WRITERS = pytest.mark.parametrize("single_writer", [False, True], ids=["locked", "single-writer"])


@WRITERS
@pytest.mark.parametrize("fmt, values", [("=HHIIIIQQ", (1, 0, 7, 3, 42, 64, 10, 11)),
                                         ("=2I4sd", (1, 2, b"abcd", 1.5)), ("=Q", (5,))])
def test_an_append_is_a_move_of_one_record(fmt, values, single_writer):
    server = TupleServer("appender")
    appended, moved = server.enter("a", fmt, keep=3), server.enter("m", fmt, keep=3)
    append = appended.appender(single_writer)
    for i in range(5):
        assert append(*values) == moved.move(values) == i
    assert appended.latest(5) == moved.latest(5) == (2, moved.read_range(0, 5)[1])
    assert (appended.first(), appended.last()) == (2, 5)


@WRITERS
def test_values_that_do_not_fit_raise_template_mismatch_and_append_nothing(single_writer):
    element = TupleServer("appender").enter("a", "=IQ", keep=3)
    append = element.appender(single_writer)
    with pytest.raises(TemplateMismatch, match="field 0"):
        append("x", 1)
    assert element.last() == 0


@pytest.mark.parametrize("how", ["move", "locked", "single-writer"])
def test_a_record_that_fails_half_packed_leaves_a_full_ring_intact(how):
    # struct packs field by field into the ring: the slot written must not hold a kept record.
    element = TupleServer("appender").enter("a", "=III", keep=2)
    element.move((1, 1, 1))
    element.move((2, 2, 2))
    put = element.move if how == "move" else (lambda v: element.appender(how == "single-writer")(*v))
    with pytest.raises(TemplateMismatch):
        put((3, 3, "x"))
    assert element.latest(2) == (0, struct.pack("=6I", 1, 1, 1, 2, 2, 2))


@WRITERS
def test_a_parked_observer_is_woken_by_an_append(single_writer):
    element = TupleServer("appender").enter("a", "=I", keep=3)
    append = element.appender(single_writer)
    got = []
    reader = threading.Thread(target=lambda: got.append(element.observe(0, timeout=10)))
    reader.start()
    until(lambda: element._sleepers, 10, "the reader blocked: the append must wake it")
    append(7)
    reader.join(10)
    assert got == [(7,)]


@pytest.fixture
def busy_switching():
    """Threads switch every microsecond, so that a reader is interrupted between reading an
    element's bounds and copying its records as often as it can be."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_single_writer_wakes_a_waiter_whose_check_it_ran_just_after(where):
    # Ping-pong: the writer appends a record only once the waiter has found it missing, and the
    # waiter dawdles between that check and its wait (GIL released), which is where the append
    # lands. A waiter that counted itself only after the check would miss it and time out.
    server = TupleServer("appender")
    element = server.enter("a", "=Q", keep=1000)
    rounds = 100 if where == "local" else 50
    missing = threading.Semaphore(0)
    peek = element._peek

    def peek_and_dawdle(index):
        found = peek(index)
        if found is WOULD_BLOCK:
            missing.release()
            time.sleep(0.002)   # widens the window between a miss and the wait, where a wake-up is lost
        return found

    element._peek = peek_and_dawdle
    if where == "remote":
        client = pastset.connect(server.serve("tcp://127.0.0.1:0"))
        reader = client.element("a")
    else:
        reader = element
    append, failed = element.appender(True), []

    def wait_for_each():
        try:
            for i in range(rounds):
                assert reader.observe(i, timeout=5) == (i,)
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            failed.append(exc)

    waiter = threading.Thread(target=wait_for_each)
    waiter.start()
    try:
        for i in range(rounds):
            while not missing.acquire(timeout=0.1):
                assert waiter.is_alive(), failed
            append(i)
        waiter.join(20)
    finally:
        if where == "remote":
            client.close()
        server.close()
    assert not failed, failed
    assert not waiter.is_alive()


def test_readers_never_see_a_record_a_single_writer_overwrote_under_them(busy_switching):
    # Each record holds its own index twice: a reader that got an overwritten slot would see
    # another index than the one it asked for.
    element = TupleServer("appender").enter("a", "=QQ", keep=4)
    append, stop, wrong = element.appender(True), threading.Event(), []

    def check(start, data):
        for k, (a, b) in enumerate(struct.iter_unpack("=QQ", data)):
            if not a == b == start + k:
                wrong.append((start + k, a, b))

    def read():
        while not stop.is_set():
            check(*element.latest(4))
            last = element.last()
            check(*element.read_range(max(0, last - 4), last))
            try:
                i = max(0, last - 2)
                got = element.observe(i, timeout=1)
                check(i, struct.pack("=QQ", *got))
            except Expired:
                pass

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    try:
        for i in range(200_000):
            append(i, i)
    finally:
        stop.set()
        for r in readers:
            r.join(10)
    assert not wrong, wrong[:5]


# -- the ring appender contract (pastset/ring_c/pastset_ring.h) and its Python reference ----------

def compiled_ring():
    from pastset import ring

    if ring.Appender is None:
        pytest.fail("pastset's ring appender (pastset._ring) is not built: `make .venv/.installed` builds it",
                    pytrace=False)
    return ring


class PastsetCursors(ctypes.Structure):
    """struct PastsetCursors of pastset_ring.h, version 2: the element's head."""

    _fields_ = [("refcnt", ctypes.c_ssize_t), ("type", ctypes.c_void_p), ("first", ctypes.c_ssize_t),
                ("last", ctypes.c_ssize_t), ("sleepers", ctypes.c_void_p), ("parked", ctypes.c_void_p)]


class PastsetRing(ctypes.Structure):
    """struct PastsetRing of pastset_ring.h, version 2, as a C consumer sees it."""

    _fields_ = [("version", ctypes.c_uint), ("ring", ctypes.c_void_p), ("record_size", ctypes.c_ssize_t),
                ("cap", ctypes.c_ssize_t), ("keep", ctypes.c_ssize_t), ("single_writer", ctypes.c_int),
                ("cursors", ctypes.c_void_p), ("append", ctypes.c_void_p), ("refuse", ctypes.c_void_p)]


APPEND_FN = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.POINTER(PastsetRing), ctypes.c_char_p,
                              ctypes.POINTER(ctypes.c_ssize_t))


def contract_of(append) -> PastsetRing:
    capsule = ctypes.py_object(append.contract)
    ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
    ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
    ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
    ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    name = ctypes.pythonapi.PyCapsule_GetName(capsule)
    assert name == b"pastset._ring.contract"
    return PastsetRing.from_address(ctypes.pythonapi.PyCapsule_GetPointer(capsule, name)), capsule


@WRITERS
def test_an_appender_hands_c_code_the_ring_and_the_append_that_pastset_ring_h_describes(single_writer):
    compiled_ring()
    element = TupleServer("appender").enter("a", "=QQ", keep=3)
    append = element.appender(single_writer)
    ring, _capsule = contract_of(append)
    ring_address = ctypes.addressof((ctypes.c_char * len(element._ring)).from_buffer(element._ring))
    assert (ring.version, ring.record_size, ring.cap, ring.keep, ring.single_writer) == (2, 16, 4, 3, single_writer)
    assert ring.ring == ring_address and ring.cursors == id(element)
    c_append, index = APPEND_FN(ring.append), ctypes.c_ssize_t()
    for i in range(5):   # C and Python appends, one ring, one pair of cursors
        if i % 2:
            assert append(i, i) == i
        else:
            assert c_append(ctypes.byref(ring), struct.pack("=QQ", i, i), ctypes.byref(index)) == 0
            assert index.value == i
    assert (element.first(), element.last()) == (2, 5)
    assert element.latest(5) == (2, struct.pack("=6Q", 2, 2, 3, 3, 4, 4))
    cursors = PastsetCursors.from_address(ring.cursors)   # the cursors C reads: machine ints, as Python's
    assert (cursors.first, cursors.last, cursors.sleepers, cursors.parked) == (2, 5, id(0), id(0))
    element._first, element._last = 3, 5   # set from Python: C sees it
    assert (cursors.first, cursors.last) == (3, 5)


def test_moves_own_append_is_not_handed_out():
    compiled_ring()
    element = TupleServer("appender").enter("a", "=Q", keep=3)
    with pytest.raises(ValueError, match="no contract"):
        element._put.contract   # it runs under a mutex its caller holds: no one else may use it


FORMATS = st.sampled_from(["=HHIIIIQQ", "=2I4sd", "=Q", "=b?"])
ODD = st.one_of(st.integers(-(2 ** 65), 2 ** 65), st.floats(allow_nan=False), st.binary(max_size=5), st.none(),
                st.booleans(), st.text(max_size=2))


@settings(max_examples=150, deadline=None)
@given(fmt=FORMATS, keep=st.integers(1, 4), last=st.integers(-10, 10), rows=st.lists(st.lists(ODD, max_size=9),
                                                                                     min_size=1, max_size=8),
       how=st.sampled_from(["move", "locked", "single-writer"]))
def test_the_compiled_append_does_what_the_python_reference_does(fmt, keep, last, rows, how):
    """pastset's C append (what moves and appenders run) against ring.py's `_APPEND`: on the same
    cursors, any values: the same index or the same exception, the same ring and cursors."""
    ring = compiled_ring()
    sides = {}
    for side in ("compiled", "reference"):
        element = TupleServer("appender").enter("a", fmt, keep=keep)
        element._last, element._first = last, max(0, last - keep)
        if how == "move":
            if side == "reference":   # move's own append (under the mutex it holds), as Python writes it
                element._put = ring._appender_maker(len(element.template.fields), ring._HELD)(
                    element, None, element._pack_into, element._ring, element._cap, element._size, keep)
            put = element.move
        else:
            make = element.appender if side == "compiled" else element.reference_appender
            append = make(how == "single-writer")
            put = lambda values, append=append: append(*values)   # noqa: E731
        outcomes = []
        for values in rows:
            try:
                outcomes.append(("ok", put(values)))
            except TypeError as exc:   # not as many values as fields: Python's words and C's differ
                outcomes.append((TypeError, "positional argument" if "positional argument" in str(exc) else str(exc)))
            except Exception as exc:  # noqa: BLE001 - compared below
                outcomes.append((type(exc), str(exc)))
        sides[side] = outcomes, bytes(element._ring), element._first, element._last
    assert sides["compiled"] == sides["reference"]


def test_without_the_c_part_elements_append_with_the_python_reference():
    """pastset's C part is optional: where it is not built, every append runs the Python reference,
    to the same records, and the compiled collector (which appends through the contract) stands aside."""
    script = textwrap.dedent("""\
        import json, sys
        if sys.argv[1] == "without":
            sys.modules["pastset._ring"] = None   # as if it was not built
        from pastset import TupleServer, ring
        from eventspace import compiled
        element = TupleServer("appender").enter("a", "=QQ", keep=3)
        element.move((1, 1))
        element.appender()(2, 2)
        element.appender(True)(3, 3)
        element.appender(True)(4, 4)
        print(json.dumps([ring.Appender is None, compiled._built is None, element.first(), element.last(),
                          element.latest(3)[1].hex()]))
    """)
    got = {}
    for how in ("with", "without"):
        done = subprocess.run([sys.executable, "-c", script, how], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        got[how] = json.loads(done.stdout)
    assert got["without"][:2] == [True, True] and got["with"][:2] == [False, False]
    assert got["without"][2:] == got["with"][2:] == [1, 4, struct.pack("=6Q", 2, 2, 3, 3, 4, 4).hex()]


@pytest.mark.parametrize("value, error", [("3", TypeError), (2.0, TypeError), (None, TypeError),
                                          (2 ** 62 + 1, OverflowError), (-(2 ** 63), OverflowError),
                                          (2 ** 70, OverflowError)])
def test_a_cursor_set_to_what_no_ring_counts_is_refused_as_it_is_set(value, error):
    """The cursors are machine ints that C appends read without checking: what is no index, or
    beyond the +-2^62 records a ring counts, is refused when set, and the cursor keeps its value
    (an int's __index__, a numpy integer's, is taken)."""
    import numpy as np

    compiled_ring()
    element = TupleServer("appender").enter("a", "=Q", keep=3)
    for i in range(4):
        element.move((i,))
    for name in ("_first", "_last"):
        held = getattr(element, name)
        with pytest.raises(error, match=f"{name}|integer|index"):
            setattr(element, name, value)
        assert getattr(element, name) == held
    with pytest.raises(AttributeError, match="cannot be deleted"):
        del element._last
    element._first, element._last = np.uint8(2), np.int64(4)
    assert (type(element._first), element._first, element._last) == (int, 2, 4)
    assert element.appender(True)(9) == 4 and element.observe(4, timeout=0) == (9,)


def test_a_slab_reads_every_elements_cursors_in_one_call_as_python_reads_them():
    """pastset._ring.cursors, what a slab's read of every element's newest record starts with: each
    element's _last and _first, and one error for buffers or elements it cannot read."""
    import numpy as np

    ring = compiled_ring()
    server = TupleServer("appender")
    elements = [server.enter(f"e{i}", "=Q", keep=3) for i in range(5)]
    for i, element in enumerate(elements):
        for j in range(2 * i):
            element.move((j,))
    lasts, firsts = np.empty(5, np.int64), np.empty(5, np.int64)
    ring.cursors(elements, lasts, firsts)
    assert (lasts.tolist(), firsts.tolist()) == ([e._last for e in elements], [e._first for e in elements])
    assert lasts.tolist() == [0, 2, 4, 6, 8] and firsts.tolist() == [0, 0, 1, 3, 5]
    for bad, error in (((elements, np.empty(4, np.int64), firsts), ValueError),
                       ((elements, np.empty(5, np.float64), firsts), ValueError),
                       ((elements, bytes(40), firsts), BufferError),
                       (([*elements[:4], object()], lasts, firsts), TypeError)):
        with pytest.raises(error):
            ring.cursors(*bad)
