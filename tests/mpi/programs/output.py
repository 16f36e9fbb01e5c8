"""Deterministic output from rank 0 (tests compare it with a plain mpiexec run)."""

import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
data = np.arange(100, dtype="i8") * (r + 1)
total = np.empty_like(data)
comm.Allreduce(data, total)
pieces = comm.gather({"rank": r, "sum": int(data.sum()), "argv": sys.argv[1:]}, root=0)
ring = comm.sendrecv(r * 10, dest=(r + 1) % n, source=(r - 1) % n)
rings = comm.gather(ring, root=0)
if r == 0:
    print("argv", sys.argv, "name", __name__)
    print("total", int(total.sum()))
    for piece in pieces:
        print(piece)
    print("ring", rings)
    print("to stderr", file=sys.stderr)
