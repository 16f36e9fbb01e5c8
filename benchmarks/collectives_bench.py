"""Allreduce latency and throughput over PATHS trees, flat against k-ary, in the style of MRNet's micro-benchmarks.

Run: `python benchmarks/collectives_bench.py [--rounds 5] [--quick] [--sizes 2,4,8,16,32,64]`.

For each participant count, one pathmap is generated in code (`paths.generate`): threads
T0..T{n-1} placed in blocks on four node processes, and one allreduce tree over every thread per
shape (flat, kary:2, kary:4, kary:8; the trees share the threads, so one launch serves every
shape). The threads run the collectives app's program (apps/collectives) with allreduce only;
each times every allreduce it takes part in. Shapes alternate within every round of runs, so
that noise hits them alike.

  latency     the median time of one allreduce as its members see it (over members and ops);
              allreduces run one at a time: nobody starts the next before it has the result.
  throughput  allreduces per second back to back: ops / the slowest member's time for all of them.

Target: beyond 16 participants a tree reduce is not slower than the flat one.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import Figure, report

from paths import AppMap, ClusterMap, Pathmap, Placement, generate, launch
from paths.inputs import AppTree

SHAPES = ("flat", "kary:2", "kary:4", "kary:8")
SIZES = (2, 4, 8, 16, 32, 64)
FOUR_NODES = ("clusters: {c1: {nodes: {A: {host: 127.0.0.1}, B: {host: 127.0.0.1}, "
              "C: {host: 127.0.0.1}, D: {host: 127.0.0.1}}}}")
PROGRAM = "collectives"  # apps.collectives.program:thread, by its entry-point name


def tree_name(shape: str) -> str:
    return "ops_" + shape.replace(":", "")


def pathmap(n: int) -> Pathmap:
    """n threads in blocks on four nodes, one allreduce tree over all of them per shape."""
    threads = tuple(f"T{i}" for i in range(n))
    cluster = ClusterMap.loads(FOUR_NODES)
    made = [generate(AppMap(threads, (), (AppTree(tree_name(shape), "allreduce", threads),)), cluster,
                     Placement(rule="block"), shape, name=f"collectives-bench-{n}") for shape in SHAPES]
    # The app has no elements, so every stage of a generated pathmap belongs to its one tree.
    return dataclasses.replace(made[0], trees=tuple(t for pm in made for t in pm.trees),
                               stages=tuple(s for pm in made for s in pm.stages)).validate()


def measure(run, shape: str, ops: int) -> tuple[float, float]:
    """(median seconds of one allreduce, seconds per allreduce back to back) of one run of `ops`."""
    results = run.run(PROGRAM, {"rounds": ops, "ops": ["allreduce"], "tree": tree_name(shape)}, timeout=600)
    per_thread = [r["latency"]["allreduce"] for r in results.values()]
    latency = statistics.median(s for times in per_thread for s in times)
    back_to_back = max(sum(times) for times in per_thread) / ops
    return latency, back_to_back


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs per shape and size (alternating shapes)")
    parser.add_argument("--ops", type=int, default=40, help="allreduces per run")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="participant counts, comma-separated")
    parser.add_argument("--quick", action="store_true", help="sizes 4,16,64, 2 rounds of 15 allreduces")
    args = parser.parse_args()
    sizes = (4, 16, 64) if args.quick else tuple(int(s) for s in args.sizes.split(","))
    rounds, ops = (2, 15) if args.quick else (args.rounds, args.ops)

    figures, targets = [], {}
    for n in sizes:
        latency = {shape: Figure(f"n={n} {shape} latency", peer=None if shape == "flat" else f"n={n} flat latency")
                   for shape in SHAPES}
        rate = {shape: Figure(f"n={n} {shape} back to back",
                              peer=None if shape == "flat" else f"n={n} flat back to back") for shape in SHAPES}
        with tempfile.TemporaryDirectory() as run_dir, launch(pathmap(n), run_dir=run_dir) as run:
            for shape in SHAPES:
                measure(run, shape, 3)  # warm up: connections, worker threads
            for _ in range(rounds):
                for shape in SHAPES:
                    one, b2b = measure(run, shape, ops)
                    latency[shape].rounds.append(one)
                    rate[shape].rounds.append(b2b)
        trees = [latency[s] for s in SHAPES if s != "flat"]
        best = min(trees, key=lambda f: f.median)
        best_row = Figure(f"n={n} BEST tree ({best.name.split()[1]}) latency", best.rounds,
                          peer=f"n={n} flat latency")
        figures += [*latency.values(), *rate.values(), best_row]
        if n > 16:
            targets[best_row.name] = ("≤ 1.0× flat", lambda f, ratio: ratio <= 1.0)
        print(f"n={n}: " + ", ".join(f"{s} {latency[s].median * 1e6:,.0f} µs" for s in SHAPES), flush=True)
    report("Allreduce over PATHS trees, 4 node processes", figures, targets, "collectives_bench.json",
           rate=True, extra={"settings": {"sizes": sizes, "rounds": rounds, "ops": ops, "shapes": SHAPES}})


if __name__ == "__main__":
    main()
