"""Known calls at the very end of a run: once the file named by the first argument exists, the ranks
make a communicator (a Dup: monitors attached before it must follow the run as it grows), rank 0
sends COUNT 1-byte messages to rank 1 on it, every rank makes ROUNDS allreduces on COMM_WORLD, then
one Gather, and the program ends at once (what the monitors must still read). COUNT and ROUNDS are
the next arguments."""

import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

go, count, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
comm = MPI.COMM_WORLD
until(lambda: os.path.exists(go), 300, f"{go} to exist")
comm.Barrier()
pair = comm.Dup()
one = np.zeros(1, np.uint8)
if pair.Get_rank() == 0:
    for _ in range(count):
        pair.Send(one, 1, 0)
elif pair.Get_rank() == 1:
    for _ in range(count):
        pair.Recv(one, 0, 0)
for _ in range(rounds):
    comm.allreduce(1)
comm.gather(comm.Get_rank(), root=0)
