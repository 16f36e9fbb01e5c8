"""Nonblocking and persistent calls whose records are known exactly, on 3 ranks
(tests/mpi/test_mpi_nonblocking.py counts them): collectives posted and completed, persistent
requests started again and again, matched probes, Sendrecv_replace, Idup, and untraced calls."""

import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
right, left = (r + 1) % n, (r - 1) % n
buf = np.arange(16, dtype="f8") + r      # 128 bytes
out, again = np.empty(16), np.empty(16)

# Nonblocking collectives on COMM_WORLD: rounds 0..12 in call order, a blocking one (3) among them.
comm.Ibarrier().Wait()                                                    # 0
shared = buf.copy() if r == 1 else np.empty(16)
comm.Ibcast(shared, root=1).Wait()                                        # 1: 128 bytes at r1
assert shared[0] == 1
pending = comm.Iallreduce(buf, out)                                       # 2: posted ...
comm.Allreduce(buf, again)                                                # 3: ... a blocking one meanwhile
pending.Wait()
assert (out == again).all()
gathered = np.empty(16 * n) if r == 2 else None
comm.Igather(buf, gathered, root=2).Wait()                                # 4: 128 bytes each
piece = np.empty(16)
comm.Iscatter(np.arange(16.0 * n) if r == 0 else None, piece, root=0).Wait()   # 5: 384 bytes at r0
assert piece[0] == 16 * r
everyone = np.empty(16 * n)
comm.Iallgather(buf, everyone).Wait()                                     # 6: 128
assert everyone[16 * left] == left
exchanged = np.empty(4 * n)
comm.Ialltoall(np.full(4 * n, float(r)), exchanged).Wait()                # 7: 96
varied = np.empty(2 * n)
comm.Ialltoallv([np.full(2 * n, float(r)), [2] * n], [varied, [2] * n]).Wait()   # 8: 48
assert varied[2 * left] == left
comm.Ireduce(buf, out if r == 0 else None, root=0).Wait()                 # 9: 128 each
block = np.empty(4)
comm.Ireduce_scatter_block(np.ones(4 * n), block).Wait()                  # 10: 96
assert block[0] == n
scanned, before = np.empty(16), np.empty(16)
MPI.Request.Waitall([comm.Iscan(buf, scanned), comm.Iexscan(buf, before)])   # 11, 12: 128 each

# Persistent collectives: each Start is a round (13, 14, 15, then 16).
total = np.empty(16)
summing = comm.Allreduce_init(buf, total)
for _ in range(3):
    summing.Start()
    summing.Wait()
    assert total[0] == n * (n - 1) // 2
told = buf.copy() if r == 0 else np.empty(16)
telling = comm.Bcast_init(told, root=0)
telling.Start()
MPI.Request.Waitall([telling])
assert told[1] == 1
summing.Free()
telling.Free()

# Persistent point-to-point: a ring started three times together, and a pair started one by one.
sent, came = np.full(8, float(r)), np.empty(8)                             # 64 bytes
send = comm.Send_init(sent, right, tag=21)
receive = comm.Recv_init(came, MPI.ANY_SOURCE, 21)
for _ in range(3):
    MPI.Prequest.Startall([send, receive])
    MPI.Request.Waitall([send, receive])
    assert came[0] == left
synchronous = comm.Ssend_init(sent[:2], right, 22)                       # 16 bytes
paired = comm.Recv_init(came[:2], left, 22)
paired.Start()
synchronous.Start()
synchronous.Wait()
paired.Wait()
# Buffered and ready modes: a Bsend_init through an attached buffer, an Rsend_init once its receive is posted.
MPI.Attach_buffer(bytearray(1 << 12))
buffered, buffered_in = comm.Bsend_init(sent[:1], right, 23), comm.Recv_init(came[:1], left, 23)   # 8 bytes
ready, ready_in = comm.Rsend_init(sent[:1], right, 24), comm.Recv_init(came[1:2], left, 24)
ready_in.Start()
comm.Sendrecv(np.empty(0), left, 25, np.empty(0), right, 25)   # my right neighbour has posted its receive
MPI.Prequest.Startall([buffered, buffered_in, ready])
MPI.Request.Waitall([buffered, buffered_in, ready, ready_in])
assert came[0] == came[1] == left
MPI.Detach_buffer()
for request in (send, receive, synchronous, paired, buffered, buffered_in, ready, ready_in):
    request.Free()

# Sendrecv_replace; matched probes, by the communicator and by MPI.Message's class methods.
replaced = np.full(4, float(r))                                           # 32 bytes
comm.Sendrecv_replace(replaced, right, 31, left, 31)
assert replaced[0] == left
if r == 0:
    comm.Send(np.zeros(5), 1, 41)                                         # 40 bytes
    comm.Send(np.zeros(6), 1, 42)                                         # 48 bytes
    comm.send("matched", 1, 43)
elif r == 1:
    first = np.empty(5)
    comm.Mprobe(0, 41).Recv(first)
    second = np.empty(6)
    MPI.Message.Probe(comm, 0, 42).Irecv(second).Wait()
    comm.Probe(0, 43)                   # the message is there: the Improbe below finds it
    assert comm.improbe(0, 43).recv() == "matched"

# Idup: the new communicator is traced as Dup's is.
copy, made = comm.Idup()
made.Wait()
copy.Allreduce(buf, again)                                                # its round 0
copy.Free()

# Neighbourhood collectives on a ring (a periodic Cartesian communicator): its rounds 0..4.
ring = comm.Create_cart([n], periods=[True])
around = np.empty(2 * 16)
ring.Neighbor_allgather(buf, around)                                      # 0: 128
assert around[0] == left and around[16] == right
ring.Ineighbor_alltoall(np.full(4, float(r)), np.empty(4)).Wait()         # 1: 32
assert ring.neighbor_allgather(r) == [left, right]                        # 2: pickled
shifting = ring.Neighbor_allgather_init(buf, around)
shifting.Start()                                                          # 3: 128
shifting.Wait()
shifting.Free()
swapped = np.empty(4)
ring.Neighbor_alltoallv([np.full(4, float(r)), [2, 2]], [swapped, [2, 2]])   # 4: 32
assert swapped[0] == left and swapped[2] == right
ring.Free()

# Untraced calls: counted, and named at the end of the run.
comm.Set_name("the world")
comm.Set_name("the world")
keyval = comm.Create_keyval()
comm.Free_keyval(keyval)
sys.stdout.write(f"{r} done\n")
