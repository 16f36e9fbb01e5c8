"""Known waits, injected with sleeps, for the wait-state analysis to find:

    late-sender N D      rank 1 sleeps D seconds before each of N Sends to rank 0 (which waits in Recv)
    late-receiver N D    rank 0 Ssends N times to rank 1, which sleeps D before each Recv
    allreduce N D R      rank R sleeps D before each of N Allreduces (the others wait)
    bcast N D            the root, rank 0, sleeps D before each of N Bcasts
    ordered N            no waits at all: N messages whose receives begin only once their sends
                         have (the order made certain by messages polled with Test, which never waits)
    mixed N D [GO]       once the file GO exists (if named): N steps of a ring exchange with Irecv,
                         Isend and Waitall, an Allreduce, a Bcast and an Ssend, rank 1 late by D each step

Every mode but `ordered` begins with a Barrier and ends with a Reduce and a Gather. Rank 0 prints one
JSON line: the seconds the late rank really slept, in total (`slept`), as measured around its
sleeps, and (`calls`, per rank) when each MPI call of the modes above but `mixed` began and
returned, read on CLOCK_MONOTONIC by the program itself around the call: the waits as they
happened, whatever else the machine was doing (on one host, the clock the collectors read).
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
mode, n = sys.argv[1], int(sys.argv[2])
delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
slept = 0.0


def sleep():
    global slept
    started = time.monotonic()
    time.sleep(delay)
    slept += time.monotonic() - started


def timed(call, *args, **kwargs):
    """`call(*args, **kwargs)`, its start and return kept in `calls` (ns, CLOCK_MONOTONIC)."""
    before = time.monotonic_ns()
    result = call(*args, **kwargs)
    calls.append((before, time.monotonic_ns()))
    return result


calls = []


def poll(request):
    """Complete `request` by testing it (a Test call never waits: it only looks)."""
    while not request.Test():
        pass


buf = np.zeros(1, np.float64)
if mode != "ordered":
    if mode == "mixed" and len(sys.argv) > 4:
        until(lambda: os.path.exists(sys.argv[4]), 300, f"{sys.argv[4]} to exist")
    comm.Barrier()
if mode == "late-sender":
    for _ in range(n):
        if rank == 1:
            sleep()
            timed(comm.Send, buf, 0, 1)
        elif rank == 0:
            timed(comm.Recv, buf, 1, 1)
elif mode == "late-receiver":
    for _ in range(n):
        if rank == 0:
            timed(comm.Ssend, buf, 1, 2)
        elif rank == 1:
            sleep()
            timed(comm.Recv, buf, 0, 2)
elif mode == "allreduce":
    late = int(sys.argv[4])
    for _ in range(n):
        if rank == late:
            sleep()
        timed(comm.Allreduce, MPI.IN_PLACE, buf)
elif mode == "bcast":
    for _ in range(n):
        if rank == 0:
            sleep()
        timed(comm.Bcast, buf, root=0)
elif mode == "ordered":
    if rank == 1:
        ready = comm.Irecv(np.zeros(1), 0, 3)
        for _ in range(n):
            comm.Send(buf, 0, 1)          # small: delivered eagerly, so the Send returns at once
        comm.Send(buf, 0, 2)              # "go": every message above was sent before this one
        poll(ready)                       # rank 0 has posted its receive of the Ssend below
        comm.Ssend(buf, 0, 4)
    elif rank == 0:
        go = comm.Irecv(np.zeros(1), 1, 2)
        posted = comm.Irecv(np.zeros(1), 1, 4)
        poll(go)
        for _ in range(n):
            comm.Recv(buf, 1, 1)
        comm.Send(buf, 1, 3)
        poll(posted)
elif mode == "mixed":
    up, down = (rank - 1) % size, (rank + 1) % size
    got = [np.zeros(1), np.zeros(1)]
    for step in range(n):
        if rank == 1:
            sleep()
        requests = [comm.Irecv(got[0], up, 5), comm.Irecv(got[1], down, 6),
                    comm.Isend(buf, down, 5), comm.Isend(buf, up, 6)]
        MPI.Request.Waitall(requests)
        comm.Allreduce(MPI.IN_PLACE, buf)
        comm.Bcast(buf, root=step % size)
        if rank == 0:
            comm.Ssend(buf, 2, 7)
        elif rank == 2:
            comm.Recv(buf, 0, 7)
else:
    raise SystemExit(f"unknown mode {mode}")
if mode == "ordered":   # it makes no collective call
    total, everyone = 0.0, [calls]
else:
    total, everyone = comm.reduce(slept, root=0), comm.gather(calls, root=0)
if rank == 0:
    print(json.dumps({"slept": total, "calls": everyone}), flush=True)
