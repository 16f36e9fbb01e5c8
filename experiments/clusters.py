"""`experiment clusters`: the paper's two-cluster trade-off, measured over an emulated slow link.

The wind tunnel runs on two clusters of network-namespace hosts (`experiments.network`), its node
servers bound to their hosts' addresses with CURVE on; the monitor sits in cluster 1. For each
link setting (delay only; delay and a rate cap) and each stage (every record; the heartbeat's
newest event per thread), one everything-view scope is reshaped through the reconfigure study's
trees: its observe rate and the application's slowdown during measured runs, and, with the
application idle, its rate and the bytes one pull sends across the link.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import tempfile
import time

from eventspace.scope import EventScope
from paths import ClusterMap, Pathmap, Placement, generate, launch

from .network import PREFIX, Clusters
from .workload import TREE_CONFIGS, alternate, monitored, reshape, step_time

# Per scale: threads, hosts per cluster, wind-tunnel size, steps per measured run, repeats, idle seconds.
CLUSTER_RUNS = {"tiny": (8, 2, 16, 4, 1, 0.5), "quick": (140, 4, 280, 20, 2, 1.5),
                "full": (140, 4, 280, 60, 3, 3.0)}
LINKS = (("5 ms", None), ("5 ms + 20 Mbit/s", "20mbit"))
STAGES = (("every record", ()), ("newest per thread", ("reduce:max_t_end@thread",)))
CLUSTER_TREES = tuple((label, TREE_CONFIGS[label]) for label in (
    "flat/monitor", "per-node/near", "per-cluster/near", "per-node/near sequential", "per-node/near max 20 Hz",
    "flat/monitor, 4 in flight", "per-cluster/near, 4 in flight"))
PORT = 7000   # every host is a namespace of its own: one port for all
DELAY_MS = 5.0


def two_clusters(threads: int, hosts: int, net: Clusters) -> Pathmap:
    """The wind tunnel's `threads` threads, block-placed on the emulated hosts (cluster 1's first),
    joined per cluster, every path and tree point collected."""
    from apps.windtunnel.appmap import app_map
    from paths.instrument import preset

    lines = ["clusters:"]
    for c in (1, 2):
        members = ", ".join(f"{ns.removeprefix(PREFIX)}: {{host: {addr}, port: {PORT}}}"
                            for ns, addr in net.namespaces().items() if ns.startswith(f"{PREFIX}c{c}"))
        lines.append(f"  c{c}: {{nodes: {{{members}}}}}")
    pm = generate(app_map(threads), ClusterMap.loads("\n".join(lines)), Placement(rule="block"), "per-cluster",
                  name=f"clusters-{2 * hosts}host")
    return dataclasses.replace(pm, instrument=preset(pm, "all")).validate()


@contextlib.contextmanager
def curve_keys():
    """A fresh CURVE key directory for the nodes and this process (through $EVENTSPACE_KEYS)."""
    from pastset import security

    with tempfile.TemporaryDirectory(prefix="evs-keys-") as keys:
        security.generate(keys)
        before = os.environ.get(security.KEYS_ENV)
        os.environ[security.KEYS_ENV] = keys
        try:
            yield keys
        finally:
            if before is None:
                os.environ.pop(security.KEYS_ENV, None)
            else:
                os.environ[security.KEYS_ENV] = before


def link_bytes() -> int:
    """Bytes the two gateways have sent so far: everything that crossed the link, both ways."""
    total = 0
    for c in (1, 2):
        out = subprocess.run(["ip", "netns", "exec", f"{PREFIX}gw{c}", "ip", "-j", "-s", "link", "show", "eth0"],
                             capture_output=True, text=True, check=True).stdout
        total += json.loads(out)[0]["stats64"]["tx"]["bytes"]
    return total


TITLE = "Two clusters over an emulated slow link: observe rate and slowdown per tree (all view)"
COLUMNS = ["link", "stage", "tree", "observe Hz", "slowdown", "spread", "idle Hz", "link kB/pull"]


def measure(scale_name: str, run_dir=None, progress=None) -> tuple[list[list], dict, dict]:
    """Observe rate and slowdown of the reconfigure study's trees on two emulated clusters, per
    link setting and stage; with the application idle, the rate and the link's bytes per pull.
    Returns (rows as COLUMNS, raw figures, what it ran on)."""
    threads, hosts, n, steps, repeats, idle = CLUSTER_RUNS[scale_name]
    rows, raw = [], {}
    with Clusters(hosts=hosts, delay_ms=DELAY_MS, ports=(PORT,)) as net, curve_keys():
        pm = two_clusters(threads, hosts, net)
        on_host = {node.name: net.command(PREFIX + node.name) for node in pm.nodes}
        with launch(pm, run_dir=run_dir, on_host=on_host) as run:
            run.run("windtunnel", {"size": n, "steps": 2}, timeout=600)   # every trace element holds events
            round_trips = _round_trips(run)
            for link, rate in LINKS:
                net.set_rate(rate)
                for stage, stages in STAGES:
                    with EventScope(run, "all", mode="latest", stages=stages) as scope:
                        for label, config in CLUSTER_TREES:
                            reshape(scope, config)
                            idle_rate, per_pull = _idle(scope, idle)
                            rates: list[float] = []
                            result = alternate(repeats, lambda: step_time(run, n, steps),
                                               monitored(run, n, steps, lambda: (scope.pull, lambda: None), rates))
                            raw[f"{link}/{stage}/{label}"] = {**result.as_dict(), "observe_rates": rates,
                                                              "idle_rate": idle_rate, "link_bytes_per_pull": per_pull}
                            rows.append([link, stage, label, round(statistics.median(rates)), round(result.slowdown, 3),
                                         f"±{result.spread:.1%}", round(idle_rate), round(per_pull / 1e3, 1)])
                            if progress:
                                progress()
    meta = dict(pathmap=f"generated: the wind tunnel's {threads} threads on 2 clusters of {hosts} namespace hosts",
                size=n, steps=steps, delay_ms=DELAY_MS, round_trip_ms=round_trips,
                trace_elements=len(pm.collector_points()))
    return rows, raw, meta


def _round_trips(run) -> dict[str, float]:
    """The least round trip (ms) from the monitor to a node in each cluster, from clock queries."""
    from eventspace import clock

    estimates = clock.estimate(run.run_file.endpoints)
    out: dict[str, float] = {}
    for node in run.pathmap.nodes:
        out.setdefault(node.cluster, round(estimates[node.name].delay_ns / 1e6, 3))
    return out


def _idle(scope: EventScope, seconds: float) -> tuple[float, float]:
    """Pull back to back for `seconds` with the application idle: pulls per second, link bytes per pull."""
    scope.pull()   # warm: joins placed
    pulls, sent = 0, link_bytes()
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        scope.pull()
        pulls += 1
    wall = time.monotonic() - started
    return pulls / wall, (link_bytes() - sent) / max(pulls, 1)
