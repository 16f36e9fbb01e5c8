"""mpi4py where its public Python API does not reach: every use of a name mpi4py does not document, in one place.

Checked on mpi4py 4.0.0 to 4.1.2 (pyproject asks for >= 4.0). Each use is named below with what it
gives, and each falls back to None where the name is gone (a later mpi4py may rename it), so that the
caller takes its Python path, which writes the same records:

- `status_getter()`: mpi4py's public C API function PyMPIStatus_Get (MPI_Status *(PyObject *)), as a
  capsule. mpi4py's header (include/mpi4py/mpi4py.h; its limited form pycapi.h, `_mpi4py_ImportFunc`)
  hands its C API out the same way: `import_mpi4py()` reads the capsule from the module's
  `__pyx_capi__` and checks its signature. The compiled collector cannot include mpi4py.h (pip builds
  it in an isolated environment where neither mpi4py, an optional extra, nor an MPI is installed),
  so the lookup is made here, at run time, and the C side checks the same signature string
  (eventspace/collector_c/mpi_arguments.c, use_mpi_status). Without it: the Status's methods.
- `handle_size()`, `status_size()`: `MPI._sizeof(MPI.Datatype)` and `MPI._sizeof(MPI.Status)`, the
  sizes of an MPI handle (4 in MPICH, 8 in Open MPI) and of MPI_Status, which no public name gives.
  Without them: the Status's methods.
- `hold_no_lock(comm)`: `MPI._commctx_intra(comm)`, which makes now the duplicate communicator that
  mpi4py's pickle-form reductions otherwise make on their first call, holding the GIL (so that a rank
  waiting there for a late member would starve its own node server). Without it: nothing (that
  first call makes it, as without us).

Public names used beside them: `Datatype.handle` (mpi4py >= 4.0), and the MPI library's own
MPI_Get_count, found in the library mpi4py's extension links (`mpi_get_count()`).
"""

from __future__ import annotations

import ctypes
import os

from mpi4py import MPI

STATUS_GET_SIGNATURE = "MPI_Status *(PyObject *)"   # PyMPIStatus_Get's, as mpi4py.h checks it
# The private names used here (what `without_private` removes to test the fallbacks).
PRIVATE = ("__pyx_capi__", "_sizeof", "_commctx_intra")


def status_getter():
    """The capsule of mpi4py's PyMPIStatus_Get (its public C API, looked up as import_mpi4py() does), or None."""
    table = getattr(MPI, "__pyx_capi__", None)
    capsule = table.get("PyMPIStatus_Get") if isinstance(table, dict) else None
    return capsule if type(capsule).__name__ == "PyCapsule" else None


def handle_size() -> int | None:
    """Bytes of an MPI handle (MPI_Datatype) in this MPI library, or None."""
    return _size_of(MPI.Datatype)


def status_size() -> int | None:
    """Bytes of this MPI library's MPI_Status, or None."""
    return _size_of(MPI.Status)


def _size_of(cls) -> int | None:
    size_of = getattr(MPI, "_sizeof", None)
    if size_of is None:
        return None
    try:
        return int(size_of(cls))
    except (TypeError, ValueError, MPI.Exception):
        return None


def hold_no_lock(comm) -> None:
    """Make now (collective over `comm`) the duplicate that mpi4py's pickle-form reductions (allreduce,
    reduce, scan, exscan) make on their first call: it does so holding Python's GIL, so a rank waiting
    there for a late member would starve its own node server, and a monitor would see the rank as not
    answering instead of waiting. Nothing where mpi4py has no `_commctx_intra` (`_commctx_inter` for
    an intercommunicator, collective over both its groups)."""
    make = getattr(MPI, "_commctx_inter" if comm.Is_inter() else "_commctx_intra", None)
    if make is not None:
        make(comm)


def mpi_get_count() -> int:
    """The address of the MPI library's MPI_Get_count, from the library mpi4py's extension has loaded; 0 if none."""
    try:
        library = ctypes.CDLL(MPI.__file__, mode=os.RTLD_NOLOAD)
        return ctypes.cast(library.MPI_Get_count, ctypes.c_void_p).value or 0
    except (AttributeError, OSError, TypeError):
        return 0


def without_private() -> None:
    """Remove the private names from this process's mpi4py (a test of the fallbacks: a later mpi4py without them)."""
    for name in PRIVATE:
        if hasattr(MPI, name):
            delattr(MPI, name)
