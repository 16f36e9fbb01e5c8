"""Traffic on an intercommunicator whose calls are known exactly (tests/mpi/test_mpi_spawn.py counts
them), on 4 ranks: COMM_WORLD split into its even and its odd ranks, joined by Create_intercomm.
Remote ranks name the other group's members: even local rank i and odd local rank i are partners."""

import numpy as np
from mpi4py import MPI

world = MPI.COMM_WORLD
r = world.Get_rank()
even = r % 2 == 0
half = world.Split(r % 2, r)
i = half.Get_rank()
inter = half.Create_intercomm(0, world, 1 if even else 0, tag=7)
assert inter.Is_inter() and inter.Get_remote_size() == 2

# Point-to-point across the groups: buffer form one way, pickle form back.
if even:
    inter.Send(np.zeros(100 * (i + 1), np.uint8), dest=i, tag=3)
    assert inter.recv(source=i, tag=4) == {"from": r + 1}
else:
    buf = np.empty(100 * (i + 1), np.uint8)
    inter.Recv(buf, source=MPI.ANY_SOURCE, tag=3)
    inter.send({"from": r}, dest=i, tag=4)

# Collectives across the groups: a Bcast from the even group's rank 0, an Allreduce, a Barrier.
data = np.arange(125, dtype="f8")   # 1000 bytes
if even:
    inter.Bcast(data, root=MPI.ROOT if i == 0 else MPI.PROC_NULL)
else:
    inter.Bcast(data, root=0)
total = np.empty(1)
inter.Allreduce(np.array([float(r)]), total)
assert total[0] == (4.0 if even else 2.0)   # the remote group's sum: 1 + 3, or 0 + 2
inter.Barrier()

# Merged again: an intracommunicator, the even group first.
merged = inter.Merge(high=not even)
assert merged.allreduce(1) == 4
