"""sends.py (COUNT small sends, rank 0 to rank 1), with rank 1 able to write files of 192 KiB at most
(RLIMIT_FSIZE, set once MPI is up: MPI's own shared-memory files are made by then), as a full disk
would refuse what its recording writes past that."""

import resource
import runpy
from pathlib import Path

from mpi4py import MPI

if MPI.COMM_WORLD.Get_rank() == 1:
    resource.setrlimit(resource.RLIMIT_FSIZE, (196608, 196608))
runpy.run_path(str(Path(__file__).with_name("sends.py")), run_name="__main__")
