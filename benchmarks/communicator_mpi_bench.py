"""What making a communicator costs an mpi4py program, plain and monitored, as communicators accumulate (issue 34).

Run: `python benchmarks/communicator_mpi_bench.py [--ranks 8 32] [--count 200] [--pairs 1]` (needs the mpi extra).

For each rank count, the same program runs alternately plain (`mpiexec -n N python
communicator_mpi_bench.py --kernel`) and monitored (`mpiexec -n N python -m eventspace.mpi ...`,
every call collected), A B B A (`--pairs` times), so that the drift of a shared machine's load
hits both alike. The program makes `--count` communicators one after the other, alternately a
Dup of COMM_WORLD (declared by world rank 0, to itself) and a Split of it in reverse rank order
(declared by the last world rank, through rank 0's node): each one is a communicator a
monitored run declares to every rank, and each makes the run's pathmap, and so its snapshot, larger.
Every creation is timed on rank 0 between two barriers; the table gives the median time of the
first and of the last tenth of them, and of all of them, monitored against plain.

Before issue 34's snapshot writer, rank 0 wrote the whole pathmap's YAML snapshot inside every
declare (quadratic in the number of communicators); now a writer thread of rank 0 writes the newest
one, off the declare path. Results go to benchmarks/results/communicator_mpi_bench.json.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import Figure, mpiexec, print_result, report, result_of  # noqa: E402

HERE = Path(__file__).resolve()
MPIEXEC: list[str] = []   # the launcher and its options (timing.mpiexec), set by main


def kernel(count: int) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    made, times = [], []
    for i in range(count):
        comm.Barrier()
        start = time.perf_counter()
        made.append(comm.Dup() if i % 2 == 0 else comm.Split(0, size - rank))
        made[-1].Barrier()   # every member has it: the creation is over everywhere
        times.append(time.perf_counter() - start)
    if rank == 0:
        print_result(times)


def job(ranks: int, monitored: bool, count: int, name: str) -> list[float]:
    """One mpiexec run of the kernel; rank 0's time per communicator creation, in seconds."""
    with tempfile.TemporaryDirectory(prefix="communicator-bench-") as tmp:
        program = ([sys.executable, "-m", "eventspace.mpi", "--name", name,
                    "--max-communicators", str(count + 1)] if monitored else [sys.executable])
        cmd = [*MPIEXEC, "-n", str(ranks), *program, str(HERE), "--kernel", "--count", str(count)]
        env = os.environ | {"EVENTSPACE_RUN_DIR": str(Path(tmp) / "runs")}   # the run's name is its own
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env=env)
        try:
            out, err = proc.communicate(timeout=3600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    return result_of(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=200, help="communicators the program makes (default 200)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 32], help="rank counts (default 8 32)")
    parser.add_argument("--pairs", type=int, default=1, help="A B B A this many times (default 1)")
    args = parser.parse_args()
    if args.kernel:
        kernel(args.count)
        return 0
    MPIEXEC[:] = mpiexec("pip install 'eventspace[mpi]'")
    tenth = max(1, args.count // 10)
    parts = {f"communicators 1-{tenth}": slice(0, tenth),
             f"communicators {args.count - tenth + 1}-{args.count}": slice(args.count - tenth, args.count),
             f"all {args.count} communicators": slice(0, args.count)}
    figures: list[Figure] = []
    for ranks in args.ranks:
        runs = {False: [], True: []}
        for i, monitored in enumerate((False, True, True, False) * args.pairs):
            times = job(ranks, monitored, args.count, f"commbench-{ranks}-{i}")
            runs[monitored].append(times)
            # Each job's figures as it ends: a long run says something before its table.
            print(f"{ranks} ranks, {'monitored' if monitored else 'plain'} run {i + 1}: "
                  + ", ".join(f"{part} {1e3 * statistics.median(times[which]):.1f} ms" for part, which in parts.items()),
                  file=sys.stderr, flush=True)
        for part, which in parts.items():
            plain = Figure(f"{ranks} ranks, {part}: plain",
                           [statistics.median(times[which]) for times in runs[False]])
            figures += [plain, Figure(f"{ranks} ranks, {part}: monitored",
                                      [statistics.median(times[which]) for times in runs[True]], peer=plain.name)]
    report("Time per communicator creation (Dup / Split of COMM_WORLD, median), plain vs monitored (A B B A"
           f"{' x ' + str(args.pairs) if args.pairs > 1 else ''})", figures, {}, "communicator_mpi_bench.json",
           unit="ms", extra={"count": args.count, "pairs": args.pairs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
