"""Known traffic (3 ranks), sent once the file named by the first argument exists (if one is named):
r0 -> r1 three 1000-byte Sends; r1 -> r2 one 64 KiB Ssend; r2 -> r0 five 8-byte Isends; r1 -> r0
one pickled dict (send); a ring of 16-byte Sendrecvs. Rank 0 prints, as JSON, the bytes and
messages each rank sent to each (as counted by the program itself), then every rank waits for the
file named by the second argument (if one is named)."""

import json
import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402


comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
if len(sys.argv) > 1:
    until(lambda: os.path.exists(sys.argv[1]), 300, f"{sys.argv[1]} to exist")
sent = np.zeros((n, n, 2), np.int64)   # [to, ...][bytes, messages] of this rank


def count(to, nbytes):
    sent[r, to] += (nbytes, 1)


if r == 0:
    for _ in range(3):
        comm.Send(np.zeros(1000, np.uint8), 1, 1)
        count(1, 1000)
    for _ in range(5):
        comm.Recv(np.empty(1, np.float64), 2, 2)
    comm.recv(source=1, tag=4)
elif r == 1:
    for _ in range(3):
        comm.Recv(np.empty(1000, np.uint8), 0, 1)
    comm.Ssend(np.zeros(64 * 1024, np.uint8), 2, 3)
    count(2, 64 * 1024)
    obj = {"answer": 42, "list": list(range(10))}
    comm.send(obj, 0, tag=4)
    count(0, len(MPI.pickle.dumps(obj)))
elif r == 2:
    comm.Recv(np.empty(64 * 1024, np.uint8), 1, 3)
    MPI.Request.Waitall([comm.Isend(np.ones(1, np.float64), 0, 2) for _ in range(5)])
    for _ in range(5):
        count(0, 8)
got = np.empty(2, np.float64)
comm.Sendrecv(np.ones(2, np.float64), (r + 1) % n, 5, got, (r - 1) % n, 5)
count((r + 1) % n, 16)
total = comm.reduce(sent, root=0)
if r == 0:
    print(json.dumps({"bytes": total[:, :, 0].tolist(), "messages": total[:, :, 1].tolist()}), flush=True)
if len(sys.argv) > 2:
    until(lambda: os.path.exists(sys.argv[2]), 300, f"{sys.argv[2]} to exist")
