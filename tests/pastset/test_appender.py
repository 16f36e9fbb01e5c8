"""BinaryElement.appender: the event collectors' append, against `move` on the same element kind."""

import pytest

from pastset import TemplateMismatch, TupleServer


@pytest.mark.parametrize("fmt, values", [("=HHIIIIQQ", (1, 0, 7, 3, 42, 64, 10, 11)),
                                         ("=2I4sd", (1, 2, b"abcd", 1.5)), ("=Q", (5,))])
def test_an_append_is_a_move_of_one_record(fmt, values):
    server = TupleServer("appender")
    appended, moved = server.enter("a", fmt, keep=3), server.enter("m", fmt, keep=3)
    append = appended.appender()
    for i in range(5):
        assert append(*values) == moved.move(values) == i
    assert appended.latest(5) == moved.latest(5) == (2, moved.read_range(0, 5)[1])
    assert (appended.first(), appended.last()) == (2, 5)


def test_values_that_do_not_fit_raise_template_mismatch_and_append_nothing():
    element = TupleServer("appender").enter("a", "=IQ", keep=3)
    append = element.appender()
    with pytest.raises(TemplateMismatch, match="field 0"):
        append("x", 1)
    assert element.last() == 0


def test_a_parked_observer_is_woken_by_an_append():
    import threading
    import time

    element = TupleServer("appender").enter("a", "=I", keep=3)
    append = element.appender()
    got = []
    reader = threading.Thread(target=lambda: got.append(element.observe(0, timeout=10)))
    reader.start()
    deadline = time.monotonic() + 10
    while not element._sleepers and time.monotonic() < deadline:  # the reader waits: append must wake it
        time.sleep(0.001)
    append(7)
    reader.join(10)
    assert got == [(7,)]
