"""Blocking and wake-up: observe, flow-controlled move and Linda-free waits, with threads, local and remote.

Remote callers here share one client across threads, as applications do: a thread blocked in
`observe` must never hold up another thread's calls on the same client.
"""

import pytest

from harness import blocked_on
from polling import until
from pastset import BadArgument, Timeout, UnknownElement


def test_observe_blocks_until_a_move(space, names, background):
    e = space.enter(names(), ["int"])
    waiter = background(e.observe)
    until(lambda: blocked_on(space, names()) == 1, what="the observer blocked in the element")
    assert waiter.running
    assert e.move((7,)) == 0
    assert waiter.wait() == (7,)
    assert e.first() == 1


def test_observe_of_an_index_blocks_until_it_is_written(space, names, background):
    e = space.enter(names(), ["int"])
    e.move((0,))
    waiter = background(e.observe, 2)
    e.move((1,))
    until(lambda: blocked_on(space, names()) == 1, what="the observer of index 2 blocked in the element")
    assert waiter.running
    e.move((2,))
    assert waiter.wait() == (2,)
    assert e.first() == 0


def test_every_blocked_observer_gets_its_own_tuple(space, names, background):
    e = space.enter(names(), ["int"])
    waiters = [background(e.observe, timeout=30) for _ in range(4)]
    until(lambda: blocked_on(space, names()) == 4, what="the 4 observers blocked in the element")
    for i in range(4):
        e.move((i,))
    assert sorted(w.wait() for w in waiters) == [(0,), (1,), (2,), (3,)]


def test_observe_times_out(space, names):
    e = space.enter(names(), ["int"])
    with pytest.raises(Timeout, match=names()):
        e.observe(timeout=0.2)
    e.move((1,))
    with pytest.raises(Timeout):
        e.observe(5, timeout=0.2)
    assert e.observe(timeout=0.2) == (1,)


def test_timeout_zero_tries_once(space, names):
    e = space.enter(names(), ["int"])
    with pytest.raises(Timeout):
        e.observe(timeout=0)
    e.move((1,))
    assert e.observe(0, timeout=0) == (1,)
    assert e.observe(timeout=0) == (1,)


@pytest.mark.parametrize("timeout", [-1, "soon", True])
def test_a_bad_timeout_is_refused_even_when_no_wait_is_needed(space, names, timeout):
    e = space.enter(names(), ["int"])
    e.move((1,))
    for op in (lambda: e.observe(timeout=timeout), lambda: e.observe(0, timeout=timeout),
               lambda: e.move((2,), timeout=timeout)):
        with pytest.raises(BadArgument, match="timeout"):
            op()
    assert e.last() == 1 and e.first() == 0


def test_move_blocks_under_delta_until_a_tuple_is_consumed(space, names, background):
    e = space.enter(names(), ["int"], delta=2)
    e.move((0,))
    e.move((1,))
    mover = background(e.move, (2,))
    until(lambda: blocked_on(space, names()) == 1, what="the mover blocked in the full element")
    assert mover.running and e.last() == 2
    assert e.observe() == (0,)
    assert mover.wait() == 2
    assert e.read_range(0, 10) == (1, [(1,), (2,)])


def test_axe_releases_blocked_movers(space, names, background):
    e = space.enter(names(), ["int"], delta=1)
    e.move((0,))
    mover = background(e.move, (1,))
    until(lambda: blocked_on(space, names()) == 1, what="the mover blocked in the full element")
    e.axe(0)
    assert mover.wait() == 1


def test_raising_delta_wakes_blocked_movers(space, names, background):
    e = space.enter(names(), ["int"], delta=1)
    e.move((0,))
    movers = [background(e.move, (i,)) for i in (1, 2)]
    until(lambda: blocked_on(space, names()) == 2, what="both movers blocked in the full element")
    assert all(m.running for m in movers)
    e.delta(3)
    assert sorted(m.wait() for m in movers) == [1, 2]
    assert (e.first(), e.last()) == (0, 3)


def test_move_under_delta_times_out(space, names):
    e = space.enter(names(), ["int"], delta=1)
    e.move((0,))
    with pytest.raises(Timeout, match="move"):
        e.move((1,), timeout=0.2)
    assert e.last() == 1


def test_keep_never_blocks_a_mover(space, names):
    e = space.enter(names(), ["int"], keep=2)
    for i in range(100):
        e.move((i,), timeout=0)
    assert e.latest(5) == (98, [(98,), (99,)])


def test_delete_wakes_blocked_callers_with_unknown_element(space, names, background):
    readers = space.enter(names("r"), ["int"])
    movers = space.enter(names("m"), ["int"], delta=1)
    movers.move((0,))
    blocked = [background(readers.observe), background(readers.observe, 3),
               background(movers.move, (1,))]
    until(lambda: (blocked_on(space, names("r")), blocked_on(space, names("m"))) == (2, 1),
          what="both readers and the mover blocked")
    space.delete(names("r"))
    space.delete(names("m"))
    for call in blocked:
        with pytest.raises(UnknownElement):
            call.wait()


def test_a_blocked_thread_does_not_hold_up_another_threads_calls(space, names, background):
    quiet = space.enter(names("quiet"), ["int"])
    busy = space.enter(names("busy"), ["int"])
    waiter = background(quiet.observe)
    until(lambda: blocked_on(space, names("quiet")) == 1, what="the observer blocked in the quiet element")
    for i in range(50):           # every call answers while the other thread is blocked
        assert busy.move((i,)) == i
        assert busy.observe() == (i,)
    assert waiter.running
    quiet.move((1,))
    assert waiter.wait() == (1,)
