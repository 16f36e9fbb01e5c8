"""Many producer and consumer threads on one element (and, remote, one shared client): nothing lost, nothing twice."""

import threading

import pytest

STOP = (-1, -1)


def run(element, producers: int, per_producer: int, consumers: int) -> list[list[tuple]]:
    """Producers move (producer, seq) tuples while consumers observe; returns what each consumer saw.

    Each consumer stops at a STOP tuple, moved once per consumer after every producer finished.
    """
    seen: list[list[tuple]] = [[] for _ in range(consumers)]
    failures: list[BaseException] = []

    def produce(pid):
        try:
            for seq in range(per_producer):
                element.move((pid, seq))
        except BaseException as exc:
            failures.append(exc)

    def consume(mine):
        try:
            while True:
                item = element.observe(timeout=60)
                if item == STOP:
                    return
                mine.append(item)
        except BaseException as exc:
            failures.append(exc)

    consuming = [threading.Thread(target=consume, args=(seen[i],)) for i in range(consumers)]
    producing = [threading.Thread(target=produce, args=(pid,)) for pid in range(producers)]
    for t in consuming + producing:
        t.start()
    for t in producing:
        t.join(300)
    if not failures:
        for _ in range(consumers):
            element.move(STOP)
    for t in consuming:
        t.join(300)
    assert not any(t.is_alive() for t in consuming + producing), "a thread never finished"
    assert not failures, failures
    return seen


def check(seen: list[list[tuple]], producers: int, per_producer: int) -> None:
    everything = [item for mine in seen for item in mine]
    assert len(everything) == producers * per_producer
    assert set(everything) == {(pid, seq) for pid in range(producers) for seq in range(per_producer)}
    for mine in seen:              # the shared cursor hands tuples out in element order
        last = {}
        for pid, seq in mine:
            assert seq > last.get(pid, -1), f"producer {pid}: {seq} after {last[pid]}"
            last[pid] = seq


@pytest.mark.parametrize("delta", [None, 16])
def test_threads_move_and_observe_each_tuple_exactly_once(space, names, delta):
    element = space.enter(names(), ["int", "int"], delta=delta)
    check(run(element, producers=4, per_producer=500, consumers=3), 4, 500)
    assert element.first() == element.last() == 4 * 500 + 3


@pytest.mark.slow
def test_eight_threads_of_ten_thousand_moves_with_concurrent_observers(space, names):
    element = space.enter(names(), ["int", "int"], delta=1_000)
    check(run(element, producers=8, per_producer=10_000, consumers=4), 8, 10_000)


def test_concurrent_readers_by_index_see_what_was_moved(space, names):
    """Readers by index move nothing, so each sees every tuple while a consumer drains them all."""
    element = space.enter(names(), ["int"])
    n = 300
    failures = []

    def read_all():
        try:
            for i in range(n):
                value = element.observe(i, timeout=60)
                assert value == (i,), value
        except BaseException as exc:
            failures.append(exc)

    readers = [threading.Thread(target=read_all) for _ in range(3)]
    for t in readers:
        t.start()
    for i in range(n):
        element.move((i,))
    for t in readers:
        t.join(120)
    assert not failures, failures
    assert [element.observe(timeout=10) for _ in range(n)] == [(i,) for i in range(n)]
