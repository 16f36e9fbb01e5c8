"""Wait states: records analysed per second on one core, and the live monitor's CPU per second of a 4-rank halo exchange.

Run: `python benchmarks/waits_bench.py [--steps 20000] [--rounds 5]` (needs the mpi extra).

A 4-rank halo exchange runs under `eventspace mpirun --archive` (this file with `--kernel`: every
step each rank posts Irecvs from both neighbours, Isends to both, waits for all four, and computes
a little, rank 1 a little longer; every 50 steps an Allreduce): 9 records per rank and step. Two
monitors watch it from before its first step to its end, each in its own process: `eventspace
monitor waits` (the wait states, live) and, as the peer, `eventspace monitor getevent` over the
same view with no output (the same scope, pulling the same records, analysing nothing). Their CPU
time (os.wait4's rusage) per second of the run is the figure; waits over getevent says what the
analysis adds to reading the records. The live report must equal `eventspace archive waits` of the
run's archive (checked).

Then the run's archive is analysed again and again in this process (monitors.waitstates.WaitStates,
one core): all of it at once, and in batches of what one 0.2 s pull brought, `--rounds` times
each, interleaved; the figure is records per second (median), beside the rate at which the four
ranks made records (their records over the run's wall time): the analysis's headroom.

Target: >= 1,000,000 records/s analysed (so that a monitor keeps up with the collectors).
Results go to benchmarks/results/waits_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import RESULTS, machine  # noqa: E402

HERE = Path(__file__).resolve()
RANKS = 4
PULL = 0.2   # s: the monitors' interval


def kernel(args) -> None:
    """The halo exchange, on every rank; rank 0 prints the steps' wall time as JSON."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    up, down = (rank - 1) % size, (rank + 1) % size
    mine, above, below = np.zeros(64), np.zeros(64), np.zeros(64)
    work = np.zeros(2000 if rank == 1 else 1000)
    while not os.path.exists(args.go):
        time.sleep(0.02)
    comm.Barrier()
    started = time.perf_counter()
    for step in range(args.steps):
        requests = [comm.Irecv(above, up, 0), comm.Irecv(below, down, 1), comm.Isend(mine, down, 0),
                    comm.Isend(mine, up, 1)]
        MPI.Request.Waitall(requests)
        np.sin(work, out=work)   # the step's computation: rank 1's takes twice as long
        mine[0] = (above[0] + below[0]) / 2 + 1
        if step % 50 == 49:
            comm.Allreduce(MPI.IN_PLACE, mine[:1])
    wall = time.perf_counter() - started
    if rank == 0:
        print(json.dumps({"wall_seconds": wall, "steps": args.steps}), flush=True)


def cpu_of(proc: subprocess.Popen, out: Path, err: Path) -> tuple[float, str]:
    """(user + system CPU seconds, stdout) of a monitor once it has ended."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(proc.args)} failed ({proc.returncode}): {err.read_text()}")
    return usage.ru_utime + usage.ru_stime, out.read_text()


def monitored_run(steps: int, where: Path) -> dict:
    """The halo exchange with both monitors attached; its figures and the two monitors' CPU."""
    from paths import RunError, RunFile

    go, archive, name = where / "go", where / "halo.sqlite", f"halo-{os.getpid()}"
    eventspace = [sys.executable, "-m", "eventspace.cli"]
    job = subprocess.Popen([*eventspace, "mpirun", "-n", str(RANKS), "--name", name, "--archive", str(archive),
                            "--keep", str(16 * steps), str(HERE), "--kernel", "--steps", str(steps), "--go", str(go)],
                           cwd=where, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    monitors = {}
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                RunFile.find(name).check_live()
                break
            except RunError:
                if job.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the halo exchange did not start: {job.communicate()}") from None
                time.sleep(0.1)
        for kind, command in (("waits", ["waits"]), ("getevent", ["getevent", "--view", "all"])):
            # Their output goes to files: a pipe nobody reads would stop a monitor once it is full.
            out, err = where / f"{kind}.out", where / f"{kind}.err"
            with out.open("w") as stdout, err.open("w") as stderr:
                proc = subprocess.Popen([*eventspace, "monitor", *command, "--run", name, "--json", "--interval",
                                         str(PULL)], cwd=where, stdout=stdout, stderr=stderr)
            monitors[kind] = (proc, out, err)
        for proc, out, _ in monitors.values():   # attached (clocks estimated, scope made) and pulled once
            while not out.read_text() and proc.poll() is None:
                time.sleep(0.05)
        go.touch()
        stdout, stderr = job.communicate(timeout=600)
        if job.returncode:
            raise SystemExit(f"the halo exchange failed: {stderr}")
        cpu = {kind: cpu_of(*monitor) for kind, monitor in monitors.items()}
    finally:
        for proc, _, _ in monitors.values():
            if proc.returncode is None and proc.poll() is None:
                proc.kill()
                proc.wait()
        if job.poll() is None:
            job.kill()
            job.communicate()
    lines = [json.loads(line) for line in cpu["waits"][1].splitlines()]
    shown = subprocess.run([*eventspace, "archive", "waits", str(archive), "--json"], cwd=where, capture_output=True,
                           text=True, check=True)
    return {"run": json.loads(stdout.splitlines()[0]), "archive": archive, "cpu": {k: v[0] for k, v in cpu.items()},
            "live": lines[-2], "ended": lines[-1], "archived": json.loads(shown.stdout)}


def analysis_rates(archive: Path, rounds: int, batch: int) -> dict:
    """Records per second of WaitStates over the archive's records: at once, and in `batch`-record
    pulls (each with a report, as the live monitor makes), `rounds` times each, interleaved."""
    from eventspace.archive import Archive
    from monitors.waitstates import ClockBounds, WaitStates

    with Archive.open(archive) as db:
        records, catalogue = db.records(), db.catalogue
    rates = {"at once": [], f"pulls of {batch:,}": []}
    for _ in range(rounds):
        for name in rates:
            states = WaitStates(catalogue, ClockBounds.one_clock(RANKS))
            size = len(records) if name == "at once" else batch
            started = time.process_time()
            for i in range(0, len(records), size):
                states.add(records[i:i + size])
                if name != "at once":
                    states.report()
            states.finish()
            report = states.report()
            rates[name].append(len(records) / (time.process_time() - started))
    return {"records": len(records), "rates": rates, "report": report}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--go", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=20000, help="halo-exchange steps (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="analyses of the archive per way (default %(default)s)")
    args = parser.parse_args()
    if args.kernel:
        kernel(args)
        return
    from rich.console import Console
    from rich.table import Table

    with tempfile.TemporaryDirectory() as where:
        run = monitored_run(args.steps, Path(where))
        wall = run["run"]["wall_seconds"]
        made = run["ended"]["records"]["made"]
        per_pull = max(1, round(made / wall * PULL))
        rates = analysis_rates(run["archive"], args.rounds, per_pull)
    same = run["live"] == run["archived"]
    medians = {name: statistics.median(r) for name, r in rates["rates"].items()}
    made_rate = made / wall
    load = machine()["load"][0]
    table = Table(title=f"wait states of a {RANKS}-rank halo exchange, {args.steps:,} steps in {wall:.1f} s, "
                        f"{made:,} records ({os.cpu_count()} cores, load {load})")
    for column in ("figure", "value", "peer", "peer's value", "ratio", "target", "met"):
        table.add_column(column, justify="left" if column in ("figure", "peer", "target") else "right")
    for name, rate in medians.items():
        table.add_row(f"records analysed per s, {name} (one core)", f"{rate:,.0f}", "records the 4 ranks made per s",
                      f"{made_rate:,.0f}", f"{rate / made_rate:.1f}", ">= 1,000,000 /s",
                      "yes" if rate >= 1e6 else "NO")
    cpu = {k: v / wall for k, v in run["cpu"].items()}
    table.add_row(f"monitor waits: CPU s per s of the run ({PULL} s pulls)", f"{cpu['waits']:.3f}",
                  "monitor getevent, same view", f"{cpu['getevent']:.3f}", f"{cpu['waits'] / cpu['getevent']:.2f}",
                  "", "")
    table.add_row("live report equals the archive's", "yes" if same else "NO", "", "", "", "equal", "yes" if same else "NO")
    Console(width=200).print(table)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "waits_bench.json"
    out.write_text(json.dumps({
        "title": "wait states: analysis rate and live monitor CPU", "machine": machine(), "settings": vars(args),
        "run": run["run"], "records_made": made, "records_made_per_s": made_rate,
        "analysis_records_per_s": rates["rates"], "analysis_median_per_s": medians,
        "monitor_cpu_seconds": run["cpu"], "monitor_cpu_per_run_second": cpu, "live_equals_archive": same,
        "patterns_ns": {p["key"]: p["waiting_ns"] for p in run["live"]["patterns"]}}, indent=2))
    print(f"results written to {out}")


if __name__ == "__main__":
    main()
