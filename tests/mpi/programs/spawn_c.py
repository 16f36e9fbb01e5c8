"""Rank 0 spawns a process whose program is given with `python -c` (not a script or module: it runs
unmonitored) and gets one message from it, twice."""

import sys

from mpi4py import MPI

CHILD = "from mpi4py import MPI; p = MPI.Comm.Get_parent(); p.send(7, 0); p.Disconnect()"
for _ in range(2):
    child = MPI.COMM_SELF.Spawn(sys.executable, ["-c", CHILD], maxprocs=1)
    print(child.recv(source=0), flush=True)
    child.Disconnect()
