"""Node servers started by mpiexec (or srun): node i of the pathmap runs as MPI rank i.

`paths.launch(..., mpiexec=[...])` starts one `mpiexec -n N [args] python -m paths --by-rank`
instead of N local processes, so that the MPI launcher places the node processes on the hosts
it is given (a hostfile, a Slurm allocation). A rank learns its number from the environment
the launcher sets (no MPI library is loaded: the node servers speak ZeroMQ, not MPI).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .errors import PathsError

# Where MPI launchers put a process's rank: MPICH/Hydra and Intel MPI, Open MPI, PMIx, Slurm's srun.
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
MPIEXEC_ENV = "EVENTSPACE_MPIEXEC"   # another launcher command, e.g. `srun`
EXTRA_HINT = "pip install 'eventspace[mpi]' (the mpich wheel ships mpiexec)"
# The MPIs whose launchers differ in what a run needs (family_of): Hydra (MPICH's, Intel MPI's) and Open MPI's.
OPEN_MPI, MPICH = "Open MPI", "MPICH"
# Both set to 1: Open MPI's launcher then starts as root, which it refuses otherwise (root_refusal).
ROOT_VARIABLES = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")


@functools.lru_cache(maxsize=None)
def family_of(mpiexec: str) -> str:
    """Which MPI's launcher `mpiexec` is, as its `--version` says: OPEN_MPI ("mpiexec (Open MPI)
    5.0.11"), MPICH (Hydra, MPICH's and Intel MPI's: "HYDRA build details"), or "" for another (srun)
    or one that says nothing within 10 s."""
    try:
        said = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=10,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ""
    text = said.stdout + said.stderr
    if "Open MPI" in text:
        return OPEN_MPI
    if "HYDRA" in text or "MPICH" in text or "Intel(R) MPI" in text:
        return MPICH
    return ""


def launcher_options(family: str) -> list[str]:
    """What `mpiexec -n N` is given besides, so that a launcher of `family` starts N ranks wherever
    Hydra would: Open MPI's refuses more ranks than the host has cores (its slots) unless told
    --oversubscribe; Hydra runs them all. Ranks beyond the cores share them, as under Hydra."""
    return ["--oversubscribe"] if family == OPEN_MPI else []


def root_refusal(family: str, environ=os.environ) -> str | None:
    """Why a launcher of `family` will not start here, and what to do about it, or None: Open MPI's
    refuses to run as root unless OMPI_ALLOW_RUN_AS_ROOT and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM are
    both 1 (a container's user often is root)."""
    if family != OPEN_MPI or os.geteuid() != 0 or all(environ.get(v) == "1" for v in ROOT_VARIABLES):
        return None
    return ("Open MPI's mpiexec refuses to run as root; if you mean to, set "
            f"{'=1 and '.join(ROOT_VARIABLES)}=1 in the environment (README: \"Open MPI\")")


# Open MPI's launcher keeps its session in a directory named after its pid (ompi.<pid>) under the
# temporary directory it chose (the first of $TMPDIR, $TEMP, $TMP that is set, else /tmp), and removes
# it when it ends; its process names (comm), as the wheel's and a built Open MPI's are called.
SESSION = re.compile(r"ompi\.(\d+)")
LAUNCHER_NAMES = frozenset({"prterun", "mpiexec", "mpirun", "prte", "orterun"})


def reclaim_sessions() -> list[str]:
    """Remove the session directories that Open MPI launchers of this user left when they were killed
    (SIGKILL: a job's whole process group killed, say), and return them. A later launcher that gets
    the same pid finds its own pid in the left one's rendezvous files (pmix.<host>.tool.<pid>), takes
    them for a live server's and stops before it starts any rank ("The PMIx server's listener thread
    failed to start", exit 213). One whose pid runs no Open MPI launcher now has ended. Linux only
    (where /proc says what runs); nothing elsewhere, or where the directory cannot be read."""
    if not sys.platform.startswith("linux"):
        return []
    base = next((os.environ[v] for v in ("TMPDIR", "TEMP", "TMP") if os.environ.get(v)), "/tmp")
    removed = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    for entry in entries:
        found = SESSION.fullmatch(entry.name)
        try:
            if found is None or not entry.is_dir(follow_symlinks=False) or \
                    entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue
        except OSError:
            continue
        if not _launcher_runs(int(found.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _launcher_runs(pid: int) -> bool:
    """Whether process `pid` runs, as an Open MPI launcher (True where that cannot be read)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() in LAUNCHER_NAMES
    except FileNotFoundError:
        return False
    except OSError:
        return True


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
    """`mpiexec -n NODES ARGS NODE_COMMAND`: one rank per node (as many as Hydra would start:
    `launcher_options`, where the launcher is not one $EVENTSPACE_MPIEXEC names as it is to run);
    on Linux, started so that it ends its ranks when the thread that runs this command ends (the
    launcher dies). PathsError where the launcher will refuse to start (root_refusal). Open MPI's
    sessions that launchers killed earlier left are removed first (reclaim_sessions)."""
    found = find_mpiexec()
    family = family_of(shutil.which(found[0]) or found[0])
    refused = root_refusal(family)
    if refused is not None:
        raise PathsError(f"--mpiexec: {refused}")
    options = [] if os.environ.get(MPIEXEC_ENV) else launcher_options(family)
    reclaim_sessions()
    launcher = [*found, "-n", str(nodes), *options, *args, *node_command]
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
