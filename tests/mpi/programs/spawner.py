"""Two ranks spawn two children (tests/mpi/programs/spawned.py, given the arguments after the second)
and talk to them over the Spawn's intercommunicator; calls known exactly (tests/mpi/test_mpi_spawn.py
counts them). Arguments: FILE (or -) and HOW. If FILE names a file, rank 0 waits for it to exist
before the Spawn, and every rank waits for FILE.done to exist before the end. HOW is `spawn` (one
command, two processes) or `multiple` (Spawn_multiple: two commands, a process each)."""

import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

world = MPI.COMM_WORLD
r = world.Get_rank()
gate = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "-" else None
if gate and r == 0:
    until(lambda: os.path.exists(gate), 300, f"{gate} to exist")
child = [str(Path(__file__).with_name("spawned.py")), *sys.argv[3:]]
if sys.argv[2] == "multiple":
    children = world.Spawn_multiple([sys.executable] * 2, [child] * 2, [1, 1])
else:
    children = world.Spawn(sys.executable, child, maxprocs=2)
assert children.Get_remote_size() == 2
if r == 0:
    children.Send(np.zeros(300, np.uint8), dest=1, tag=5)
assert children.recv(source=r, tag=6) == {"child": r}
children.Bcast(np.arange(100, dtype="f8"), root=MPI.ROOT if r == 0 else MPI.PROC_NULL)
children.Barrier()
children.Disconnect()
print(f"parent {r} done", flush=True)
if gate:
    until(lambda: os.path.exists(f"{gate}.done"), 300, f"{gate}.done to exist")
