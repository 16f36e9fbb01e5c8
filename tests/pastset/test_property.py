"""Random operation sequences give the same results, and the same errors, on a local and a remote element."""

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pastset import Limits, PastSetError, TupleServer, connect

TEMPLATES = {"typed": ["int", "str", "any"], "binary": "=hIq"}

small_index = st.integers(-2, 40)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
                    st.floats(allow_nan=False), st.text(max_size=4), st.binary(max_size=4))
typed_values = st.one_of(
    st.tuples(st.integers(-(2 ** 64), 2 ** 65), st.text(max_size=6), scalars),   # mostly valid
    st.lists(scalars, max_size=4),                                                # mostly not
    scalars,
)
binary_values = st.one_of(
    st.tuples(st.integers(-(2 ** 15), 2 ** 15 - 1), st.integers(0, 2 ** 32 - 1),
              st.integers(-(2 ** 63), 2 ** 63 - 1)),                              # valid
    st.tuples(st.integers(-(2 ** 16), 2 ** 16), st.integers(-1, 2 ** 33), scalars),
    st.lists(scalars, max_size=4),
    scalars,
)


def operations(values):
    return st.lists(st.one_of(
        st.tuples(st.just("move"), values),
        st.tuples(st.just("observe")),
        st.tuples(st.just("observe_at"), small_index),
        st.tuples(st.just("first")),
        st.tuples(st.just("last")),
        st.tuples(st.just("axe"), small_index),
        st.tuples(st.just("read_range"), small_index, small_index),
        st.tuples(st.just("latest"), st.integers(-1, 12)),
        st.tuples(st.just("delta"), st.one_of(st.none(), st.integers(-1, 8))),
    ), max_size=40)


bounds = st.one_of(st.none(), st.integers(1, 8))


def apply(element, op):
    """One operation's outcome as comparable data: its result, or the name of the error it raised."""
    name, *args = op
    try:
        if name == "move":
            return element.move(args[0], timeout=0)
        if name == "observe":
            return element.observe(timeout=0)
        if name == "observe_at":
            return element.observe(args[0], timeout=0)
        if name == "delta":
            return element.delta(args[0])
        return getattr(element, name)(*args)
    except PastSetError as exc:
        return type(exc).__name__


_unique = itertools.count()


def enter(space, name, kind, keep, delta):
    """(the element, None), or (None, the name of the error) if the space refuses to enter it."""
    try:
        return space.enter(name, TEMPLATES[kind], keep=keep, delta=delta), None
    except PastSetError as exc:
        return None, type(exc).__name__


def check_same(local_space, remote_space, kind, keep, delta, ops):
    name = f"property/{kind}/{next(_unique)}"
    local, local_refusal = enter(local_space, name, kind, keep, delta)
    remote, remote_refusal = enter(remote_space, name, kind, keep, delta)
    try:
        # Bad bounds: both sides refuse them alike; good ones, both accept. Each side is asked once.
        assert local_refusal == remote_refusal, (f"enter(keep={keep}, delta={delta}): local "
                                                 f"{local_refusal or 'accepted'}, remote {remote_refusal or 'accepted'}")
        if local is None:
            return
        for step, op in enumerate(ops):
            expected, got = apply(local, op), apply(remote, op)
            assert got == expected, f"step {step} {op!r}: local {expected!r}, remote {got!r}"
        assert local.read_range(0, 100) == remote.read_range(0, 100)
    finally:
        if remote is not None:
            remote_space.delete(name)


def test_an_enter_only_one_side_refuses_is_a_difference():
    """The comparison itself: a remote that refuses an element the local space accepts fails it."""
    strict = TupleServer("strict", Limits(max_name=8))   # refuses the comparison's longer names
    try:
        with connect(strict.serve("tcp://127.0.0.1:0")) as remote:
            with pytest.raises(AssertionError, match="local accepted, remote LimitExceeded"):
                check_same(TupleServer("lenient"), remote, "typed", None, None, [("last",)])
    finally:
        strict.close()


@pytest.fixture(scope="module")
def local_space():
    return TupleServer("property")


common = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@common
@given(keep=bounds, delta=bounds, ops=operations(typed_values))
def test_typed_element_behaves_the_same_local_and_remote(local_space, client, keep, delta, ops):
    check_same(local_space, client, "typed", keep, delta, ops)


@common
@given(keep=bounds, delta=bounds, ops=operations(binary_values))
def test_binary_element_behaves_the_same_local_and_remote(local_space, client, keep, delta, ops):
    check_same(local_space, client, "binary", keep, delta, ops)
