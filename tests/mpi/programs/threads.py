"""MPI calls from several threads of each rank at once, on 2 ranks: `threads.py MODE ROUNDS GO`.

Each rank waits until file GO exists (a test attaches its monitors first), then runs ROUNDS rounds
in each of its threads. Thread t's messages carry tag 10 + t and sizes that name their thread,
rank and round (`size`), so that a record says which thread made it and what it must hold:

- `pickles`: MPI_THREAD_MULTIPLE, two threads per rank sending pickles at once: rank 0's threads
  ssend then recv, rank 1's recv then ssend (a synchronous send lasts until it is matched, so
  each thread's pickling falls inside the other's calls).
- `mixed`: MPI_THREAD_MULTIPLE, four threads per rank on COMM_WORLD: Send/Recv (buffers), ssend/recv
  (pickles), Isend/Irecv completed by Waitall (buffers), isend/irecv completed by wait (pickles);
  no receive names a Status.
- `receives`: MPI_THREAD_MULTIPLE, four threads per rank: rank 0's Send buffers, rank 1's Recv
  them at once, naming no Status, while a fifth thread of rank 1 computes in Python (a receive
  that has returned from MPI waits for the GIL, while the others' go on).
- `funneled`: MPI_THREAD_FUNNELED (`mpi4py.rc.thread_level`), the main thread alone, both forms.

Each rank says `rank R: done` at its end.
"""

import os
import sys
import threading
from pathlib import Path

import mpi4py

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

MODE, ROUNDS, GO = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def size(rank: int, thread: int, round_: int) -> int:
    """The bytes rank `rank`'s thread `thread` sends in round `round_` (a pickle's payload, or a buffer's)."""
    return 1000 * (thread + 1) + 7 * rank + round_


if MODE == "funneled":
    mpi4py.rc.thread_level = "funneled"

from mpi4py import MPI  # noqa: E402
import numpy as np  # noqa: E402

comm = MPI.COMM_WORLD
r = comm.Get_rank()
peer = 1 - r
wanted = MPI.THREAD_FUNNELED if MODE == "funneled" else MPI.THREAD_MULTIPLE
assert MPI.Query_thread() == wanted, (MPI.Query_thread(), wanted)
assert comm.Get_size() == 2
if r == 0:
    until(lambda: os.path.exists(GO), 120, f"{GO} to exist")
comm.Barrier()


def ssend_recv(t):
    tag = 10 + t
    for k in range(ROUNDS):
        if r == 0:
            comm.ssend(b"p" * size(r, t, k), peer, tag)
            got = comm.recv(source=peer, tag=tag)
        else:
            got = comm.recv(source=peer, tag=tag)
            comm.ssend(b"p" * size(r, t, k), peer, tag)
        assert len(got) == size(peer, t, k)


def send_recv_buffers(t):
    tag = 10 + t
    got = np.empty(size(peer, t, ROUNDS), "u1")
    for k in range(ROUNDS):
        out = np.full(size(r, t, k), k, "u1")
        if r == 0:
            comm.Send(out, peer, tag)
            comm.Recv(got, peer, tag)
        else:
            comm.Recv(got, peer, tag)
            comm.Send(out, peer, tag)


def sent_or_received(t):
    tag = 10 + t
    got = np.empty(size(0, t, ROUNDS), "u1")
    for k in range(ROUNDS):
        if r == 0:
            comm.Send(np.full(size(r, t, k), k % 256, "u1"), peer, tag)
        else:
            comm.Recv(got, peer, tag)


def posted_buffers(t):
    tag = 10 + t
    got = np.empty(size(peer, t, ROUNDS), "u1")
    for k in range(ROUNDS):
        out = np.full(size(r, t, k), k, "u1")
        MPI.Request.Waitall([comm.Isend(out, peer, tag), comm.Irecv(got, peer, tag)])


def posted_pickles(t):
    tag = 10 + t
    for k in range(ROUNDS):
        sent = comm.isend(b"q" * size(r, t, k), peer, tag)
        got = comm.irecv(source=peer, tag=tag).wait()
        sent.wait()
        assert len(got) == size(peer, t, k)


def run_threads(bodies):
    failed = []

    def guarded(body):
        def run(t):
            try:
                body(t)
            except BaseException as exc:   # noqa: BLE001 - said below, the rank then fails
                failed.append(f"thread {t}: {type(exc).__name__}: {exc}")
        return run

    threads = [threading.Thread(target=guarded(body), args=(t,), name=f"program-{t}") for t, body in enumerate(bodies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failed, failed


if MODE == "pickles":
    run_threads([ssend_recv, ssend_recv])
elif MODE == "mixed":
    run_threads([send_recv_buffers, ssend_recv, posted_buffers, posted_pickles])
elif MODE == "receives":
    receiving = threading.Event()

    def compute():
        while not receiving.is_set():
            sum(range(1000))

    busy = threading.Thread(target=compute, name="program-compute")
    busy.start()
    try:
        run_threads([sent_or_received] * 4)
    finally:
        receiving.set()
        busy.join()
else:
    for body, t in ((send_recv_buffers, 0), (ssend_recv, 1)):
        body(t)
comm.Barrier()
sys.stdout.write(f"rank {r}: done\n")
