"""The compiled MPI collectors against the closures they stand in for, fuzzed in a process of its own
(tests/mpi/compiled_fuzz.py: MPI starts there as a singleton, which pytest's own process must not do;
and a crash there fails this test instead of ending pytest)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobs import requires_mpi

from eventspace import compiled

pytestmark = requires_mpi


def test_the_compiled_mpi_calls_agree_with_the_closures_on_any_arguments():
    """Attack: a list the compiled calls share with Python (the page's marks) emptied made them read past it
    (SIGSEGV); a clock offset back past 0 wrote a record the closure refuses; an op code of 2**64 + op
    was wrapped to op. Then 300 fuzzed calls of every compiled form, each made on a compiled and on a
    pure channel: the same arguments reach MPI, the same result or error comes back, the same records
    are written."""
    if compiled._built is None:
        raise AssertionError(f"the compiled collector is not built ({compiled._NOT_BUILT}): `make .venv/.installed`")
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE}
    done = subprocess.run([sys.executable, "compiled_fuzz.py", "300"], cwd=Path(__file__).parent, capture_output=True,
                          text=True, timeout=600, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip().endswith("300 examples: the compiled MPI collectors agree with the closures")


def test_without_mpi4pys_private_names_the_compiled_calls_fall_back_and_still_agree():
    """eventspace.mpi.mpi4py_access's private names of mpi4py (its C API table, _sizeof,
    _commctx_intra) removed before the first call, as a later mpi4py might: each use falls back
    (compiled receives read the Status through its methods, not MPI_Status), and the compiled calls
    still write what the closures write."""
    if compiled._built is None:
        raise AssertionError(f"the compiled collector is not built ({compiled._NOT_BUILT}): `make .venv/.installed`")
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE}
    done = subprocess.run([sys.executable, "compiled_fuzz.py", "100", "--without-private"], cwd=Path(__file__).parent,
                          capture_output=True, text=True, timeout=600, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.startswith("without mpi4py's private names: the Status's methods\n")
    assert done.stdout.strip().endswith("100 examples: the compiled MPI collectors agree with the closures")
