"""BinaryElement.appender: the event collectors' append, against `move` on the same element kind,
with the lock (any writers) and without it (`single_writer`: one writer, many readers)."""

import struct
import sys
import threading
import time

import pytest

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
