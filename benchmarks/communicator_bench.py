"""What declaring a communicator costs an MPI run as communicators accumulate (issue 34).

Run: `python benchmarks/communicator_bench.py [--ranks 16 64] [--at 1 50 200]`.

In this process, without MPI: a run of R ranks (one host) whose program makes communicators one
after the other (each a Dup of COMM_WORLD: every rank is a member, the dearest case, as
tests/mpi/programs/communicators.py does in a loop). To time communicator number N, the run
starts with the N before it (COMM_WORLD is number 0), and two of its nodes are real node servers with their event
spaces: r0 and r{R-1}. Each of communicators N, N+1, ... is taken by both through the code every
rank runs for it (`Rank._adopt`, on a Rank made here without MPI), and rank 0's snapshot of the
run's pathmap is written as its snapshot writer writes it (`Registration`, in a run directory of
its own), once per communicator: its dearest case, a writer that is never behind.

Rank 0 declares a communicator by asking every other rank in turn, then itself, to adopt it: its
declare takes about adopt(r0) + (R - 1) x adopt(other), plus R round trips, which this leaves out.
The snapshot is written by a thread of rank 0, off the declare's path (before issue 34's writer,
inside it: the whole pathmap's YAML every time, the "fresh YAML" column, what a write cost then).
The table gives those figures in ms (medians of the declares from each number on) for
communicator number 1, 50, 200 ...
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time

from eventspace.mpi.generate import Communicator, node_name, run_pathmap
from eventspace.mpi.options import Options
from eventspace.mpi.rank import Rank
from eventspace.mpi.registry import Registration
from eventspace.space import NodeSpace
from paths import NodeServer


def rank_without_mpi(rank: int, comms: list[Communicator], pathmap, options: Options) -> Rank:
    """Rank `rank` of a run that has made `comms`, as far as taking a communicator needs: its node
    server and event space on `pathmap` (the run's, for `comms`); MPI is never touched."""
    size = len(pathmap.nodes)
    r = Rank.__new__(Rank)
    r.options, r.rank, r.size, r.name = options, rank, size, pathmap.name
    r.hosts, r.clusters = ["h"] * size, {"h": "default"}
    r.recorder, r._adopt_lock = None, threading.Lock()
    r.comms = list(comms)
    r.node = NodeServer(pathmap, node_name(rank))
    r.space = NodeSpace.of(r.node)
    return r


def dup(cid: int, size: int) -> Communicator:
    return Communicator(cid, tuple(range(size)), "COMM_WORLD" if cid == 0 else "Dup of comm 0")


def measure(size: int, number: int, window: int) -> tuple[float, float, float, float]:
    """(adopt on r0, adopt on another rank, snapshot write, the whole pathmap's YAML) in ms, medians
    over declaring communicators `number` to `number + window - 1` in a run that made the ones before."""
    options = Options(default_name="bench", max_communicators=number + window)
    comms = [dup(c, size) for c in range(number)]
    pathmap = run_pathmap("bench", ["h"] * size, {"h": "default"}, comms, options.instrument, options.keep)
    ranks = [rank_without_mpi(0, comms, pathmap, options), rank_without_mpi(size - 1, comms, pathmap, options)]
    registration = Registration("bench")
    registration.ready(pathmap, comms, {}, {})
    times = []
    try:
        for cid in range(number, number + window):
            wire = [cid, list(dup(cid, size).members), dup(cid, size).how]
            spent = []
            for r in ranks:
                t0 = time.perf_counter()
                r._adopt(list(wire))
                spent.append(time.perf_counter() - t0)
            before = registration.spent
            registration.update(ranks[0].node.pathmap, ranks[0].comms)
            registration.flush()
            spent.append(registration.spent - before)
            t0 = time.perf_counter()
            ranks[0].node.pathmap.dumps(header="snapshot")
            times.append((*spent, time.perf_counter() - t0))
    finally:
        registration.remove()
        for r in ranks:
            r.node.close()
    return tuple(1e3 * statistics.median(t[i] for t in times) for i in range(4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--at", type=int, nargs="+", default=[1, 50, 200], help="communicator numbers to time")
    parser.add_argument("--window", type=int, default=5, help="declares timed from each number on (median)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="communicator-bench-") as runs:
        os.environ["EVENTSPACE_RUN_DIR"] = runs   # the snapshots' own
        print(f"{'ranks':>5} {'comm':>5} {'adopt r0 ms':>12} {'adopt other ms':>15} {'declare est. ms':>16} "
              f"{'snapshot write ms':>18} {'fresh YAML ms':>14}")
        for size in args.ranks:
            for cid in args.at:
                r0, other, snapshot, fresh = measure(size, cid, args.window)
                declare = r0 + (size - 1) * other
                print(f"{size:>5} {cid:>5} {r0:>12.2f} {other:>15.2f} {declare:>16.1f} {snapshot:>18.2f} "
                      f"{fresh:>14.2f}", flush=True)


if __name__ == "__main__":
    main()
