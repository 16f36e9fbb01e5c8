"""Declares communicators while the run goes on (`Dup` of COMM_WORLD, as many as its second argument says:
enough to fill the first page of each node's collector table and start another; rank 0 makes the file
`declared` once they all are), then goes through phases, each started by the test: phase K begins when the
file `goK` exists in the directory named by its first argument (rank 0 tells the others, as declares.py
does), makes CALLS Barriers and CALLS Send/Recv pairs between ranks 0 and 1 on the last communicator
declared, and ends with rank 0 making the file `doneK`. Phases: as many as its third argument says. It ends
once the file `end` exists (so that the test reads the last phase's records from nodes still up)."""

import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

CALLS = 5
here, declared, phases = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
world = MPI.COMM_WORLD
rank = world.Get_rank()
comms = [world.Dup() for _ in range(declared)]
comm, buf = comms[-1], np.zeros(4)
if rank == 0:
    (here / "declared").touch()
for phase in range(phases):
    go = str(here / f"go{phase}")
    until(lambda: world.bcast(os.path.exists(go) if rank == 0 else None, root=0), 300, f"{go} to exist")
    for _ in range(CALLS):
        comm.Barrier()
        if rank == 0:
            comm.Send(buf, dest=1, tag=phase)
        elif rank == 1:
            comm.Recv(buf, source=0, tag=phase)
    world.Barrier()
    if rank == 0:
        (here / f"done{phase}").touch()
end = str(here / "end")
until(lambda: world.bcast(os.path.exists(end) if rank == 0 else None, root=0), 300, f"{end} to exist")
for c in comms:
    c.Free()
