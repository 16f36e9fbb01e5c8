"""Messages whose receives name their source, or ask for any source or any tag (3 ranks):

rank 1 sends "a" (tag 5), then "bb" (tag 6) to rank 0; rank 2 sends "ccc" (tag 5), then with
Isend b"dddd" (tag 9) to rank 0. Rank 0 receives tag 6 from rank 1 first, then twice tag 5 from
any source, then with Irecv whatever comes from any source with any tag. Then every rank sends
its rank number round a ring with Sendrecv (tag 3), twice.
"""

from mpi4py import MPI

comm = MPI.COMM_WORLD
r = comm.Get_rank()
if r == 1:
    comm.send("a", 0, tag=5)
    comm.send("bb", 0, tag=6)
elif r == 2:
    comm.send("ccc", 0, tag=5)
    comm.isend(b"dddd", 0, tag=9).wait()
elif r == 0:
    got = [comm.recv(source=1, tag=6)]
    got += sorted(comm.recv(source=MPI.ANY_SOURCE, tag=5) for _ in range(2))
    got.append(comm.irecv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG).wait())
    print(got, flush=True)
n = comm.Get_size()
for _ in range(2):
    comm.sendrecv(r, (r + 1) % n, 3, source=(r - 1) % n, recvtag=3)
