"""A ring of Sendrecv as fast as the ranks go, until the run is ended from outside (a signal, a rank
killed) or, once the file named by the first argument exists, by rank 1: `raise` raises, `abort` calls
MPI_Abort(3), `end` ends the loop and the program. Rank 0 creates the file named by the second
argument once it has made 20,000 steps (the run has records on disk by then)."""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

go, running, mode = sys.argv[1], sys.argv[2], sys.argv[3]
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
buf, got = np.zeros(8), np.empty(8)
steps, began = 0, time.monotonic()
while True:
    comm.Sendrecv(buf, (r + 1) % n, 3, got, (r - 1) % n, 3)
    steps += 1
    if steps % 1000:
        continue
    if r == 0 and steps == 20_000:
        open(running, "w").close()
    if comm.bcast(os.path.exists(go) if r == 0 else None, root=0):
        if r == 1 and mode == "raise":
            raise RuntimeError(f"rank 1 gives up after {steps} steps")
        if r == 1 and mode == "abort":
            comm.Abort(3)
        if mode == "end":
            break
    if time.monotonic() - began > 300:
        break
comm.Barrier()
