"""MPI collectors' cost: OSU-style loops on 2 and 4 ranks, plain and monitored, in one invocation.

Run: `python benchmarks/mpi_bench.py [--quick] [--reps 5]` (needs the mpi extra).

For 2 and for 4 ranks it runs the same kernels four times, alternately plain (`mpiexec -n N
python mpi_bench.py --kernel`) and monitored (`mpiexec -n N python -m eventspace.mpi ...`, every
call collected): A B B A, so that drift of a shared machine's load hits both alike; then once
more monitored with a getevent monitor pulling the run's events at full rate into an archive
(`eventspace monitor getevent --interval 0`). Each kernel is timed in short batches (each much
shorter than a time slice, so that on a shared machine most are not switched out) over `--reps`
repetitions, and reports the median batch, on rank 0's clock:

- collector cost: comm.Send to MPI.PROC_NULL (MPI does nothing, so the difference monitored -
  plain is what a collector adds to a call), the same with dest and tag given by keyword (as
  mpi4py's tutorial writes it), Isend + Wait to PROC_NULL (a post, its request
  record and the completion call), Isend + Waitany of a list (a completion call on many
  requests, as Waitall, Testany, Waitsome...), `comm.send(None, ...)` and `comm.sendrecv(None, ...)` (the
  pickle form); also in the rank's own CPU time (time.thread_time), which a
  loaded machine inflates less than the wall clock, beside a bare Python function call's, for
  scale;
- latency: ping-pong of Send/Recv between ranks 0 and 1, half the round trip, 0 B to 1 MiB
  (2 ranks: point-to-point latency is between two), from page-aligned buffers (OSU-style: a
  monitored process, whose heap our start-up has used, would otherwise get its large buffers at
  other offsets than a plain one, and copy them a few percent slower for that alone);
- bandwidth: windows of 64 Isend to rank 1 (Irecv, Waitall, a 1-byte reply), per message;
- barrier, and an 8-byte Allreduce (np.float64[1]), on every rank;
- Iallreduce + Wait, 8 B and 64 KiB on every rank, and on a 1-rank communicator (the collector
  cost of a nonblocking collective, per call).
- one-sided, on a window of every rank (Win.Allocate): Put to MPI.PROC_NULL in a Lock_all epoch
  (collector cost, as Send's), an empty Fence epoch, and the latency of an epoch in which rank 0
  Puts 8 B, 64 KiB or 1 MiB (or Accumulates 8 B) into rank 1's window and every rank closes it with a
  Fence; and the Put epochs again on a window of the program's own memory (Win.Create), into which
  MPI itself moves the bytes (Win.Allocate's is shared memory on one host, and a Put there a copy:
  an epoch of 64 KiB lasts hardly longer than one of 8 B, and what the collectors add to it is what
  they add to the 8 B one).

Where a job has more ranks than the machine has cores, each rank is bound to a core, round robin
(`mpiexec -bind-to core`, as the OSU benchmarks run; `--no-bind`: never): which ranks share a core is
otherwise the scheduler's choice, made anew in each job and now and then for part of one, and a
collective's time depends on it (Iallreduce 8 B on 4 ranks on 2 cores: 16-18 µs with ranks 0 and 2 on
one core, 25-40 µs for a while in some jobs), which one A B B A does not average out. With one core
each there is no such choice, and the ranks run where mpiexec's own defaults put them.

`--pairs N` runs A B B A N times (2N jobs per arm): a job's large-message latency depends on where
its buffers land, a few percent from job to job, which one A B B A does not average out.

Targets: collector cost per MPI call (A/B) <= 1 µs, a Put's <= 0.5 µs; 0-byte latency monitored <=
1.25x plain; latency at >= 64 KiB <= 1.02x; 8-byte allreduce on 4 ranks <= 1.15x; Iallreduce <= 1.25x
plain at 8 B, <= 1.05x at 64 KiB, its collector cost <= 0.5 µs a call; Put + Fence and Accumulate +
Fence at 8 B <= 1.25x, Put + Fence at 64 KiB and 1 MiB <= 1.05x, on either window. Results go to
benchmarks/results/mpi_bench.json.
"""

from __future__ import annotations

import argparse
import mmap
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import Figure, difference, mpiexec, print_result, report, result_of  # noqa: E402

HERE = Path(__file__).resolve()
# The launcher and its options (timing.mpiexec), by whether it binds each rank to a core; set by main.
MPIEXEC: dict[bool, list[str]] = {}
CORES = len(os.sched_getaffinity(0))
LATENCY_SIZES = (0, 8, 64, 1024, 8192, 65536, 262144, 1 << 20)
BANDWIDTH_SIZES = (8192, 65536, 1 << 20)
WINDOW = 64
RMA_SIZES = (8, 65536, 1 << 20)   # Put + Fence


def size_text(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1024 else f"{n} B"


# -- the kernels (run on every rank) ------------------------------------------------------------

def kernel(args) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    scale = 0.2 if args.quick else 1.0
    if args.wait:
        while rank == 0 and not os.path.exists(args.wait):
            time.sleep(0.05)
    comm.Barrier()
    out = {}

    def best(name, body, iterations, per=1, batches=20):
        """Median over short timed batches (each much shorter than a time slice, so that on a
        shared machine most are not switched out), over `reps` repetitions."""
        batch = max(1, int(iterations * scale) // batches)
        walls, cpus = [], []
        for _ in range(args.reps):
            comm.Barrier()
            for _ in range(batches):
                wall, cpu = time.perf_counter(), time.thread_time()
                body(batch)
                walls.append((time.perf_counter() - wall) / batch / per)
                cpus.append((time.thread_time() - cpu) / batch / per)
        out[name] = statistics.median(walls)
        out[f"{name} (CPU)"] = statistics.median(cpus)

    page = mmap.PAGESIZE

    def aligned(nbytes: int, dtype=np.uint8):
        """A zeroed buffer starting on a page, as the OSU benchmarks allocate theirs: where malloc
        puts a large buffer (its own pages, or an offset in the heap, which the process's earlier
        allocations decide) moves a copy's speed, and so large-message latency, by several percent
        between two processes that run the same loop."""
        itemsize = np.dtype(dtype).itemsize
        raw = np.zeros(nbytes * itemsize + page, np.uint8)
        start = (-raw.ctypes.data) % page
        return raw[start:start + nbytes * itemsize].view(dtype)

    nothing = np.zeros(0, np.uint8)

    def send_null(n):
        for _ in range(n):
            comm.Send(nothing, MPI.PROC_NULL, 0)

    def send_null_by_keyword(n):   # as mpi4py's tutorial writes a send
        for _ in range(n):
            comm.Send(nothing, dest=MPI.PROC_NULL, tag=0)

    def isend_wait_null(n):
        for _ in range(n):
            comm.Isend(nothing, MPI.PROC_NULL, 0).Wait()

    def send_null_pickled(n):   # the pickle form, as most mpi4py programs send
        for _ in range(n):
            comm.send(None, MPI.PROC_NULL, 0)

    def sendrecv_null_pickled(n):   # a halo exchange's call, the pickle form
        for _ in range(n):
            comm.sendrecv(None, MPI.PROC_NULL, 0, None, MPI.PROC_NULL, 0)

    def isend_waitany_null(n):   # a completion call on many requests (Waitany, Testsome, ...)
        for _ in range(n):
            MPI.Request.Waitany([comm.Isend(nothing, MPI.PROC_NULL, 0)])

    def python_call(n, f=lambda a, b, c: a):
        for _ in range(n):
            f(nothing, -1, 0)

    best("a Python call", python_call, 20000)   # the machine's speed, for scale
    best("Send to PROC_NULL", send_null, 20000)
    best("Send to PROC_NULL by keyword", send_null_by_keyword, 20000)
    best("Isend+Wait to PROC_NULL", isend_wait_null, 10000)
    best("Isend+Waitany to PROC_NULL", isend_waitany_null, 10000)
    best("send (pickle form) to PROC_NULL", send_null_pickled, 10000)
    best("sendrecv (pickle form) with PROC_NULL", sendrecv_null_pickled, 10000)
    if size == 2:
        for nbytes in LATENCY_SIZES:
            buf = aligned(nbytes)

            def pingpong(n, buf=buf):
                if rank == 0:
                    for _ in range(n):
                        comm.Send(buf, 1, 1)
                        comm.Recv(buf, 1, 1)
                else:
                    for _ in range(n):
                        comm.Recv(buf, 0, 1)
                        comm.Send(buf, 0, 1)

            best(f"latency {size_text(nbytes)}", pingpong, 4000 if nbytes <= 8192 else 400 if nbytes <= 65536 else 100, 2)
        ack = aligned(1)
        for nbytes in BANDWIDTH_SIZES:
            bufs = [aligned(nbytes) for _ in range(WINDOW)]

            def window(n, bufs=bufs):
                for _ in range(n):
                    if rank == 0:
                        MPI.Request.Waitall([comm.Isend(b, 1, 2) for b in bufs])
                        comm.Recv(ack, 1, 3)
                    else:
                        MPI.Request.Waitall([comm.Irecv(b, 0, 2) for b in bufs])
                        comm.Send(ack, 0, 3)

            best(f"bandwidth {size_text(nbytes)}", window, 200 if nbytes <= 65536 else 20, WINDOW)

    def barrier(n):
        for _ in range(n):
            comm.Barrier()

    one, got = aligned(1, np.float64), aligned(1, np.float64)
    one[0] = 1.0

    def allreduce(n):
        for _ in range(n):
            comm.Allreduce(one, got)

    best(f"barrier, {size} ranks", barrier, 3000)
    best(f"allreduce 8 B, {size} ranks", allreduce, 3000)

    # Iallreduce + Wait (a nonblocking collective: its post, request and completion records), 8 B and
    # 64 KiB on every rank; and on a communicator of this rank alone, where MPI does next to nothing, so
    # that monitored - plain is what the collectors add (per call: the post and the Wait are two).
    big, big_got = aligned(8192, np.float64), aligned(8192, np.float64)
    alone = comm.Split(rank)

    def iallreduce(n, send=one, into=got, on=comm):
        for _ in range(n):
            on.Iallreduce(send, into).Wait()

    best(f"iallreduce 8 B, {size} ranks", iallreduce, 3000)
    best(f"iallreduce 64 KiB, {size} ranks", lambda n: iallreduce(n, big, big_got), 300)
    best("Iallreduce+Wait alone (a 1-rank communicator), per call", lambda n: iallreduce(n, on=alone), 10000, 2)
    # One-sided: a window of every rank (traced where monitored, as a program's would be).
    win = MPI.Win.Allocate(max(RMA_SIZES), 1, comm=comm)
    win.Lock_all()

    def put_null(n, put=win.Put):
        for _ in range(n):
            put(nothing, MPI.PROC_NULL)

    best("Put to PROC_NULL", put_null, 20000)
    win.Unlock_all()

    def fence(n):   # an empty epoch: what a Fence costs alone, as a Barrier
        for _ in range(n):
            win.Fence()

    best(f"Fence, {size} ranks", fence, 3000)
    # The same epochs on a window of memory the program made itself (Win.Create, as mpi4py's cpi-rma
    # demo makes one), into which MPI moves the bytes itself: on one host, Win.Allocate's window is
    # shared memory, and MPICH's Put a copy into it (64 KiB in 0.2 µs here, an epoch ~ its Fence).
    own = aligned(max(RMA_SIZES))
    created = MPI.Win.Create(own, 1, comm=comm)
    created.Fence()
    for kind, window in (("", win), (" (Win.Create)", created)):
        for nbytes in RMA_SIZES:
            buf = aligned(nbytes)

            def put_fence(n, buf=buf, window=window):
                """Rank 0 puts into rank 1's window; every rank closes the epoch."""
                for _ in range(n):
                    if rank == 0:
                        window.Put(buf, 1)
                    window.Fence()

            best(f"Put + Fence {size_text(nbytes)}{kind}, {size} ranks", put_fence, 3000 if nbytes <= 8192 else 400)
    created.Fence(MPI.MODE_NOSUCCEED)
    created.Free()

    def accumulate_fence(n):
        for _ in range(n):
            if rank == 0:
                win.Accumulate(one, 1, op=MPI.SUM)
            win.Fence()

    best(f"Accumulate 8 B + Fence, {size} ranks", accumulate_fence, 3000)
    win.Fence(MPI.MODE_NOSUCCEED)
    win.Free()
    if rank == 0:
        print_result(out)


# -- the driver -------------------------------------------------------------------------------

def job(ranks: int, monitored: bool, args, name: str, with_getevent: bool = False) -> dict:
    """One mpiexec run of the kernels; rank 0's figures."""
    kernel_args = ["--kernel", "--reps", str(args.reps)] + (["--quick"] if args.quick else [])
    with tempfile.TemporaryDirectory(prefix="mpi-bench-") as tmp:
        wait = Path(tmp) / "go"
        if with_getevent:
            kernel_args += ["--wait", str(wait)]
        program = ([sys.executable, "-m", "eventspace.mpi", "--name", name] if monitored else [sys.executable])
        bound = ranks > CORES and not args.no_bind
        cmd = [*MPIEXEC[bound], "-n", str(ranks), *program, str(HERE), *kernel_args]
        env = os.environ | {"EVENTSPACE_RUN_DIR": str(Path(tmp) / "runs")}   # the run's name is its own
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env=env)
        monitor = None
        try:
            if with_getevent:
                run_file = Path(tmp) / "runs" / f"{name}.json"
                deadline = time.monotonic() + 120
                while not run_file.exists():
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"{' '.join(cmd)}: no run file {run_file} "
                                           f"({'ended' if proc.poll() is not None else 'after 120 s'})")
                    time.sleep(0.1)
                monitor = subprocess.Popen(
                    [sys.executable, "-m", "eventspace.cli", "monitor", "getevent", "--run", name, "--interval", "0",
                     "--out", str(Path(tmp) / "events.sqlite")], cwd=tmp, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
                time.sleep(3)   # attached and pulling (its first pulls read the start-up backlog)
                wait.touch()
            out, err = proc.communicate(timeout=900)
        finally:
            for p in (proc, monitor):
                if p is not None and p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.communicate()
        if monitor is not None:
            monitor.wait(timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    return result_of(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--wait", help=argparse.SUPPRESS)
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per kernel, best kept (default 5)")
    parser.add_argument("--quick", action="store_true", help="a fifth of the iterations")
    parser.add_argument("--no-bind", action="store_true",
                        help="leave the ranks' placement on cores to the scheduler also where there are more ranks "
                             "than cores (default: bind them, round robin)")
    parser.add_argument("--pairs", type=int, default=1,
                        help="A B B A this many times (each job's own memory layout moves large-message "
                             "latency by a few percent: more jobs per arm, a steadier median; default 1)")
    args = parser.parse_args()
    if args.kernel:
        kernel(args)
        return 0
    for bound in (False, True):
        MPIEXEC[bound] = mpiexec("pip install 'eventspace[mpi]'", bind=bound)
    figures: list[Figure] = []
    targets = {}
    wall_only = lambda name: (not name.endswith("(CPU)") or "PROC_NULL" in name or "Python" in name  # noqa: E731
                              or "alone" in name)
    for ranks in (2, 4):
        plain, monitored = [], []
        for i, is_monitored in enumerate((False, True, True, False) * args.pairs):   # A B B A, --pairs times
            result = job(ranks, is_monitored, args, f"mpibench-{ranks}-{i}")
            (monitored if is_monitored else plain).append(result)
        watched = job(ranks, True, args, f"mpibench-{ranks}-getevent", with_getevent=True)
        for name in filter(wall_only, plain[0]):
            a = Figure(f"{name}: plain", [p[name] for p in plain])
            b = Figure(f"{name}: monitored", [m[name] for m in monitored], peer=a.name)
            c = Figure(f"{name}: monitored + getevent", [watched[name]], peer=a.name)
            figures += [a, b, c]
            if "PROC_NULL" in name:
                cost = difference(f"collector cost per MPI call ({name}, {ranks} ranks)", b, a)
                figures.append(cost)
                if name.startswith("Send"):
                    targets[cost.name] = ("<= 1 µs", lambda f, r: f.median <= 1e-6)
                if name.startswith("Put"):
                    targets[cost.name] = ("<= 0.5 µs", lambda f, r: f.median <= 0.5e-6)
            if name == "latency 0 B":
                targets[b.name] = ("<= 1.25x plain", lambda f, r: r is not None and r <= 1.25)
            if name.startswith("latency") and any(name.endswith(s) for s in ("64 KiB", "256 KiB", "1 MiB")):
                targets[b.name] = ("<= 1.02x plain", lambda f, r: r is not None and r <= 1.02)
            if name == "allreduce 8 B, 4 ranks":
                targets[b.name] = ("<= 1.15x plain", lambda f, r: r is not None and r <= 1.15)
            if name.startswith("Iallreduce+Wait alone"):
                cost = difference(f"collector cost per MPI call ({name}, {ranks} ranks)", b, a)
                figures.append(cost)
                targets[cost.name] = ("<= 0.5 µs", lambda f, r: f.median <= 0.5e-6)
            if name.startswith(("iallreduce 8 B", "Put + Fence 8 B", "Accumulate 8 B")):
                targets[b.name] = ("<= 1.25x plain", lambda f, r: r is not None and r <= 1.25)
            if name.startswith(("iallreduce 64 KiB", "Put + Fence 64 KiB", "Put + Fence 1 MiB")):
                targets[b.name] = ("<= 1.05x plain", lambda f, r: r is not None and r <= 1.05)
    report(f"MPI collectors: plain vs monitored (A B B A{' x ' + str(args.pairs) if args.pairs > 1 else ''}) vs monitored + getevent "
           "at full rate", figures, targets,
           "mpi_bench.json", extra={"reps": args.reps, "quick": args.quick, "pairs": args.pairs, "window": WINDOW,
                  "bound": "more ranks than cores" if not args.no_bind else "never",
                  "launcher": MPIEXEC[False]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
