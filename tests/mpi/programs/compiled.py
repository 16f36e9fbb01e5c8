"""The calls whose collectors run compiled (eventspace/collector_c/, MpiCall), in every form that
path takes and a few it hands to the closure, on 2 ranks; prints the type of comm.Send's
collector and how compiled receives read a Status's count (tests/mpi/test_mpi_collect.py runs it
compiled and pure and compares the records)."""

import sys

import numpy as np
from mpi4py import MPI

from eventspace import compiled as built
from eventspace.mpi.collector import count_in_c, status_offsets
from eventspace.mpi.mpi4py_access import status_getter

comm = MPI.COMM_WORLD
r = comm.Get_rank()
other = 1 - r
ints = np.arange(4, dtype="i4")          # 16 bytes
got = np.empty(4, dtype="i4")
status = MPI.Status()

if r == 0:
    comm.Send(ints, 1, 1)
    comm.Send(b"seven b", 1)              # tag 0 by default
    comm.Ssend(bytearray(8), 1, 2)
    comm.Send(ints, dest=1, tag=3)        # keywords: moved to their places, compiled too
    comm.Send(ints, tag=9, dest=1)
    comm.Send([ints, MPI.INT], 1, 4)      # a buffer spec: the closure
    comm.Rsend(ints[:1], MPI.PROC_NULL, 5)
    comm.Send(ints, 1, 6)
    comm.Isend(ints, 1, 11).Wait()        # nonblocking posts: compiled too, their requests wrapped
    MPI.Request.Waitall([comm.Isend(ints, dest=1, tag=12), comm.Issend(bytearray(8), 1, 13)])
    comm.isend({"a": 1}, 1, 14).wait()     # a pickle-form post (the closure), its wait compiled
    comm.Isend(b"abc", 1, 15).Wait(status)
    MPI.Request.waitall([comm.isend(i, 1, 16) for i in range(2)])   # pickle-form posts, compiled waitall
    MPI.Request.Waitall((comm.Isend(ints, 1, 17),))                  # a tuple: the Python Waitall
    assert comm.Isend(ints, MPI.PROC_NULL, 20).Test()                # done at once: Test's done path
    assert comm.isend(1, MPI.PROC_NULL, 20).test() == (True, None)
    comm.Recv(bytearray(2), 1, 19)                                    # rank 1 tested its Irecv: send it
    comm.Send(ints, 1, 18)
    # the other calls on many requests, compiled too, with a request not ours among them
    assert MPI.Request.Testall([comm.Isend(ints, MPI.PROC_NULL, 40), MPI.REQUEST_NULL])
    assert MPI.Request.testall([comm.isend(1, MPI.PROC_NULL, 40)]) == (True, [None])
    assert MPI.Request.Testany([comm.Isend(ints, MPI.PROC_NULL, 40)]) == (0, True)
    assert MPI.Request.testany([comm.isend(1, MPI.PROC_NULL, 40)]) == (0, True, None)
    assert MPI.Request.Testsome([comm.Isend(ints, MPI.PROC_NULL, 40)]) == [0]
    assert MPI.Request.testsome([comm.isend(1, MPI.PROC_NULL, 40)]) == ([0], [None])
    assert MPI.Request.Waitany([MPI.REQUEST_NULL, comm.Isend(ints, 1, 41)]) == 1
    assert MPI.Request.waitany([comm.isend("x", 1, 42)])[0] == 0
    assert MPI.Request.Waitsome([comm.Isend(b"abc", 1, 43)]) == [0]
    assert MPI.Request.waitsome([comm.isend("y", 1, 44)])[0] == [0]
    comm.Recv(bytearray(2), 1, 46)                                    # rank 1 tested its last three
    for tag in (45, 47, 48):
        comm.Send(ints, 1, tag)
    # pickle-form point-to-point, compiled too: a send's bytes are what mpi4py pickled
    comm.send({"k": [1, 2]}, 1, 50)
    comm.send("by keyword", dest=1, tag=51)
    comm.ssend(None, 1, 52)
    comm.send(b"x" * 100, 1, 53)
    comm.isend([1, 2, 3], 1, 54).wait()
    MPI.Request.Waitall([comm.Isend(ints, 1, 60 + i) for i in range(10)])   # more than fit on C's stack
else:
    comm.Recv(got, 0, 1)
    comm.Recv(bytearray(16))              # ANY_SOURCE, ANY_TAG
    comm.Recv(got, MPI.ANY_SOURCE, 2, status)
    comm.Recv(got, 0, MPI.ANY_TAG)
    comm.Recv(got, source=0, tag=4)
    comm.Recv(got, tag=9)                 # the source left out before a tag given: ANY_SOURCE
    comm.Recv(got, MPI.PROC_NULL, 5)
    comm.Recv(got, 0, 6, None)
    comm.Irecv(got, 0, 11).Wait()
    MPI.Request.Waitall([comm.Irecv(got, source=0, tag=12), comm.Irecv(bytearray(16), MPI.ANY_SOURCE, 13)])
    assert comm.irecv(source=0, tag=14).wait() == {"a": 1}
    comm.Irecv(bytearray(16), MPI.ANY_SOURCE, MPI.ANY_TAG).Wait(status)
    assert (status.Get_source(), status.Get_tag(), status.Get_count()) == (0, 15, 3)
    cancelled = comm.Irecv(got, 0, 99)
    cancelled.Cancel()
    cancelled.Wait()                      # a cancelled request: the Python Wait reads its Status
    assert MPI.Request.waitall([comm.irecv(source=0, tag=16) for _ in range(2)]) == [0, 1]
    statuses = [MPI.Status()]
    MPI.Request.Waitall([comm.Irecv(got, MPI.ANY_SOURCE, 17)], statuses)   # the program's statuses
    assert statuses[0].Get_source() == 0 and statuses[0].Get_count() == 16
    early = comm.Irecv(got, 0, 18)
    assert not early.Test()                # rank 0 sends it only after the go below: not done, EMPTY
    comm.Send(b"go", 0, 19)
    early.Wait()
    assert MPI.Request.Waitany([MPI.REQUEST_NULL, comm.Irecv(got, MPI.ANY_SOURCE, 41)]) == 1
    assert MPI.Request.waitany([comm.irecv(source=0, tag=42)]) == (0, "x")
    statuses = [MPI.Status()]
    assert MPI.Request.Waitsome([comm.Irecv(bytearray(16), 0, MPI.ANY_TAG)], statuses) == [0]
    assert statuses[0].Get_tag() == 43 and statuses[0].Get_count() == 3
    assert MPI.Request.waitsome([comm.irecv(source=MPI.ANY_SOURCE, tag=44)]) == ([0], ["y"])
    late = [comm.Irecv(bytearray(16), 0, tag) for tag in (45, 47, 48)]   # sent after the go below
    assert not MPI.Request.Testall(late[:1])
    assert MPI.Request.Testany(late[1:2]) == (MPI.UNDEFINED, False)
    assert MPI.Request.Testsome(late[2:]) == []
    comm.Send(b"go", 0, 46)
    MPI.Request.Waitall(late)
    assert comm.recv() == {"k": [1, 2]}                  # no argument: ANY_SOURCE, ANY_TAG
    assert comm.recv(source=0, tag=51) == "by keyword"
    assert comm.recv(None, 0, 52, status) is None and status.Get_tag() == 52
    assert comm.recv(source=MPI.ANY_SOURCE, tag=53) == b"x" * 100
    assert comm.irecv().wait() == [1, 2, 3]
    MPI.Request.Waitall([comm.Irecv(bytearray(16), MPI.ANY_SOURCE, 60 + i) for i in range(10)])
try:
    comm.Send(ints, dest=other, tga=3)    # no such parameter: mpi4py's TypeError, nothing sent
    raise AssertionError("a misspelt keyword was taken")
except TypeError:
    pass
try:
    comm.Send(ints, comm.Get_size() + 3, 7)   # no such rank: MPI's error, recorded as failed
except MPI.Exception:
    pass
# Sendrecv, compiled: by position, by keyword, from ANY_SOURCE into the program's Status
comm.Sendrecv(ints, other, 30, got, other, 30)
comm.Sendrecv(sendbuf=b"ab", dest=other, sendtag=31, recvbuf=bytearray(4), source=other, recvtag=31)
comm.Sendrecv(ints[:1], other, 32, got, MPI.ANY_SOURCE, MPI.ANY_TAG, status)
assert status.Get_source() == other and status.Get_count() == 4
# sendrecv, the pickle form, compiled too: by position, by keyword, from ANY_SOURCE into the
# program's Status; the send half's bytes are what mpi4py pickled, the receive half's what came
assert comm.sendrecv({"from": r}, other, 33, None, other, 33) == {"from": other}
assert comm.sendrecv([r] * (r + 1), dest=other, sendtag=34, source=other, recvtag=34) == [other] * (other + 1)
assert comm.sendrecv("z" * (10 + r), other, 35, None, MPI.ANY_SOURCE, MPI.ANY_TAG, status) == "z" * (10 + other)
assert (status.Get_source(), status.Get_tag()) == (other, 35)
assert comm.sendrecv(r, MPI.PROC_NULL, 36, source=MPI.PROC_NULL, recvtag=36) is None
comm.Barrier()
comm.Bcast(ints, 1)
comm.Reduce(ints, got if r == 1 else None, MPI.SUM, 1)
comm.Scatter(np.arange(8, dtype="i4") if r == 0 else None, got[:4], 0)
comm.Gather(ints[:2], np.empty(4, "i4") if r == 0 else None, 0)
comm.Allreduce(ints, got)
comm.Allreduce(ints, got, op=MPI.MAX)    # keywords, in the same round count
comm.Reduce(ints, got if r == 1 else None, root=1)   # op left out before the root given: SUM
comm.Allreduce(MPI.IN_PLACE, got)        # IN_PLACE: the closure
comm.Alltoall(np.arange(2, dtype="i4"), np.empty(2, "i4"))
# pickle forms, compiled too: their bytes are what mpi4py pickled during the call
assert comm.allreduce(r + 1) == 3
assert comm.bcast({"x": 1} if r == 1 else None, root=1) == {"x": 1}
assert comm.reduce(r, op=MPI.MAX, root=1) == (1 if r == 1 else None)
comm.gather(r)
comm.Barrier()
if r == 0:
    many = ("Testall", "testall", "Waitany", "waitany", "Testany", "testany", "Waitsome", "waitsome", "Testsome",
            "testsome")
    module = built.collector_module()
    counts = "MPI_Get_count" if module is not None and count_in_c(module) else "Status.Get_count"
    if counts == "MPI_Get_count" and -1 not in status_offsets(status_getter()):
        counts += ", source and tag from MPI_Status"
    sys.stdout.write(f"collector {type(comm.Send).__name__} {type(comm.Sendrecv).__name__} "
                     f"{type(comm.allreduce).__name__}, "
                     f"pickled {type(comm.send).__name__} {type(comm.recv).__name__} {type(comm.irecv).__name__} "
                     f"{type(comm.sendrecv).__name__}, "
                     f"posts {type(comm.Irecv).__name__}, "
                     f"waits {type(MPI.Request.__dict__['Wait']).__name__} "
                     f"{type(MPI.Request.__dict__['Waitall']).__name__} "
                     f"{' '.join(sorted({type(MPI.Request.__dict__[name]).__name__ for name in many}))}, "
                     f"receives count with {counts}\n")
