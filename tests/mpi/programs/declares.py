"""Waits until the file named on its command line exists (rank 0 tells the others, as live.py does),
then makes a duplicate of COMM_WORLD and calls a barrier and an allreduce on it: the run declares
that one communicator while it goes on."""

import os
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
while not comm.bcast(os.path.exists(sys.argv[1]) if comm.Get_rank() == 0 else None, root=0):
    time.sleep(0.01)
dup = comm.Dup()
dup.Barrier()
total = dup.allreduce(comm.Get_rank())
sys.stdout.write(f"{comm.Get_rank()} total {total}\n")
