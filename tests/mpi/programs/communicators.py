"""Makes the number of duplicates of COMM_WORLD its command line says, and a barrier on each."""

import sys

from mpi4py import MPI

for _ in range(int(sys.argv[1])):
    MPI.COMM_WORLD.Dup().Barrier()
