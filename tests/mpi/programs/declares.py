"""Waits until the file named on its command line exists (rank 0 tells the others, as live.py does),
then makes a duplicate of COMM_WORLD and calls a barrier and an allreduce on it: the run declares
that one communicator while it goes on."""

import os
import sys
from pathlib import Path

from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

comm = MPI.COMM_WORLD
# Every rank looks as often as the others: each look is a bcast.
until(lambda: comm.bcast(os.path.exists(sys.argv[1]) if comm.Get_rank() == 0 else None, root=0), 300,
      f"{sys.argv[1]} to exist")
dup = comm.Dup()
dup.Barrier()
total = dup.allreduce(comm.Get_rank())
sys.stdout.write(f"{comm.Get_rank()} total {total}\n")
