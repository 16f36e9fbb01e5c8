"""Every call the collectors wrap, once, on 2 ranks, with its result checked (tests/mpi/test_collect.py)."""

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
other = 1 - r
ints = np.arange(4, dtype="i4")          # 16 bytes
got = np.empty(4, dtype="i4")

# Send modes, blocking and not; matched probes; completion calls of every kind.
if r == 0:
    comm.Ssend(ints, 1, 1)
    ready = comm.Irecv(got, 1, 2)      # posted before rank 1's ready send starts
    comm.Barrier()
    ready.Wait()
else:
    comm.Recv(got, 0, 1)
    comm.Barrier()
    comm.Rsend(ints, 0, 2)
buf = MPI.Alloc_mem(1 << 16)
MPI.Attach_buffer(buf)
comm.Bsend(ints, other, 3)
comm.Recv(got, other, 3)
comm.bsend({"b": r}, other, 4)
assert comm.recv(source=other, tag=4) == {"b": other}
MPI.Detach_buffer()
MPI.Free_mem(buf)
if r == 0:
    comm.ssend(r, 1, 5)
else:
    assert comm.recv(None, 0, 5) == 0
request = comm.Issend(ints, other, 6)
message = comm.Mprobe(other, 6)
message.Recv(got)
request.Wait()
request = comm.issend(["m", r], other, 7)
message = comm.mprobe(source=other, tag=7)
assert message.recv() == ["m", other]
request.wait()
requests = [comm.Isend(ints, other, 8), comm.Irecv(got, other, 8)]
while not MPI.Request.Testall(requests):
    pass
requests = [comm.isend(r, other, 9), comm.irecv(source=other, tag=9)]
done, values = MPI.Request.testall(requests)
while not done:
    done, values = MPI.Request.testall(requests)
assert values[1] == other
requests = [comm.Irecv(got, other, 10), comm.Isend(ints, other, 10)]
finished = set()
while len(finished) < 2:
    finished.add(MPI.Request.Waitany(requests))
requests = [comm.irecv(source=other, tag=11), comm.isend(r, other, 11)]
assert MPI.Request.waitany(requests)[1] in (other, None)
MPI.Request.waitall(requests)
requests = [comm.Irecv(got, other, 12), comm.Isend(ints, other, 12)]
while MPI.Request.Waitsome(requests):
    pass
request = comm.Irecv(got, other, 13)
comm.Send(ints, other, 13)
while not request.Test():
    pass
request = comm.irecv(source=other, tag=14)
comm.send("t", other, 14)
flag, value = request.test()
while not flag:
    flag, value = request.test()
assert value == "t"
while not comm.Iprobe(other, 15):
    if r == 1:
        comm.Send(ints, 0, 15)
        break
if r == 0:
    comm.Recv(got, 1, 15)
comm.Sendrecv_replace(got, other, 16, other, 16)
assert comm.sendrecv(r, other, 17, source=other, recvtag=17) == other

# A receive cancelled; a send freed before its completion was seen (its receive still happens).
cancelled = comm.Irecv(got, other, 99)
cancelled.Cancel()
cancelled.Wait()
freed = comm.Isend(ints, other, 98)
freed.Free()
comm.Recv(got, other, 98)

# Collectives, buffer and pickle forms.
counts = [1 + i for i in range(n)]
whole = np.zeros(sum(counts), dtype="i4")
comm.Bcast(ints, root=0)
comm.Gather(ints, np.empty(4 * n, "i4") if r == 0 else None, root=0)
comm.Gatherv(np.full(counts[r], r, "i4"), [whole, counts] if r == 0 else None, root=0)
comm.Scatter(np.arange(4 * n, dtype="i4") if r == 0 else None, got, root=0)
comm.Scatterv([np.arange(sum(counts), dtype="i4"), counts] if r == 0 else None, np.empty(counts[r], "i4"), root=0)
comm.Allgather(ints, np.empty(4 * n, "i4"))
comm.Allgatherv(np.full(counts[r], r, "i4"), [whole, counts])
comm.Alltoall(np.arange(n, dtype="i4"), np.empty(n, "i4"))
comm.Alltoallv([np.arange(n, dtype="i4"), [1] * n], [np.empty(n, "i4"), [1] * n])
comm.Alltoallw([np.arange(n, dtype="i4"), [1] * n, [0, 4], [MPI.INT] * n],
               [np.empty(n, "i4"), [1] * n, [0, 4], [MPI.INT] * n])
comm.Reduce(ints, got if r == 0 else None, op=MPI.MAX, root=0)
comm.Allreduce(MPI.IN_PLACE, got)
comm.Reduce_scatter_block(np.arange(2 * n, dtype="i4"), np.empty(2, "i4"))
comm.Reduce_scatter(np.arange(n, dtype="i4"), np.empty(1, "i4"), [1] * n)
comm.Scan(ints, got)
comm.Exscan(ints, got)
comm.barrier()
assert comm.scatter([10 * i for i in range(n)] if r == 0 else None, root=0) == 10 * r
assert comm.allgather(r) == list(range(n))
assert comm.alltoall([r] * n) == [i for i in range(n)]
assert comm.reduce(r, root=1) == (n * (n - 1) // 2 if r == 1 else None)
assert comm.scan(1) == r + 1
assert comm.exscan(1) == (r if r else None)

# Every kind of derived communicator is traced (when the program runs monitored).
traced = type(comm).__module__ == "eventspace.mpi.interpose"
for made in (comm.Clone(), comm.Dup_with_info(MPI.INFO_NULL), comm.Create(comm.Get_group()),
             comm.Split_type(MPI.COMM_TYPE_SHARED), comm.Create_group(comm.Get_group()),
             comm.Create_cart([n], periods=[True])):
    assert not traced or type(made).__module__ == "eventspace.mpi.interpose", type(made)
    made.Barrier()
cart = comm.Create_cart([n])
sub = cart.Sub([True])
assert cart.Shift(0, 1) is not None and sub.Get_size() == n
sub.Barrier()
