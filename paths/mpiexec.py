"""Node servers started by mpiexec (or srun): node i of the pathmap runs as MPI rank i.

`paths.launch(..., mpiexec=[...])` starts one `mpiexec -n N [args] python -m paths --by-rank`
instead of N local processes, so that the MPI launcher places the node processes on the hosts
it is given (a hostfile, a Slurm allocation). A rank learns its number from the environment
the launcher sets (no MPI library is loaded: the node servers speak ZeroMQ, not MPI).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .errors import PathsError

# Where MPI launchers put a process's rank: MPICH/Hydra and Intel MPI, Open MPI, PMIx, Slurm's srun.
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
MPIEXEC_ENV = "EVENTSPACE_MPIEXEC"   # another launcher command, e.g. `srun`
EXTRA_HINT = "pip install 'eventspace[mpi]' (the mpich wheel ships mpiexec)"


def find_mpiexec() -> list[str]:
    """The launcher command: $EVENTSPACE_MPIEXEC (split on spaces), else the mpiexec beside this
    Python (the `mpi` extra's), else the one on PATH; PathsError naming the extra if none."""
    given = os.environ.get(MPIEXEC_ENV)
    if given:
        command = given.split()
        if shutil.which(command[0]) is None:
            raise PathsError(f"${MPIEXEC_ENV} names {command[0]!r}, which is not on PATH")
        return command
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("mpiexec")
    if found is None:
        raise PathsError(f"--mpiexec: no mpiexec next to {sys.executable} or on PATH; {EXTRA_HINT}, "
                         f"or name your launcher in ${MPIEXEC_ENV}")
    return [found]


# Runs first, then becomes the MPI launcher (exec: same process): asks Linux to send it SIGTERM
# when the thread that started it ends (PR_SET_PDEATHSIG), so that the MPI launcher ends its
# ranks when the EventSpace launcher dies, even by SIGKILL. The node processes cannot do that
# themselves: before the launcher tells rank 0 where the others listen, rank 0 cannot stop them,
# and Hydra ends the others neither on rank 0's exit (they never call MPI_Init) nor, at times,
# forwards its closed stdin at all. On SIGTERM, mpiexec and srun end the job on every host.
_TIED_TO_ITS_STARTER = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"   # 1: PR_SET_PDEATHSIG
    "if os.getppid() != int(sys.argv[1]):\n"                           # it died before that line
    "    sys.exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n")


def command(nodes: int, args: list[str], node_command: list[str]) -> list[str]:
    """`mpiexec -n NODES ARGS NODE_COMMAND`: one rank per node; on Linux, started so that it
    ends its ranks when the thread that runs this command ends (the launcher dies)."""
    launcher = [*find_mpiexec(), "-n", str(nodes), *args, *node_command]
    if not sys.platform.startswith("linux"):
        return launcher
    return [sys.executable, "-S", "-c", _TIED_TO_ITS_STARTER, str(os.getpid()), *launcher]


def my_rank(environ=os.environ) -> int:
    """This process's MPI rank, from the variables its launcher set; PathsError if none is set."""
    for name in RANK_VARIABLES:
        value = environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    raise PathsError(f"--by-rank: no rank in the environment ({', '.join(RANK_VARIABLES)}); start this "
                     "command with mpiexec or srun")
