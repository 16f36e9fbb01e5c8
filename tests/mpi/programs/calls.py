"""A program whose MPI calls are known exactly (tests/mpi/test_collect.py counts them), on 3 ranks."""

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD            # bound at import time, as programs do
r, n = comm.Get_rank(), comm.Get_size()
right, left = (r + 1) % n, (r - 1) % n
obj = {"payload": list(range(10))}
buf = np.arange(16, dtype="f8")  # 128 bytes

# Blocking point-to-point, both forms; receives from ANY_SOURCE / ANY_TAG.
if r == 0:
    comm.send(obj, dest=1, tag=5)
    comm.Send(buf, 2, 6)
elif r == 1:
    assert comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG) == obj
elif r == 2:
    got = np.empty(16)
    comm.Recv(got, MPI.ANY_SOURCE, 6)
    assert (got == buf).all()

# Nonblocking ring, buffer form, completed together.
got = np.empty(8)
MPI.Request.Waitall([comm.Isend(buf[:8], right, 7), comm.Irecv(got, left, 7)])
assert (got == buf[:8]).all()

# Nonblocking ring, pickle form, completed one by one.
request = comm.isend(r, right, 8)
assert comm.irecv(source=left, tag=8).wait() == left
request.wait()

# Send-receive.
got4 = np.empty(4)
comm.Sendrecv(buf[:4], right, 9, got4, left, 9)

# A probe, then the receive.
if r == 0:
    comm.send("hi", 1, 11)
elif r == 1:
    status = MPI.Status()
    comm.probe(0, 11, status)
    assert comm.recv(source=0, tag=11) == "hi"

# Collectives on COMM_WORLD: rounds 0..4.
assert comm.bcast(obj if r == 1 else None, root=1) == obj
assert comm.allreduce(r) == n * (n - 1) // 2
comm.Barrier()
out = np.empty(16)
comm.Allreduce(buf, out, op=MPI.SUM)
gathered = comm.gather(r, root=2)

# Derived communicators: {0, 2} (world rank 2 first) and {1}, then a duplicate of COMM_WORLD.
sub = comm.Split(r % 2, key=-r)
assert sub.allreduce(1) == sub.Get_size()
sub.Barrier()
if sub.Get_size() > 1:
    sub.send(sub.Get_rank(), dest=1 - sub.Get_rank(), tag=3)
    sub.recv(source=MPI.ANY_SOURCE, tag=3)
dup = comm.Dup()
assert dup.bcast("x" if r == 0 else None, root=0) == "x"
dup.Free()
sub.Free()
