"""The children of tests/mpi/programs/spawner.py: child i answers parent i; child 1 also receives
parent 0's buffer. With the argument `crash`, child 1 raises instead, once it has started."""

import sys

import numpy as np
from mpi4py import MPI

parent = MPI.Comm.Get_parent()
world = MPI.COMM_WORLD
i = world.Get_rank()
if "crash" in sys.argv[1:] and i == 1:
    raise ZeroDivisionError("child 1 divides by zero")
if i == 1:
    parent.Recv(np.empty(300, np.uint8), source=0, tag=5)
parent.send({"child": i}, dest=i, tag=6)
got = np.empty(100)
parent.Bcast(got, root=0)
assert got[99] == 99
parent.Barrier()
world.Barrier()
parent.Disconnect()
