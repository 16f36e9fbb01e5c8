"""Rounds of a nonblocking collective on 3 ranks: 5 Iallreduce rounds, each posted then waited for;
then a sixth (round 5) that rank 2 posts only once the file named by the first argument exists,
while ranks 0 and 1 wait for theirs."""

import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

comm = MPI.COMM_WORLD
r = comm.Get_rank()
buf, out = np.full(8, float(r)), np.empty(8)
for _ in range(5):
    comm.Iallreduce(buf, out).Wait()
if r == 2:
    until(lambda: os.path.exists(sys.argv[1]), 300, f"{sys.argv[1]} to exist")
comm.Iallreduce(buf, out).Wait()
assert out[0] == 3
sys.stdout.write(f"{r} done\n")   # one write (print writes the line, then its end, and ranks share stdout)
