"""Bytes that reach the monitor per pull: equivalence classes (MRNet) against a flat gather of the same view.

Run: `python benchmarks/classes_bench.py [--pathmap P] [--pulls 8] [--interval 1.0] [--size small]`.

The wind tunnel runs on the pathmap (default pathmaps/windtunnel-paper.yaml: 140 threads on 8
nodes, 1 841 collectors) while two scopes over the same view (`all`) pull in turn, every
`--interval` seconds: a flat gather in the monitor, and `classes:ops@thread` on a per-node tree
whose joins run in the node servers (near), so that only one representative per class and its
member list leave each node. Both in `stream` mode (each pull brings the interval's events) and,
separately, in `latest` mode (the newest event of every trace element). The figure is the bytes
the monitor received per pull (EventScope.stats().bytes_in), classes over flat.

Target: classes ≤ 1/10 of the flat gather's bytes at 140 threads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import RESULTS, machine

from eventspace.classes import decode
from eventspace.scope import EventScope
from paths import Pathmap, launch

ROOT = Path(__file__).resolve().parent.parent
PAPER = ROOT / "pathmaps" / "windtunnel-paper.yaml"
STAGE = "classes:ops@thread"


def measure(run, mode: str, pulls: int, interval: float) -> dict:
    """Bytes per pull of both scopes, pulled in turn (flat, classes, flat, ...), and the classes seen."""
    flat = EventScope(run, "all", mode=mode, tree="flat", placement="monitor", timeout=30, name="flat")
    classes = EventScope(run, "all", mode=mode, tree="per-node", placement="near", stages=[STAGE], timeout=30,
                         name="classes")
    sizes = {"flat": [], "classes": []}
    counts = []
    try:
        for scope in (flat, classes):   # streams start with the rings' backlog: not an interval's worth
            scope.pull()
        for _ in range(pulls):
            time.sleep(interval)
            for name, scope in (("flat", flat), ("classes", classes)):
                before = scope.stats().bytes_in
                pulled = scope.pull()
                if pulled.missing:
                    raise SystemExit(f"{name}: nodes {sorted(pulled.missing)} did not answer")
                sizes[name].append(scope.stats().bytes_in - before)
                if name == "classes":
                    counts.append([len(c.members) for c in decode(pulled.records, scope.catalogue, "ops", "thread")])
    finally:
        flat.close()
        classes.close()
    ratio = statistics.median(c / f for c, f in zip(sizes["classes"], sizes["flat"]))
    return {"mode": mode, "flat_bytes_per_pull": statistics.median(sizes["flat"]),
            "classes_bytes_per_pull": statistics.median(sizes["classes"]), "ratio": ratio,
            "flat_bytes": sizes["flat"], "classes_bytes": sizes["classes"], "class_sizes": counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pathmap", default=str(PAPER))
    parser.add_argument("--pulls", type=int, default=8, help="pulls of each scope per mode (default %(default)s)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between pulls (default %(default)s)")
    parser.add_argument("--size", default="small", help="the wind tunnel's size (default %(default)s)")
    args = parser.parse_args()
    pm = Pathmap.load(args.pathmap)
    seconds = 60 + 2 * args.pulls * (args.interval + 2)
    with tempfile.TemporaryDirectory() as run_dir, launch(pm, run_dir=run_dir, start_timeout=300) as run:
        run.start("windtunnel", {"size": args.size, "steps": 10_000_000, "until": time.time() + seconds})
        time.sleep(3)
        rows = [measure(run, mode, args.pulls, args.interval) for mode in ("stream", "latest")]
        run.wait(timeout=seconds + 120)

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"bytes per pull reaching the monitor, {pm.name}: {len(pm.threads)} threads, "
                        f"{len(pm.nodes)} nodes (load {machine()['load'][0]})")
    for column in ("mode", "flat gather (monitor)", f"{STAGE} (per-node, near)", "classes / flat", "classes seen",
                   "target ≤ 1/10"):
        table.add_column(column, justify="left" if column in ("mode", "classes seen") else "right")
    for row in rows:
        sizes = row["class_sizes"][-1] if row["class_sizes"] else []
        table.add_row(row["mode"], f"{row['flat_bytes_per_pull']:,.0f}", f"{row['classes_bytes_per_pull']:,.0f}",
                      f"1/{1 / row['ratio']:,.0f}" if row["ratio"] else "0", f"{len(sizes)} ({', '.join(map(str, sizes))})",
                      "yes" if row["ratio"] <= 0.1 else "NO")
    Console(width=180).print(table)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "classes_bench.json"
    out.write_text(json.dumps({"title": "classes vs flat gather, bytes per pull", "machine": machine(),
                               "pathmap": pm.name, "threads": len(pm.threads), "nodes": len(pm.nodes),
                               "settings": vars(args), "rows": rows}, indent=2))
    print(f"results written to {out}")


if __name__ == "__main__":
    main()
