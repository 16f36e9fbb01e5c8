"""Runs until the file named on its command line exists: a ring of Sendrecv, and a bcast of the
stop decision. With a second argument, rank 1 then blocks in a Recv from rank 0, tag 7, until
rank 0 sees that file too (tests read its in-flight mark)."""

import os
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
stop = sys.argv[1]
buf, got = np.zeros(8), np.empty(8)
steps = 0
while not comm.bcast(os.path.exists(stop) if r == 0 else None, root=0):
    comm.Sendrecv(buf, (r + 1) % n, 3, got, (r - 1) % n, 3)
    steps += 1
    time.sleep(0.002)   # the program's pace
if len(sys.argv) > 2:
    release = sys.argv[2]
    if r == 0:
        until(lambda: os.path.exists(release), 300, f"{release} to exist")
        comm.send("go", 1, tag=7)
    elif r == 1:
        comm.recv(source=0, tag=7)
sys.stdout.write(f"{r} steps {steps}\n")   # one write (print writes the line, then its end, and ranks share stdout)
