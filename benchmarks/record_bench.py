"""Recording at the cost of collecting (#32): mpi4py's own OSU programs plain, monitored, recorded (--archive)
and with a flight recorder (--record last:30s), beside cProfile on every rank (python -m mpiprof), in one run.

Each program runs under every configuration in turn, A B ... B A, `--pairs` times, so that drift of a
shared machine's load hits them alike; a figure is the median of its runs. The programs are mpi4py's
demo/ OSU benchmarks, vendored unmodified in benchmarks/mpi4py_demo (BSD, its license beside them).
"Wall time excluding start-up" is timed inside rank 0 from a Barrier just after `from mpi4py import
MPI` (where a monitored rank has become a node) to a Barrier after the program's end, before the run's
end builds its archive (timed apart: "built in"); bandwidth and latency are what the programs print.
Then: a 4-rank hello world, plain mpiexec against `eventspace mpirun` (the start-up a run adds), and the
wind tunnel on the paper's layout (140 threads, 8 nodes) alone, with getevent streaming into an archive,
and recorded with --archive. Prints a table and writes benchmarks/results/record_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
DEMO = HERE.parent / "mpi4py_demo"
MPIEXEC: list[str] = []   # the launcher and its options (timing.mpiexec), set by main
REPO = HERE.parent.parent
CONFIGS = ("plain", "mpiprof", "monitored", "archive", "record")


def timed(program: str) -> None:
    """Run `program` as `python program` would (its __main__), timed on rank 0 between two Barriers."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    comm.Barrier()
    start = MPI.Wtime()
    sys.argv[:] = [program]
    runpy.run_path(program, run_name="__main__")
    comm.Barrier()
    if comm.Get_rank() == 0:
        print(f"TIMED {MPI.Wtime() - start:.6f}", file=sys.stderr, flush=True)


def command(config: str, program: Path, tmp: Path, ranks: int = 2) -> list[str]:
    """The command line of one run of `program` under `config`."""
    script = [str(HERE), "--timed", str(program)]
    if config == "plain":
        return [*MPIEXEC, "-n", str(ranks), sys.executable, *script]
    if config == "mpiprof":
        return [*MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpiprof", "-o",
                str(tmp / "profile.{rank}.pstats"), *script]
    ours = {"monitored": [], "archive": ["--archive", str(tmp / "run.sqlite")], "record": ["--record", "last:30s"]}
    return [sys.executable, "-m", "eventspace.cli", "mpirun", "-n", str(ranks), "--name", f"bench-{config}",
            *ours[config], *script]


def run_once(config: str, program: Path) -> dict:
    """One run: wall time in all, the program's own time, the sizes and values it printed, and for
    --archive the archive's records, bytes and build time."""
    with tempfile.TemporaryDirectory(prefix="record-bench-") as name:
        tmp = Path(name)
        env = os.environ | {"EVENTSPACE_RUN_DIR": str(tmp / "runs")}
        started = time.perf_counter()
        done = subprocess.run(command(config, program, tmp), cwd=tmp, capture_output=True, text=True, env=env,
                              timeout=900)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{config} {program.name} failed ({done.returncode}): {done.stderr[-2000:]}")
        result = {"wall": wall, "program": float(re.search(r"^TIMED (\S+)", done.stderr, re.M).group(1)),
                  "values": {int(m.group(1)): float(m.group(2))
                             for m in re.finditer(r"^\s*(\d+)\s+([\d.]+)\s*$", done.stdout, re.M)}}
        if config == "archive":
            closing = re.search(r"archive \S+: ([\d,]+) events from .*built in ([\d.]+) s", done.stderr)
            events, built = int(closing.group(1).replace(",", "")), float(closing.group(2))
            import sqlite3

            with sqlite3.connect(tmp / "run.sqlite") as db:
                blocks = db.execute("SELECT coalesce(sum(length(data)), 0) FROM blocks").fetchone()[0]
            result.update(events=events, built=built, archive_bytes=(tmp / "run.sqlite").stat().st_size,
                          block_bytes=blocks)
        return result


def alternate(program: Path, pairs: int, configs=CONFIGS) -> dict[str, list[dict]]:
    """Every configuration's runs of `program`: in order, then in reverse, `pairs` times."""
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    for i in range(pairs):
        for config in (configs if i % 2 == 0 else tuple(reversed(configs))):
            runs[config].append(run_once(config, program))
            print(f"  {program.name} {config}: {runs[config][-1]['wall']:.2f} s", file=sys.stderr, flush=True)
    return runs


def median(runs: list[dict], key) -> float:
    return statistics.median(key(r) for r in runs)


def hello(rounds: int) -> tuple[float, float]:
    """Median wall seconds of a 4-rank hello world: plain mpiexec, then eventspace mpirun (alternating)."""
    plain, ours = [], []
    program = str(DEMO / "helloworld.py")
    with tempfile.TemporaryDirectory(prefix="record-bench-") as tmp:
        env = os.environ | {"EVENTSPACE_RUN_DIR": str(Path(tmp) / "runs")}
        for i in range(rounds):
            for which in (("plain", "ours") if i % 2 == 0 else ("ours", "plain")):
                cmd = ([*MPIEXEC, "-n", "4", sys.executable, program] if which == "plain" else
                       [sys.executable, "-m", "eventspace.cli", "mpirun", "-n", "4", program])
                started = time.perf_counter()
                subprocess.run(cmd, cwd=tmp, capture_output=True, env=env, check=True, timeout=120)
                (plain if which == "plain" else ours).append(time.perf_counter() - started)
    return statistics.median(plain), statistics.median(ours)


def windtunnel(steps: int) -> dict[str, float]:
    """Steps per second of the wind tunnel on the paper's layout: alone, with getevent streaming every
    event into an archive, and recorded with --archive."""
    pathmap = REPO / "pathmaps" / "windtunnel-paper.yaml"
    rates = {}
    with tempfile.TemporaryDirectory(prefix="record-bench-") as name:
        tmp = Path(name)
        env = os.environ | {"EVENTSPACE_RUN_DIR": str(tmp / "runs")}
        base = [sys.executable, "-m", "eventspace.cli", "run", "windtunnel", "--pathmap", str(pathmap), "--size",
                "small", "--steps", str(steps), "--json"]
        for case in ("alone", "getevent to an archive", "--archive", "alone"):
            cmd = base + (["--archive", str(tmp / f"wt-{time.monotonic_ns()}.sqlite")] if case == "--archive" else [])
            run = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                   start_new_session=True)
            monitor = None
            try:
                if case == "getevent to an archive":
                    run_file = tmp / "runs" / "windtunnel-paper.json"
                    deadline = time.monotonic() + 300
                    while not (run_file.exists() and json.loads(run_file.read_text()).get("endpoints")):
                        if run.poll() is not None or time.monotonic() > deadline:
                            raise RuntimeError(f"the wind tunnel did not come up: {run.communicate()[1][-2000:]}")
                        time.sleep(0.2)
                    monitor = subprocess.Popen(
                        [sys.executable, "-m", "eventspace.cli", "monitor", "getevent", "--run", "windtunnel-paper",
                         "--out", str(tmp / f"ge-{time.monotonic_ns()}.sqlite")], cwd=tmp, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, env=env, start_new_session=True)
                out, err = run.communicate(timeout=1800)
            finally:
                for p in (run, monitor):
                    if p is not None and p.poll() is None:
                        os.killpg(p.pid, signal.SIGTERM)
                        p.wait(timeout=60)
            if run.returncode != 0:
                raise RuntimeError(f"wind tunnel ({case}) failed: {err[-2000:]}")
            rates.setdefault(case, []).append(json.loads(out)["steps_per_second"])
    return {case: statistics.median(values) for case, values in rates.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timed", help=argparse.SUPPRESS)
    parser.add_argument("--pairs", type=int, default=2, help="runs of every configuration, in alternating "
                                                             "order (default %(default)s)")
    parser.add_argument("--hello", type=int, default=10, help="4-rank hello worlds of each kind (default %(default)s)")
    parser.add_argument("--steps", type=int, default=300, help="wind tunnel steps (default %(default)s; 0: skip it)")
    args = parser.parse_args()
    if args.timed:
        timed(args.timed)
        return 0
    from timing import RESULTS, load, machine, mpiexec

    MPIEXEC[:] = mpiexec("pip install 'eventspace[mpi,bench]'")

    began = load()[0]
    bibw = alternate(DEMO / "osu_bibw.py", args.pairs)
    bw = alternate(DEMO / "osu_bw.py", args.pairs, ("plain", "monitored", "archive"))
    latency = alternate(DEMO / "osu_latency.py", args.pairs, ("plain", "monitored", "archive"))
    hello_plain, hello_ours = hello(args.hello)
    tunnel = windtunnel(args.steps) if args.steps else {}

    def program(config):
        return median(bibw[config], lambda r: r["program"])

    archived = bibw["archive"]
    events = median(archived, lambda r: r["events"])
    rows = [(f"osu_bibw wall time excluding start-up, {c}", program(c), "s",
             f"{program(c) / program('plain'):.2f}x plain") for c in CONFIGS]
    rows += [(f"osu_bibw wall time in all, {c}", median(bibw[c], lambda r: r["wall"]), "s",
              f"{median(bibw[c], lambda r: r['wall']) / median(bibw['plain'], lambda r: r['wall']):.2f}x plain")
             for c in CONFIGS]
    for runs, size, what, unit in ((bw, 8192, "8 KiB bandwidth (osu_bw)", "MB/s"),
                                   (latency, 0, "0-byte latency (osu_latency)", "us")):
        peer = median(runs["plain"], lambda r, s=size: r["values"][s])
        rows += [(f"{what}, {c}", median(runs[c], lambda r, s=size: r["values"][s]), unit,
                  f"{median(runs[c], lambda r, s=size: r['values'][s]) / peer:.2f}x plain") for c in runs]
    ratios = {
        "archive": program("archive") / program("plain"),
        "record": program("record") / program("monitored"),
        "bandwidth": median(bw["archive"], lambda r: r["values"][8192]) / median(bw["plain"], lambda r: r["values"][8192]),
        "latency": median(latency["archive"], lambda r: r["values"][0]) / median(latency["plain"], lambda r: r["values"][0]),
        "archive bytes": median(archived, lambda r: r["archive_bytes"]) / events,
        "file bytes": median(archived, lambda r: r["block_bytes"]) / events,
        "build": median(archived, lambda r: r["built"]) / events * 1e6,
        "hello": hello_ours - hello_plain,
    }
    targets = [
        ("osu_bibw, --archive, wall time excluding start-up", f"{ratios['archive']:.2f}x plain", "<= 1.15x plain",
         ratios["archive"] <= 1.15),
        ("osu_bibw, --record last:30s", f"{ratios['record']:.2f}x monitored", "<= 1.05x monitored without recording",
         ratios["record"] <= 1.05),
        ("8 KiB bandwidth (osu_bw) with --archive", f"{ratios['bandwidth']:.2f}x plain", ">= 0.85x plain",
         ratios["bandwidth"] >= 0.85),
        ("0-byte latency (osu_latency) with --archive", f"{ratios['latency']:.2f}x plain", "<= 1.3x plain",
         ratios["latency"] <= 1.3),
        ("bytes per event, the final archive", f"{ratios['archive bytes']:.2f}", "<= 16", ratios["archive bytes"] <= 16),
        ("bytes per event, the rank files (their blocks)", f"{ratios['file bytes']:.2f}", "<= 16",
         ratios["file bytes"] <= 16),
        ("building the SQLite archive at the end", f"{ratios['build']:.2f} s per million events", "<= 1 s per million",
         ratios["build"] <= 1),
        ("4-rank hello world, eventspace mpirun over plain mpiexec",
         f"+{ratios['hello']:.2f} s ({hello_ours:.2f} against {hello_plain:.2f})", "+ <= 0.5 s", ratios["hello"] <= 0.5),
    ]
    if tunnel:
        alone = tunnel["alone"]
        for case in ("getevent to an archive", "--archive"):
            targets.append((f"wind tunnel, paper's layout, small: steps/s with {case}",
                            f"{tunnel[case]:.1f} ({tunnel[case] / alone:.2f}x alone, {alone:.1f})", "", None))
    ended = load()[0]
    here = machine()
    title = (f"Recording (#32): {here['cores']} cores, load {began:.2f} at the start and {ended:.2f} at the end, "
             f"{args.pairs} runs of each, osu_bibw {events:,.0f} events")
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("figure", "measured", "target", "met"):
        table.add_column(column)
    for name, value, unit, ratio in rows:
        table.add_row(name, f"{value:.2f} {unit} ({ratio})", "", "")
    for name, value, target, met in targets:
        table.add_row(name, value, target, "" if met is None else ("yes" if met else "NO"))
    Console(width=200).print(table)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "record_bench.json"
    path.write_text(json.dumps({"title": title, "machine": here, "load_at_start": began, "load_at_end": ended,
                                "bibw": bibw, "bw": bw, "latency": latency, "hello": [hello_plain, hello_ours],
                                "windtunnel": tunnel, "ratios": ratios,
                                "targets": [dict(zip(("figure", "measured", "target", "met"), t)) for t in targets]},
                               indent=2, default=str))
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main())
