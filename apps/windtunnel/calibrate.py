"""Measure wind-tunnel step costs per N, to choose SIZES: `python -m apps.windtunnel.calibrate`."""

from __future__ import annotations

import argparse
import contextlib
import queue
import threading
import time
from dataclasses import dataclass

from apps.windtunnel.lattice import SIZES, Slice


@dataclass
class Calibration:
    """Seconds per step of one N: the whole domain as one slice, one slice of `threads`
    (stepped alone), all slices stepped in turn by one thread, and all slices each in its own
    thread exchanging border rows through queues, that is the interval between a thread's
    exchanges, with the kernel calls free to interleave and with one lock around each call.
    The threaded figures are a floor under what the PATHS runtime can reach."""

    n: int
    threads: int
    rows_per_slice: int
    whole: float
    one_slice: float
    all_slices_in_turn: float
    all_slices_threaded: float
    all_slices_threaded_locked: float


def _best_of(repeats: int, run) -> float:
    return min(run() for _ in range(repeats))


def _time_steps(slices: list[Slice], steps: int, start: int) -> float:
    """Seconds per lockstep step of `slices`, exchanging border rows in plain Python."""
    count = len(slices)
    began = time.perf_counter()
    for step in range(start, start + steps):
        for s in slices:
            s.collide(step)
        rows = [s.border_rows() for s in slices]
        for i, s in enumerate(slices):
            s.stream(step, rows[i - 1][1], rows[(i + 1) % count][0])
    return (time.perf_counter() - began) / steps


def _time_threaded(slices: list[Slice], steps: int, lock: threading.Lock | None) -> float:
    """Seconds per step with one thread per slice, border rows passed through queues, and
    each kernel call made holding `lock` if there is one (so that numpy's many short GIL
    releases do not hand the GIL round all the threads)."""
    count = len(slices)
    from_above = [queue.SimpleQueue() for _ in range(count)]
    from_below = [queue.SimpleQueue() for _ in range(count)]
    start = threading.Barrier(count + 1)
    guard = lock if lock is not None else contextlib.nullcontext()

    def work(i: int) -> None:
        s = slices[i]
        start.wait()
        for step in range(steps):
            with guard:
                s.collide(step)
                top, bottom = s.border_rows()
            from_below[(i - 1) % count].put(top)
            from_above[(i + 1) % count].put(bottom)
            above, below = from_above[i].get(), from_below[i].get()
            with guard:
                s.stream(step, above, below)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return (time.perf_counter() - began) / steps


def calibrate(n: int, threads: int = 140, budget: float = 1.0) -> Calibration:
    """Measure one N; `budget` is roughly the seconds spent per measurement."""
    whole = Slice(n, 0, 1, seed=1)
    once = _time_steps([whole], 1, 0)
    whole_time = _best_of(3, lambda: _time_steps([whole], max(1, int(budget / once / 3)), 1))
    one = Slice(n, threads // 2, threads, seed=1)
    once = _time_steps([one], 10, 0)
    one_time = _best_of(3, lambda: _time_steps([one], max(10, int(budget / once / 3)), 10))
    slices = [Slice(n, i, threads, seed=1) for i in range(threads)]
    once = _time_steps(slices, 1, 0)
    steps = max(2, int(budget / once / 3))
    turn_time = _best_of(3, lambda: _time_steps(slices, steps, 1))
    del slices

    def threaded(lock: threading.Lock | None) -> float:
        return _time_threaded([Slice(n, i, threads, seed=1) for i in range(threads)], steps, lock)

    free = _best_of(2, lambda: threaded(None))
    locked = _best_of(2, lambda: threaded(threading.Lock()))
    first, stop = one.rows
    return Calibration(n, threads, stop - first, whole_time, one_time, turn_time, free, locked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sizes", nargs="*", type=int, help="N values (default: SIZES)")
    parser.add_argument("--threads", type=int, default=140)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per measurement")
    args = parser.parse_args()
    print(f"{'N':>6} {'rows/slice':>10} {'whole ms':>9} {'slice us':>9} "
          f"{'in turn ms':>10} {'threaded ms':>11} {'locked ms':>9}")
    for n in args.sizes or sorted(SIZES.values()):
        c = calibrate(n, args.threads, args.budget)
        print(f"{c.n:>6} {c.rows_per_slice:>10} {c.whole * 1e3:>9.2f} {c.one_slice * 1e6:>9.1f} "
              f"{c.all_slices_in_turn * 1e3:>10.2f} {c.all_slices_threaded * 1e3:>11.2f} "
              f"{c.all_slices_threaded_locked * 1e3:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
