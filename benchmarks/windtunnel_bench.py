"""Wind-tunnel slowdown from event collectors alone (or from system sampling): time per step with against without, per size.

Run: `python benchmarks/windtunnel_bench.py [--sizes small,medium,large] [--steps 30,6,3] [--repeat 3]
[--pathmap P] [--quick] [--compare collectors|system]`.

Two runs of the same pathmap are launched side by side and stay up: the pathmap as it is (fully
instrumented; pathmaps/windtunnel-paper.yaml has 1841 collectors on 140 threads) and the same
pathmap with an empty instrument section (`dataclasses.replace(pm, instrument=Instrument())`).
For each size they run the wind tunnel in turn, A B B A A B ..., so that drift in the machine's
load hits both alike; a pair's ratio is its instrumented time over its uninstrumented time, and
the slowdown is the median of the pairs' ratios. Time per step is the slowest thread's own
timing of its step loop (launch, set-up and the launcher's polling are not in it). Both runs
must end with the same grid (the instrumentation changes nothing but time).

Targets (issue 17): slowdown <= 1.04 for small (median of >= 6 pairs: `--repeat 6`), <= 1.02 for
medium and large. Node processes run the compiled collector unless EVENTSPACE_PURE=1 is set.

`--compare switch` is the figure to quote for the collectors (issue 37): ONE launch of the
instrumented pathmap, its collectors switched on and off at run time (`eventspace space switch`,
applied within milliseconds) between the runs of each A B B A pair, so that nothing differs between
A and B but the collection: the same processes, the same placement of threads, the same warm caches
(the relaunch comparison above moves by ±0.1 on a 2-core machine from one launch to the next). A
switched-off collector still forwards each operation (one call more than an uninstrumented path):
that part of its cost is in neither side here, and in the relaunch comparison. At least 8 pairs; by
default many short runs a size (small 100 pairs of 10 steps, medium 40 of 4, large 24 of 2; about
5 minutes in all) after one pair left out as warm-up
(`--warmup`), each pair printed with the load average, and the pair ratios' median, quartiles and
range. Beside the time a step takes, the CPU per step of all application threads together (each
thread's own CPU clock; the collectors run in them), collectors on against off: other programs on
the machine move it far less than the step time, which waits for a core whenever one holds it.

`--compare system` measures the system summary sampler instead (eventspace.system: every node
server samples its CPU, memory and communication every 100 ms): both runs are the pathmap without
collectors, sampling switched on in one and off in the other (`eventspace space switch`), the
same A B B A pairs; the check is that only the sampling run wrote system records.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import Figure, difference, interleave, report

from apps.windtunnel.lattice import SIZES
import pastset
from eventspace.catalogue import Catalogue
from eventspace.space import switch_collectors
from experiments.workload import switch_collectors_of
from eventspace.system import COST, INTERVAL
from paths import Instrument, Pathmap, launch

ROOT = Path(__file__).resolve().parent.parent
PAPER = ROOT / "pathmaps" / "windtunnel-paper.yaml"
DEFAULT_STEPS = {"small": 30, "medium": 10, "large": 4}
# --compare switch: short runs, many of them, after one pair left out as warm-up. A pair's ratio
# scatters by about ±8% on two shared cores, so the median of n pairs by about ±0.1/√n: 100 pairs
# of small give ±0.01 (150 pairs, two invocations: 1.017 and 1.023).
SWITCH_STEPS = {"small": 10, "medium": 4, "large": 2}
SWITCH_PAIRS = {"small": 100, "medium": 40, "large": 24}
TARGET = {"small": 1.04, "medium": 1.02, "large": 1.02}


def per_step(run, size: str, steps: int, cpu: bool = False):
    """(seconds per step of the slowest thread, the final grid's row digests in thread order); with
    `cpu`, the CPU seconds per step of all application threads together (where the collectors run)
    after them.

    `size` is a size name or a number of rows N."""
    results = run.run("windtunnel", {"size": size, "steps": steps}, timeout=3600)
    ordered = sorted(results.values(), key=lambda r: r["index"])
    made = min(r["steps"] for r in ordered)
    step, grid = max(r["seconds"] for r in ordered) / made, b"".join(r["digests"] for r in ordered)
    return (step, grid, sum(r["cpu"] for r in ordered) / made) if cpu else (step, grid)


def records_written(run, pm: Pathmap, system: bool = False) -> int:
    """How many trace tuples every collector of the run (with `system`: every node's system
    sampler) has written so far."""
    catalogue = Catalogue(pm)
    names = {e.trace for e in (catalogue.system if system else catalogue.entries)}
    return sum(info.last for node in pm.nodes for info in run.client(node.name).elements() if info.name in names)


def switch_sampling(run, pm: Pathmap, on: bool) -> None:
    """Switch every node's system sampler of `run` on or off."""
    catalogue = Catalogue(pm)
    for node in pm.nodes:
        with pastset.connect(run.endpoints[node.name]) as client:
            switch_collectors(client, on, [catalogue.system_of(node.name).id])


def collector_cost(rounds: int = 7) -> float:
    """Seconds one collector adds to a local move, measured here and now (collector_bench's A/B)."""
    from collector_bench import ab_cases

    cases, _ = ab_cases(20_000)
    chosen = {name: cases[name] for name in ("move, no collector", "move, one collector")}
    figures = interleave(chosen, rounds, batch=200)
    return difference("cost", figures["move, one collector"], figures["move, no collector"]).median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,medium,large",
                        help=f"sizes by name ({', '.join(SIZES)}) or rows N, comma-separated")
    parser.add_argument("--steps", help="steps per run, one number or one per size (default small 30, "
                                        "medium 10, large 4)")
    parser.add_argument("--repeat", type=int, help="instrumented/uninstrumented pairs per size (default 3; "
                                                   "switch: small 100, medium 40, large 24, at least 8)")
    parser.add_argument("--warmup", type=int, default=1, help="switch: pairs run first and left out, per size")
    parser.add_argument("--pathmap", default=str(PAPER))
    parser.add_argument("--quick", action="store_true", help="small only, 10 steps, 2 pairs")
    parser.add_argument("--compare", choices=("collectors", "switch", "system"), default="collectors",
                        help="what run A has and run B has not: collectors (default: two launches), collectors "
                             "switched on against off in one launch (switch), or system sampling")
    args = parser.parse_args()
    sizes = ["small"] if args.quick else [s.strip() for s in args.sizes.split(",") if s.strip()]
    if args.quick:
        steps = [10]
    elif args.steps:
        given = [int(s) for s in args.steps.split(",")]
        steps = given * len(sizes) if len(given) == 1 else given
        if len(steps) != len(sizes):
            parser.error("--steps takes one number, or one per size")
    else:
        steps = [(SWITCH_STEPS if args.compare == "switch" else DEFAULT_STEPS).get(s, 10) for s in sizes]
    repeat = 2 if args.quick else args.repeat or 3

    if args.compare == "system":
        return compare_sampling(Pathmap.load(args.pathmap), sizes, steps, repeat)
    if args.compare == "switch":
        pairs = [8] * len(sizes) if args.quick else [max(args.repeat or SWITCH_PAIRS.get(s, 16), 8) for s in sizes]
        return compare_switched(Pathmap.load(args.pathmap), sizes, steps, pairs, args.warmup)
    instrumented = Pathmap.load(args.pathmap)
    plain = dataclasses.replace(instrumented, name=f"{instrumented.name}-uninstrumented",
                                instrument=Instrument()).validate()
    collectors = len(Catalogue(instrumented))
    figures, targets, ratios, records = [], {}, {}, {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as run_dir, \
            launch(instrumented, run_dir=run_dir, start_timeout=300) as run_a, \
            launch(plain, run_dir=run_dir, start_timeout=300) as run_b:
        for run in (run_a, run_b):
            switch_sampling(run, run.pathmap, False)   # the collectors alone
        warm_up(run_a, run_b)
        for size, count in zip(sizes, steps):
            a = Figure(f"{size}: instrumented ({collectors} collectors)", peer=f"{size}: uninstrumented")
            b = Figure(f"{size}: uninstrumented")
            for i in range(repeat):
                order = ((run_a, a), (run_b, b)) if i % 2 == 0 else ((run_b, b), (run_a, a))
                grids = []
                for run, figure in order:
                    before = records_written(run_a, instrumented) if run is run_a else 0
                    seconds, grid = per_step(run, size, count)
                    if run is run_a:
                        records[size] = (records_written(run_a, instrumented) - before) / count
                    figure.rounds.append(seconds)
                    grids.append(grid)
                if grids[0] != grids[1]:
                    raise SystemExit(f"{size}: the instrumented and uninstrumented runs ended with different grids")
            figures += [b, a]
            limit = TARGET.get(size, 1.02)
            targets[a.name] = (f"slowdown ≤ {limit}", lambda f, ratio, limit=limit: ratio <= limit)
            ratios[size] = a.ratio_rounds(b)
            print(f"{size} ({count} steps): pair ratios " + ", ".join(f"{r:.3f}" for r in ratios[size]), flush=True)
        if not all(records.values()) or records_written(run_b, plain):
            raise SystemExit(f"instrumentation check failed: trace records per step {records} in the "
                             "instrumented run, or some in the uninstrumented one")
    # What the collectors' own work should cost: records per step times one collector's cost,
    # as a share of an uninstrumented step (an upper bound: it assumes no two cores collect at once).
    cost = collector_cost()
    expected = {size: 1 + records[size] * cost / plain_figure.median
                for size, plain_figure in zip(sizes, figures[0::2])}
    for size in sizes:
        print(f"{size}: {records[size]:,.0f} trace records per step × {cost * 1e6:.2f} µs per collector "
              f"(measured now) → expected slowdown ≤ {expected[size]:.3f}")
    from eventspace import compiled

    implementation = "pure" if compiled.collector_module() is None else "compiled"
    report(f"Wind tunnel slowdown from collectors, {instrumented.name}, {implementation} collector", figures, targets, "windtunnel_bench.json",
           unit="ms", extra={"settings": {"sizes": sizes, "steps": steps, "repeat": repeat,
                                          "pathmap": instrumented.name, "collectors": collectors,
                                          "implementation": implementation},
                             "pair_ratios": ratios, "records_per_step": records, "collector_cost_s": cost,
                             "expected_slowdown_bound": expected, "seconds": time.monotonic() - started})


def warm_up(*runs) -> None:
    """A short run of each: connections between nodes, worker threads."""
    for run in runs:
        threads = len(run.pathmap.threads)
        per_step(run, max(4, threads + threads % 2), 2)


def compare_switched(pm: Pathmap, sizes: list[str], steps: list[int], pairs: list[int], warmup: int = 1) -> None:
    """The slowdown from collecting, switched on against off in one launch (see the module's docstring).

    Each size runs `warmup` pairs first, which are printed but left out of its figures (the first
    runs of a size still fault in its lattice's memory and warm the caches), then its `pairs`.
    Beside the time a step takes, the application threads' CPU per step: the same comparison, less
    moved by other programs on the machine."""
    collectors = len(Catalogue(pm))
    figures, targets, ratios, records, cpu_ratios, loads = [], {}, {}, {}, {}, {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as run_dir, launch(pm, run_dir=run_dir, start_timeout=300) as run:
        switch_sampling(run, pm, False)   # the collectors alone
        warm_up(run)
        for size, count, repeat in zip(sizes, steps, pairs):
            on = Figure(f"{size}: collectors on ({collectors})", peer=f"{size}: collectors off")
            off = Figure(f"{size}: collectors off")
            cpu_on = Figure(f"{size}: thread CPU, collectors on", peer=f"{size}: thread CPU, collectors off")
            cpu_off = Figure(f"{size}: thread CPU, collectors off")
            load_before = os.getloadavg()[0]
            for i in range(warmup + repeat):
                order = ((True, on, cpu_on), (False, off, cpu_off)) if i % 2 == 0 else \
                    ((False, off, cpu_off), (True, on, cpu_on))
                grids, pair = [], {}
                for state, figure, cpu_figure in order:
                    switch_collectors_of(run, pm, state)
                    before = records_written(run, pm)
                    seconds, grid, cpu = per_step(run, size, count, cpu=True)
                    pair[state] = (seconds, cpu)
                    written = records_written(run, pm) - before
                    if state:
                        records[size] = written / count
                    elif written:
                        raise SystemExit(f"{size}: {written} records written with the collectors switched off")
                    if i >= warmup:
                        figure.rounds.append(pair[state][0])
                        cpu_figure.rounds.append(pair[state][1])
                    grids.append(grid)
                if grids[0] != grids[1]:
                    raise SystemExit(f"{size}: the runs with collectors on and off ended with different grids")
                print(f"{size} pair {i + 1}{' (warm-up, left out)' if i < warmup else ''}: step "
                      f"{pair[True][0] * 1e3:.2f} / {pair[False][0] * 1e3:.2f} ms = {pair[True][0] / pair[False][0]:.3f}"
                      f", thread CPU {pair[True][1] * 1e3:.2f} / {pair[False][1] * 1e3:.2f} ms = "
                      f"{pair[True][1] / max(pair[False][1], 1e-9):.3f}, load {os.getloadavg()[0]:.1f}", flush=True)
            loads[size] = (load_before, os.getloadavg()[0])
            figures += [off, on, cpu_off, cpu_on]
            limit = TARGET.get(size, 1.02)
            targets[on.name] = (f"slowdown ≤ {limit}", lambda f, ratio, limit=limit: ratio <= limit)
            ratios[size] = on.ratio_rounds(off)
            cpu_ratios[size] = cpu_on.ratio_rounds(cpu_off)
            for name, values in (("step time", ratios[size]), ("thread CPU", cpu_ratios[size])):
                q = statistics.quantiles(values, n=4) if len(values) >= 2 else values * 3
                print(f"{size} ({count} steps, {repeat} pairs, load {loads[size][0]:.1f} → {loads[size][1]:.1f}): "
                      f"{name} on/off median {statistics.median(values):.3f}, quartiles {q[0]:.3f}–{q[2]:.3f}, "
                      f"range {min(values):.3f}–{max(values):.3f}", flush=True)
        switch_collectors_of(run, pm, True)
    cost = collector_cost()
    for size, off_figure in zip(sizes, figures[0::4]):
        print(f"{size}: {records[size]:,.0f} trace records per step × {cost * 1e6:.2f} µs per collector "
              f"(measured now) → expected slowdown ≤ {1 + records[size] * cost / off_figure.median:.3f}")
    report(f"Wind tunnel slowdown from collectors switched on against off, {pm.name}", figures, targets,
           "windtunnel_switch_bench.json", unit="ms",
           extra={"settings": {"sizes": sizes, "steps": steps, "pairs": pairs, "warmup": warmup,
                               "pathmap": pm.name, "collectors": collectors},
                  "pair_ratios": ratios, "cpu_pair_ratios": cpu_ratios, "load": loads,
                  "records_per_step": records, "collector_cost_s": cost,
                  "seconds": time.monotonic() - started})


def compare_sampling(pm: Pathmap, sizes: list[str], steps: list[int], repeat: int) -> None:
    """The slowdown from system sampling (see the module's docstring)."""
    plain = dataclasses.replace(pm, instrument=Instrument()).validate()
    sampled = dataclasses.replace(plain, name=f"{pm.name}-sampled")
    figures, targets, ratios, samples = [], {}, {}, {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as run_dir, \
            launch(sampled, run_dir=run_dir, start_timeout=300) as run_a, \
            launch(plain, run_dir=run_dir, start_timeout=300) as run_b:
        switch_sampling(run_a, sampled, True)
        switch_sampling(run_b, plain, False)
        warm_up(run_a, run_b)
        off = records_written(run_b, plain, True)   # what it wrote before it was switched off
        for size, count in zip(sizes, steps):
            a = Figure(f"{size}: sampling every 100 ms ({len(pm.nodes)} nodes)", peer=f"{size}: no sampling")
            b = Figure(f"{size}: no sampling")
            for i in range(repeat):
                order = ((run_a, a), (run_b, b)) if i % 2 == 0 else ((run_b, b), (run_a, a))
                grids = []
                for run, figure in order:
                    before = records_written(run, run.pathmap, True)
                    seconds, grid = per_step(run, size, count)
                    if run is run_a:
                        samples[size] = records_written(run_a, sampled, True) - before
                    figure.rounds.append(seconds)
                    grids.append(grid)
                if grids[0] != grids[1]:
                    raise SystemExit(f"{size}: the runs with and without sampling ended with different grids")
            figures += [b, a]
            targets[a.name] = "slowdown within noise"
            ratios[size] = a.ratio_rounds(b)
            print(f"{size} ({count} steps): pair ratios " + ", ".join(f"{r:.3f}" for r in ratios[size]), flush=True)
        if not all(samples.values()) or records_written(run_b, plain, True) != off or records_written(run_a, sampled):
            raise SystemExit(f"sampling check failed: system records {samples} in the sampling run, or some in the "
                             "other, or collector records in either")
        costs = {node.name: run_a.client(node.name).call(COST) for node in pm.nodes}
    # What the samplers' own work should cost: their CPU time per second of sampling, as a share of
    # the machine's cores (an upper bound on the slowdown of an application that keeps every core busy).
    per_sample = sum(ns for _, ns in costs.values()) / max(1, sum(n for n, _ in costs.values())) / 1e9
    busy = len(pm.nodes) * per_sample / INTERVAL
    expected = 1 + busy / (os.cpu_count() or 1)
    print(f"a sample took {per_sample * 1e6:.0f} µs of CPU (mean over {len(costs)} nodes); {len(pm.nodes)} nodes "
          f"every {INTERVAL * 1e3:.0f} ms keep {busy:.2%} of a core busy → expected slowdown ≤ {expected:.4f}")
    report(f"Wind tunnel slowdown from system sampling, {pm.name}", figures, targets, "windtunnel_system_bench.json",
           unit="ms", extra={"settings": {"sizes": sizes, "steps": steps, "repeat": repeat, "pathmap": pm.name,
                                          "interval_s": 0.1},
                             "pair_ratios": ratios, "system_records_per_run": samples,
                             "sample_cpu_s": per_sample, "expected_slowdown_bound": expected,
                             "seconds": time.monotonic() - started})


if __name__ == "__main__":
    main()
