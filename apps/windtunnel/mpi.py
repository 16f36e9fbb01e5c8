"""The wind tunnel on mpi4py: each rank steps its slice of the same kernel and trades border rows with Sendrecv.

    mpiexec -n 8 python -m apps.windtunnel.mpi --size small --steps 100 --json
    eventspace mpirun -n 8 -m apps.windtunnel.mpi --size small --steps 100 --json   # monitored
    eventspace mpirun -n 4 -m apps.windtunnel.mpi --delay 1:0.005                     # rank 1 slowed down

Rank i holds slice i of `count` (apps.windtunnel.lattice.Slice, as PATHS thread i would): every
step it collides, sends its top row to rank i-1 and its bottom row to rank i+1 (periodic), and
streams; every `--check-every` steps an allreduce checks that the particle count is conserved.
The grid's SHA-256 (from the ranks' row digests, gathered to rank 0) equals a PATHS run's and
the single-process reference's for the same size, steps and seed. `--delay RANK:SECONDS[:EVERY]`
slows one rank down: it sleeps before its border exchange every EVERY-th step (the grid is the
same; its neighbours wait for its rows, and everyone for it at the allreduce: wait states to see).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from mpi4py import MPI

from .lattice import SIZES, Slice, digests_sha256, row_digests
from .picture import column_blocks, picture_from_blocks
from .program import PICTURE_WIDTH, ConservationError, size_n


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m apps.windtunnel.mpi",
                                     description="the wind tunnel (FHP lattice gas), one slice per MPI rank")
    parser.add_argument("--size", default="small",
                        help=f"{', '.join(f'{k} (N={v})' for k, v in SIZES.items())}, or a number of rows N "
                             "(default %(default)s)")
    parser.add_argument("--steps", type=int, default=100, help="time steps (default %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="the initial state's seed (default %(default)s)")
    parser.add_argument("--check-every", type=int, default=10,
                        help="allreduce the particle count every K steps (default %(default)s)")
    parser.add_argument("--delay", metavar="RANK:SECONDS[:EVERY]", type=delay_of,
                        help="slow one rank down: RANK sleeps SECONDS before its border exchange every EVERY-th "
                             "step (default every step), e.g. 1:0.005")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object, nothing else")
    return parser.parse_args(argv)


def delay_of(text: str) -> tuple[int, float, int]:
    """(rank, seconds, every) from `RANK:SECONDS[:EVERY]` (RANK may be written rK); ValueError saying what to write."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        rank = int(parts[0][1:] if parts[0].startswith("r") else parts[0])
        seconds, every = float(parts[1]), int(parts[2]) if len(parts) == 3 else 1
        if rank < 0 or not 0 <= seconds <= 3600 or every < 1:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write RANK:SECONDS[:EVERY], e.g. 1:0.005 (rank 1 sleeps 5 ms "
                                         "every step) or r2:0.1:10") from None
    return rank, seconds, every


def simulate(comm, n: int, steps: int, seed: int, check_every: int, delay=None) -> dict:
    """Run this rank's slice; rank 0 gets the summary (others None). `delay`: (rank, seconds, every),
    that rank sleeps before its border exchange every `every`-th step."""
    rank, count = comm.Get_rank(), comm.Get_size()
    late, seconds, every = delay if delay and delay[0] == rank else (None, 0.0, 1)
    delayed = 0.0
    band = Slice(n, rank, count, seed)
    above, below = (rank - 1) % count, (rank + 1) % count
    from_above = np.empty(8 * 2 * n, np.uint8)
    from_below = np.empty(8 * 2 * n, np.uint8)
    initial = comm.allreduce(band.particles())
    comm.Barrier()
    started = time.perf_counter()
    for step in range(steps):
        band.collide(step)
        top, bottom = band.border_rows()
        if late is not None and step % every == 0:
            time.sleep(seconds)
            delayed += seconds
        # My top row is the row below the rank above; my bottom row, the row above the rank below.
        comm.Sendrecv(top, dest=above, sendtag=0, recvbuf=from_below, source=below, recvtag=0)
        comm.Sendrecv(bottom, dest=below, sendtag=1, recvbuf=from_above, source=above, recvtag=1)
        band.stream(step, from_above, from_below)
        if (step + 1) % check_every == 0 or step + 1 == steps:
            total = comm.allreduce(band.particles())
            if total != initial:
                raise ConservationError(f"step {step}: {total} particles, but the run began with {initial}")
    wall = time.perf_counter() - started
    state = band.state
    gathered = comm.gather((row_digests(state), column_blocks(state[0], PICTURE_WIDTH)), root=0)
    particles = comm.reduce(band.particles(), root=0)
    delayed = comm.reduce(delayed, root=0)
    if rank != 0:
        return None
    blocks = [sum((b[1][i].tolist() for b in gathered), []) for i in range(3)]
    return {"substrate": "mpi", "n": n, "steps": steps, "ranks": count, "particles": particles,
            "wall_seconds": wall, "steps_per_second": steps / wall if wall else 0.0,
            "exchanges": 2 * 2 * steps * count, "delayed_seconds": delayed,
            "grid_sha256": digests_sha256(b"".join(b[0] for b in gathered)),
            "picture": picture_from_blocks(*blocks, height=min(16, n))}


def main(argv=None) -> int:
    args = parse(argv)
    comm = MPI.COMM_WORLD
    n = size_n(args.size)
    if n < 4 or n % 2 or n < comm.Get_size():
        if comm.Get_rank() == 0:
            print(f"size N={n}: N must be even, at least 4 and at least the rank count ({comm.Get_size()})",
                  file=sys.stderr)
        return 2
    if args.delay and args.delay[0] >= comm.Get_size():
        if comm.Get_rank() == 0:
            print(f"--delay: there is no rank {args.delay[0]} among {comm.Get_size()}", file=sys.stderr)
        return 2
    summary = simulate(comm, n, args.steps, args.seed, args.check_every, args.delay)
    if summary is None:
        return 0
    picture = summary.pop("picture")
    if args.json:
        print(json.dumps(summary))
        return 0
    ranks = summary["ranks"]
    print(f"wind tunnel on {ranks} MPI rank{'s' if ranks != 1 else ''}: 8 matrices of {n} x {2 * n}, {summary['steps']} steps "
          f"in {summary['wall_seconds']:.2f} s ({summary['steps_per_second']:.1f} steps/s)")
    print(f"particles {summary['particles']:,} (conserved); grid sha256 {summary['grid_sha256']}")
    if args.delay:
        print(f"rank {args.delay[0]} was slowed down by {summary['delayed_seconds']:.2f} s")
    print("\n".join(picture))
    return 0


if __name__ == "__main__":
    sys.exit(main())
