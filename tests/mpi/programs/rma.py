"""One-sided calls whose records are known (tests/mpi/test_mpi_rma.py), on 3 ranks, as its first argument says:

ops     window A (Win.Create of 64 doubles on COMM_WORLD, displacement unit 8): fence epochs (Put 32 B
        to the next rank, Get 16 B from the one after, Accumulate 64 B by keyword), a passive epoch
        on rank 0 (shared Lock, Get_accumulate, Fetch_and_op and Compare_and_swap of 8 B, Flush,
        Flush_local, Unlock), one over every rank (Lock_all, Rput, Rget, Raccumulate and
        Rget_accumulate of 16 B completed by Wait and Waitall, Flush_all, Flush_local_all, Sync,
        Unlock_all), a Put to rank 7 (MPI's error, caught), Free. Window B (Win.Allocate of 128 B
        on COMM_WORLD split with its ranks reversed, world rank 2 its rank 0): world rank 2 Posts
        to world rank 1 and Waits, then Posts again and Tests until done; world rank 1 Starts,
        Puts 8 B into it and Completes, twice. Window C (Win.Create_dynamic on COMM_WORLD) and D
        (Win.Allocate_shared of 8 B on COMM_WORLD): made and freed. Window E (Win.Create on
        COMM_SELF, mpi4py's default): not traced. Rank 0 prints what runs a traced Put (`Put MpiCall`),
        rank 2 how many Tests it made (`Tests N`).
fence   ranks 0 and 1 enter a Fence of a window on COMM_WORLD; rank 2 receives from rank 0 (tag 5),
        which never sends: a deadlock.
live    once the file named by the second argument exists, a window of 64 B (Win.Allocate on
        COMM_WORLD) into which rank r Puts r + 1 bytes at the next rank in a fence epoch; then
        `ready`, and the window freed once the file named by the third argument exists.
freed   rank 1 frees a window of COMM_WORLD while its lock on rank 0 is still held (MPI's error,
        caught and printed), then unlocks and frees it; later it Puts on the freed window (MPI's
        error again, printed).
"""

import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

comm = MPI.COMM_WORLD
r = comm.Get_rank()
mode = sys.argv[1]
comm.Barrier()

if mode == "ops":
    memory = np.zeros(64, dtype="f8")
    a = MPI.Win.Create(memory, 8, comm=comm)
    if r == 0:   # what runs its Put: the compiled MpiCall where the collector is built, else the closure
        print(f"Put {type(getattr(a, '__dict__', {}).get('Put')).__name__}", flush=True)
    a.Fence()
    a.Put(np.full(4, r, dtype="f8"), (r + 1) % 3)
    a.Fence()
    a.Get(np.empty(2, dtype="f8"), (r + 2) % 3, 8)
    a.Fence()
    a.Accumulate(np.ones(8, dtype="f8"), target_rank=(r + 1) % 3, target=16, op=MPI.SUM)
    a.Fence(MPI.MODE_NOSUCCEED)
    a.Lock(0, MPI.LOCK_SHARED)
    a.Get_accumulate(np.ones(1, dtype="f8"), np.empty(1, dtype="f8"), 0, 30)
    a.Fetch_and_op(np.ones(1, dtype="f8"), np.empty(1, dtype="f8"), 0, 31)
    a.Compare_and_swap(np.zeros(1, dtype="i8"), np.zeros(1, dtype="i8"), np.empty(1, dtype="i8"), 0, 32)
    a.Flush(0)
    a.Flush_local(0)
    a.Unlock(0)
    comm.Barrier()
    a.Lock_all()
    a.Rput(np.ones(2, dtype="f8"), (r + 1) % 3, 40 + 2 * r).Wait()
    requests = [a.Rget(np.empty(2, dtype="f8"), (r + 2) % 3, 50),
                a.Raccumulate(np.ones(2, dtype="f8"), (r + 1) % 3, 52),
                a.Rget_accumulate(np.ones(2, dtype="f8"), np.empty(2, dtype="f8"), (r + 1) % 3, 54)]
    MPI.Request.Waitall(requests)
    a.Flush_all()
    a.Flush_local_all()
    a.Sync()
    a.Unlock_all()
    try:
        a.Put(np.ones(1, dtype="f8"), 7)
    except MPI.Exception:
        pass
    comm.Barrier()
    a.Free()

    reversed_ = comm.Split(0, -r)   # world rank 2 is its rank 0, world rank 0 its rank 2
    b = MPI.Win.Allocate(128, 1, comm=reversed_)
    group = reversed_.Get_group()
    if r == 2:
        to_one = group.Incl([1])   # world rank 1
        b.Post(to_one)
        b.Wait()
        b.Post(to_one)
        tests = 1
        while not b.Test():
            tests += 1
        print(f"Tests {tests}", flush=True)
    elif r == 1:
        to_two = group.Incl([0])   # world rank 2
        for _ in range(2):
            b.Start(to_two)
            b.Put(np.ones(8, dtype="u1"), 0)
            b.Complete()
    b.Free()
    MPI.Win.Create_dynamic(comm=comm).Free()
    MPI.Win.Allocate_shared(8, comm=comm).Free()
    MPI.Win.Create(np.zeros(4, dtype="f8")).Free()   # COMM_SELF: not traced

elif mode == "fence":
    w = MPI.Win.Allocate(64, comm=comm)
    w.Fence()   # round 1: every rank
    if r == 2:
        comm.recv(source=0, tag=5)
    else:
        w.Fence()

elif mode == "live":
    if r == 0:
        until(lambda: os.path.exists(sys.argv[2]), 300, f"{sys.argv[2]} to exist")
    comm.Barrier()
    w = MPI.Win.Allocate(64, comm=comm)
    w.Fence()
    w.Put(np.ones(r + 1, dtype="u1"), (r + 1) % 3)
    w.Fence()
    if r == 0:
        print("ready", flush=True)
        until(lambda: os.path.exists(sys.argv[3]), 300, f"{sys.argv[3]} to exist")
    comm.Barrier()
    w.Free()

elif mode == "freed":
    w = MPI.Win.Allocate(64, 8, comm=comm)
    # Freeing a window under a lock is erroneous: MPICH refuses the Free and keeps the window; Open
    # MPI's refusal leaves the window unusable, so there only the Put on a freed window is tried.
    if r == 1 and "Open MPI" not in MPI.Get_library_version():
        w.Lock(0)
        w.Put(np.ones(2, dtype="f8"), 0)
        try:
            w.Free()
        except MPI.Exception as exc:
            print(f"Free: {MPI.Get_error_string(exc.Get_error_code()).splitlines()[0]}", flush=True)
        w.Unlock(0)
    w.Free()
    if r == 1:
        try:
            w.Put(np.ones(2, dtype="f8"), 0)
        except MPI.Exception as exc:
            print(f"Put: {MPI.Get_error_string(exc.Get_error_code()).splitlines()[0]}", flush=True)
