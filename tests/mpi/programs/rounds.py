"""Rounds of collectives with known late ranks: 30 allreduce rounds on COMM_WORLD in which rank 1
enters 10 ms after the others, except round 20, which rank 2 enters 200 ms late; then a Barrier
(round 30) that rank 2 enters only once the file named by the first argument exists."""

import os
import sys
import time
from pathlib import Path

from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

comm = MPI.COMM_WORLD
r = comm.Get_rank()
for i in range(30):
    if i == 20:
        if r == 2:
            time.sleep(0.2)
    elif r == 1:
        time.sleep(0.01)
    comm.allreduce(i)
if r == 2:
    until(lambda: os.path.exists(sys.argv[1]), 300, f"{sys.argv[1]} to exist")
comm.Barrier()
sys.stdout.write(f"{r} done\n")   # one write (print writes the line, then its end, and ranks share stdout)
