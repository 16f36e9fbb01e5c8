"""Clock synchronisation at 64 nodes: the direct scheme against MRNet's two-phase tree scheme.

Run (as root, for the emulated clusters): `python benchmarks/clock_bench.py [--nodes 64]
[--delay-ms 5] [--back-ms 10] [--rounds 3] [--loopback]`.

Builds two emulated clusters of network-namespace hosts (experiments.network: a veth and a
bridge inside a cluster, the delay relay between them, `--delay-ms` one way and `--back-ms` the
other: an asymmetric link), and starts `--nodes` node servers on them, half a cluster each, in
pathmap clusters of 8 (the tree scheme's groups), every node's clock shifted by a known offset
drawn from +-50 ms. The monitor sits in cluster 1. Each round synchronises with both schemes,
alternating, and compares every estimate with the offset injected: time to synchronise, median
and largest error, per side of the link. An NTP-style exchange cannot see an asymmetric link:
both schemes should be off by (delay - back) / 2 for the far cluster's nodes. `--loopback` runs
the same nodes on this host's loopback instead (no root needed).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rich.console import Console
from rich.table import Table

from eventspace import clock
from paths import ClusterMap, Placement, generate, launch

SCHEMES = ("direct", "tree")
PORT = 7000
OFFSET_NS = 50_000_000


def layout(nodes: int, hosts: dict[str, str] | None):
    """`nodes` node servers (n0..), 8 to a pathmap cluster, on `hosts` (name -> address) or
    loopback, each clock shifted by an offset from +-50 ms (seeded)."""
    from apps.windtunnel.appmap import app_map

    addresses = list(hosts.values()) if hosts else ["127.0.0.1"] * nodes
    lines = ["clusters:"]
    for c in range(0, nodes, 8):
        members = ", ".join(f"n{k}: {{host: {addresses[k]}, port: {PORT if hosts else 0}}}"
                            for k in range(c, min(c + 8, nodes)))
        lines.append(f"  c{c // 8}: {{nodes: {{{members}}}}}")
    pm = generate(app_map(nodes), ClusterMap.loads("\n".join(lines)), Placement(rule="block"), "flat",
                  name=f"clock-{nodes}node")
    shuffle = random.Random(15)
    offsets = {n.name: shuffle.randint(-OFFSET_NS, OFFSET_NS) for n in pm.nodes}
    pm = dataclasses.replace(pm, nodes=tuple(dataclasses.replace(n, clock_offset_ns=offsets[n.name])
                                             for n in pm.nodes)).validate()
    return pm, offsets


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--delay-ms", type=float, default=5.0, help="one way, cluster 1 to 2 (default %(default)s)")
    parser.add_argument("--back-ms", type=float, default=10.0, help="one way, cluster 2 to 1 (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loopback", action="store_true", help="no namespaces: every node on 127.0.0.1")
    args = parser.parse_args(argv)
    console = Console()
    with contextlib.ExitStack() as stack:
        on_host, far = None, set()
        if args.loopback:
            pm, offsets = layout(args.nodes, None)
        else:
            from experiments.clusters import curve_keys
            from experiments.network import Clusters

            net = stack.enter_context(Clusters(hosts=args.nodes // 2, delay_ms=args.delay_ms, back_ms=args.back_ms,
                                               ports=(PORT,)))
            stack.enter_context(curve_keys())
            hosts = net.namespaces()
            pm, offsets = layout(args.nodes, hosts)
            on_host = {node.name: net.command(ns) for node, ns in zip(pm.nodes, hosts)}
            far = {node.name for node, ns in zip(pm.nodes, hosts) if ns.startswith("evs-c2")}
        started = time.monotonic()
        run = stack.enter_context(launch(pm, on_host=on_host))
        console.print(f"{len(pm.nodes)} nodes serving after {time.monotonic() - started:.1f} s")
        figures = {s: {"seconds": [], "near": [], "far": []} for s in SCHEMES}
        for _ in range(args.rounds):
            for scheme in SCHEMES:
                started = time.monotonic()
                estimates = clock.synchronise(pm, run.endpoints, scheme=scheme, timeout=5.0)
                figures[scheme]["seconds"].append(time.monotonic() - started)
                for node, truth in offsets.items():
                    error = abs(estimates[node].offset_ns - truth) / 1e6
                    figures[scheme]["far" if node in far else "near"].append(error)
    table = Table(title=f"Clock sync of {args.nodes} nodes, offsets +-50 ms injected, "
                        + ("loopback" if args.loopback else
                           f"two clusters, link {args.delay_ms:g} ms there / {args.back_ms:g} ms back")
                        + f"; median of {args.rounds} rounds")
    for column in ("scheme", "seconds to sync", "cluster 1 error ms (median / max)",
                   "cluster 2 error ms (median / max)"):
        table.add_column(column)
    for scheme, f in figures.items():
        far_cell = (f"{statistics.median(f['far']):.3f} / {max(f['far']):.3f}" if f["far"] else "-")
        table.add_row(scheme, f"{statistics.median(f['seconds']):.2f}",
                      f"{statistics.median(f['near']):.3f} / {max(f['near']):.3f}", far_cell)
    console.print(table)
    if not args.loopback:
        console.print(f"an NTP-style exchange is off by (there - back) / 2 = "
                      f"{abs(args.delay_ms - args.back_ms) / 2:g} ms across an asymmetric link")
    return 0


if __name__ == "__main__":
    sys.exit(main())
