"""Ranks that block, as its first argument says, after a Barrier (each rank has a record):

p2p         ranks 0 and 1 each receive from the other first (recv, the pickle form): a deadlock;
p2p-buffer  the same with buffer receives (Recv; both run compiled where the collector is built);
p2p-request the same with posted receives completed by Wait (compiled too);
collective  ranks 0 and 1 enter an Allreduce, rank 2 receives from rank 0 (tag 5): a deadlock;
late        ranks 0 and 1 enter an Allreduce that rank 2 joins once the file named by the second
            argument exists: no deadlock, only a late rank;
first       rank 0's first MPI call is a receive from rank 1 with tag 99, which rank 1 sends once the
            file named by the second argument exists (no Barrier before: rank 0 has no record yet).
"""

import os
import sys
from pathlib import Path

from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

comm = MPI.COMM_WORLD
r = comm.Get_rank()
mode = sys.argv[1]
if mode == "first":
    if r == 0:
        comm.recv(source=1, tag=99)
    elif r == 1:
        until(lambda: os.path.exists(sys.argv[2]), 300, f"{sys.argv[2]} to exist")
        comm.send("late", dest=0, tag=99)
    sys.stdout.write(f"{r} done\n")
    sys.exit(0)
comm.Barrier()
if mode == "p2p":
    comm.recv(source=1 - r, tag=0)
elif mode == "p2p-buffer":
    comm.Recv(bytearray(8), 1 - r, 0)
elif mode == "p2p-request":
    comm.Irecv(bytearray(8), 1 - r, 0).Wait()
elif mode == "collective":
    if r == 2:
        comm.recv(source=0, tag=5)
    else:
        comm.allreduce(r)
elif mode == "late":
    if r == 2:
        until(lambda: os.path.exists(sys.argv[2]), 300, f"{sys.argv[2]} to exist")
    comm.allreduce(r)
sys.stdout.write(f"{r} done\n")   # one write (print writes the line, then its end, and ranks share stdout)
