"""Makes the number of communicators its first argument says, one after the other (Dups and Splits
of COMM_WORLD, an allreduce on each), then rank 0 makes the file named second, and every rank waits
until the file named third exists (rank 0 tells the others)."""

import os
import sys
from pathlib import Path

from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

count, made, done = int(sys.argv[1]), sys.argv[2], sys.argv[3]
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
for i in range(count):
    new = comm.Dup() if i % 2 == 0 else comm.Split(0, size - rank)
    new.allreduce(1)
if rank == 0:
    Path(made).touch()
until(lambda: comm.bcast(os.path.exists(done) if rank == 0 else None, root=0), 300, f"{done} to exist")
