"""Twelve tasks through an MPIPoolExecutor: under `-m mpi4py.futures` rank 0 runs this and the other
ranks are its workers; run as a script, the executor spawns its workers. Prints the results as
JSON, then waits, its pool still up, for the file named by the first argument to exist (if one is
named, and not `-`)."""

import json
import os
import sys
from pathlib import Path

from mpi4py.futures import MPIPoolExecutor

sys.path.append(str(Path(__file__).resolve().parents[2]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402


def square(x):
    return x * x


if __name__ == "__main__":
    with MPIPoolExecutor() as pool:
        print(json.dumps(list(pool.map(square, range(12)))), flush=True)
    if len(sys.argv) > 1 and sys.argv[1] != "-":
        until(lambda: os.path.exists(sys.argv[1]), 300, f"{sys.argv[1]} to exist")
