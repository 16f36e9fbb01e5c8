"""Wind-tunnel slowdown from event collectors alone: time per step instrumented against uninstrumented, per size.

Run: `python benchmarks/windtunnel_bench.py [--sizes small,medium,large] [--steps 30,6,3] [--repeat 3]
[--pathmap P] [--quick]`.

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
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import Figure, difference, interleave, report

from apps.windtunnel.lattice import SIZES
from eventspace.catalogue import TRACE_PREFIX, Catalogue
from paths import Instrument, Pathmap, launch

ROOT = Path(__file__).resolve().parent.parent
PAPER = ROOT / "pathmaps" / "windtunnel-paper.yaml"
DEFAULT_STEPS = {"small": 30, "medium": 10, "large": 4}
TARGET = {"small": 1.04, "medium": 1.02, "large": 1.02}


def per_step(run, size: str, steps: int) -> tuple[float, bytes]:
    """(seconds per step of the slowest thread, the final grid's row digests in thread order).

    `size` is a size name or a number of rows N."""
    results = run.run("windtunnel", {"size": size, "steps": steps}, timeout=3600)
    ordered = sorted(results.values(), key=lambda r: r["index"])
    made = min(r["steps"] for r in ordered)
    return max(r["seconds"] for r in ordered) / made, b"".join(r["digests"] for r in ordered)


def records_written(run, pm: Pathmap) -> int:
    """How many trace tuples every collector of the run has written so far."""
    return sum(info.last for node in pm.nodes for info in run.client(node.name).elements()
               if info.name.startswith(TRACE_PREFIX))


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
    parser.add_argument("--repeat", type=int, default=3, help="instrumented/uninstrumented pairs per size")
    parser.add_argument("--pathmap", default=str(PAPER))
    parser.add_argument("--quick", action="store_true", help="small only, 10 steps, 2 pairs")
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
        steps = [DEFAULT_STEPS.get(s, 10) for s in sizes]
    repeat = 2 if args.quick else args.repeat

    instrumented = Pathmap.load(args.pathmap)
    plain = dataclasses.replace(instrumented, name=f"{instrumented.name}-uninstrumented",
                                instrument=Instrument()).validate()
    collectors = len(Catalogue(instrumented))
    figures, targets, ratios, records = [], {}, {}, {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as run_dir, \
            launch(instrumented, run_dir=run_dir, start_timeout=300) as run_a, \
            launch(plain, run_dir=run_dir, start_timeout=300) as run_b:
        tiny = max(4, len(plain.threads) + len(plain.threads) % 2)
        for run in (run_a, run_b):
            per_step(run, tiny, 2)  # warm up: connections between nodes, worker threads
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


if __name__ == "__main__":
    main()
