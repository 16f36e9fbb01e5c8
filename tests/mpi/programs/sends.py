"""A tight loop of small sends: rank 0 sends COUNT 1-byte messages to rank 1."""

import sys

import numpy as np
from mpi4py import MPI

count = int(sys.argv[1])
comm = MPI.COMM_WORLD
one = np.zeros(1, np.uint8)
if comm.Get_rank() == 0:
    for _ in range(count):
        comm.Send(one, 1, 0)
elif comm.Get_rank() == 1:
    for _ in range(count):
        comm.Recv(one, 0, 0)
