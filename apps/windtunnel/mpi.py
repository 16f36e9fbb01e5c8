"""The wind tunnel on mpi4py: each rank steps its slice of the same kernel and trades border rows with Sendrecv.

    mpiexec -n 8 python -m apps.windtunnel.mpi --size small --steps 100 --json
    eventspace mpirun -n 8 -m apps.windtunnel.mpi --size small --steps 100 --json   # monitored

Rank i holds slice i of `count` (apps.windtunnel.lattice.Slice, as PATHS thread i would): every
step it collides, sends its top row to rank i-1 and its bottom row to rank i+1 (periodic), and
streams; every `--check-every` steps an allreduce checks that the particle count is conserved.
The grid's SHA-256 (from the ranks' row digests, gathered to rank 0) equals a PATHS run's and
the single-process reference's for the same size, steps and seed.
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
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object, nothing else")
    return parser.parse_args(argv)


def simulate(comm, n: int, steps: int, seed: int, check_every: int) -> dict:
    """Run this rank's slice; rank 0 gets the summary (others None)."""
    rank, count = comm.Get_rank(), comm.Get_size()
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
    if rank != 0:
        return None
    blocks = [sum((b[1][i].tolist() for b in gathered), []) for i in range(3)]
    return {"substrate": "mpi", "n": n, "steps": steps, "ranks": count, "particles": particles,
            "wall_seconds": wall, "steps_per_second": steps / wall if wall else 0.0,
            "exchanges": 2 * 2 * steps * count,
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
    summary = simulate(comm, n, args.steps, args.seed, args.check_every)
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
    print("\n".join(picture))
    return 0


if __name__ == "__main__":
    sys.exit(main())
