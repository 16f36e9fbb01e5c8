"""A persistent send and receive between ranks 0 and 1 on a Dup of COMM_WORLD (comm1), through phases
the test starts (phase K begins when the file `goK` exists in the directory named by the first
argument, and ends with rank 0 making `doneK`), while the test switches comm1's collectors off and on:
phase 0 makes the requests and starts them; phase 1 waits for them; phase 2 waits on them again, now
inactive (MPI returns at once), as Wait and as Waitall, then starts and waits for them once more. It
ends once the file `end` exists."""

import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

here = Path(sys.argv[1])
world = MPI.COMM_WORLD
rank = world.Get_rank()
comm, buf = world.Dup(), np.zeros(4)


def phase(k: int, work) -> None:
    go = str(here / f"go{k}")
    until(lambda: world.bcast(os.path.exists(go) if rank == 0 else None, root=0), 300, f"{go} to exist")
    work()
    world.Barrier()
    if rank == 0:
        (here / f"done{k}").touch()


request = comm.Send_init(buf, dest=1, tag=7) if rank == 0 else comm.Recv_init(buf, source=0, tag=7)
phase(0, request.Start)
phase(1, request.Wait)


def again() -> None:
    request.Wait()
    MPI.Request.Waitall([request])
    request.Start()
    request.Wait()


phase(2, again)
end = str(here / "end")
until(lambda: world.bcast(os.path.exists(end) if rank == 0 else None, root=0), 300, f"{end} to exist")
request.Free()
comm.Free()
