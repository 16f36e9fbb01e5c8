"""The experiments: the EventSpace paper's section 6, rerun on this implementation, and extended."""

from __future__ import annotations

import dataclasses
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from eventspace.scope import EventScope
from paths import AppMap, ClusterMap, Pathmap, Placement, generate, launch

from .workload import TREE_CONFIGS, Pulling, Scale, alternate, monitored, reshape, step_time, switched, uninstrumented

REPO = Path(__file__).resolve().parents[1]
PATHMAPS = REPO / "pathmaps"

SCALES = {
    # Seconds: a smoke run of every experiment, for tests.
    "tiny": Scale("tiny", "windtunnel-toy.yaml", {"small": 16}, {"small": 4}, 1, (2, 4), 5,
                  {"small": 2}, {"small": 2}),
    # A few minutes: the 16-thread, 4-node layout.
    "quick": Scale("quick", "windtunnel-4node.yaml", {"small": 280, "medium": 560}, {"small": 40, "medium": 15},
                   3, (2, 4, 8, 16), 30, {"small": 24, "medium": 12}, {"small": 10, "medium": 4}),
    # The paper's scale: 140 threads on two clusters of four nodes. The switch comparison's pair
    # ratios scatter by about ±8% on two shared cores: 100 pairs put small's median within ±0.01.
    "full": Scale("full", "windtunnel-paper.yaml", {"small": 280, "medium": 1960, "large": 3920},
                  {"small": 60, "medium": 15, "large": 5}, 3, (2, 4, 8, 16, 32, 64), 50,
                  {"small": 100, "medium": 40, "large": 24}, {"small": 10, "medium": 4, "large": 2}),
}


@dataclass
class Result:
    """One experiment's outcome: a table (columns, rows of plain values), what it ran on, raw data."""

    name: str
    title: str
    columns: list[str]
    rows: list[list]
    meta: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)


def _meta(scale: Scale, **more) -> dict:
    import os
    import platform

    return {"scale": scale.name, "pathmap": scale.pathmap, "cores": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), **more}


def _pathmap(scale: Scale) -> Pathmap:
    return Pathmap.load(PATHMAPS / scale.pathmap)


# -- collect: what collecting alone costs -----------------------------------------------------------

def collect(scale: Scale, sizes=None, run_dir=None, progress=None) -> Result:
    """Wind-tunnel time per step with every path and tree point collected vs with no collector,
    per problem size, two ways: alternating runs on two live layouts, one with collectors and one
    without (the paper's comparison: median slowdown and spread), and the collected layout alone
    with its collectors switched on and off at run time between the runs of many short pairs (the
    figure to quote: only the recording differs; the median of the pair ratios and their
    quartiles)."""
    pm = _pathmap(scale)
    plain = dataclasses.replace(uninstrumented(pm), name=f"{pm.name}-plain")
    rows, raw = [], {}
    chosen = {k: v for k, v in scale.sizes.items() if sizes is None or k in sizes}
    with launch(pm, run_dir=run_dir) as instrumented, launch(plain, run_dir=run_dir) as bare:
        for size, n in chosen.items():
            steps = scale.steps[size]
            result = alternate(scale.repeats, lambda: step_time(bare, n, steps), lambda: step_time(instrumented, n, steps))
            on_off = switched(instrumented, pm, scale.switch_pairs[size], n, scale.switch_steps[size])
            raw[size] = {**result.as_dict(), "switched": on_off.as_dict()}
            low, high = on_off.quartiles
            rows.append([size, n, len(pm.collector_points()), _ms(result.baseline), _ms(result.treated),
                         round(result.slowdown, 3), f"±{result.spread:.1%}", round(on_off.pair_median, 3),
                         f"{low:.3f}–{high:.3f} ({len(on_off.treated)} pairs)"])
            if progress:
                progress()
    return Result("collect", "Application slowdown from collectors alone",
                  ["size", "N", "collectors", "plain ms/step", "collected ms/step", "slowdown", "spread",
                   "switched on/off", "quartiles"],
                  rows, _meta(scale, threads=len(pm.threads), nodes=len(pm.nodes)), raw)


# -- scopes: observe rate and slowdown per view size -------------------------------------------------

VIEWS = (("one collector", "collector:1"), ("one thread", "thread:T0"), ("one node", "node:A"), ("everything", "all"))


def scopes(scale: Scale, sizes=None, run_dir=None, progress=None, tree="flat", placement="monitor") -> Result:
    """GetEventMon-style gather scopes (latest mode) over a single trace element, a thread, a node
    and everything, pulling back to back during measured runs: observe rate, and the slowdown
    against unmonitored runs alternating with them."""
    pm = _pathmap(scale)
    chosen = _scope_sizes(scale, sizes)
    rows, raw = [], {}
    with launch(pm, run_dir=run_dir) as run:
        for size, n in chosen.items():
            steps = scale.steps[size]
            for label, view in VIEWS:
                rates: list[float] = []
                elements = 0

                def make_pull(view=view):
                    nonlocal elements
                    scope = EventScope(run, view, mode="latest", tree=tree, placement=placement)
                    elements = len(scope.entries)
                    return scope.pull, scope.close

                result = alternate(scale.repeats, lambda: step_time(run, n, steps),
                                   monitored(run, n, steps, make_pull, rates))
                raw[f"{size}/{view}"] = {**result.as_dict(), "observe_rates": rates}
                rows.append([size, label, elements, round(statistics.median(rates)), round(result.slowdown, 3),
                             f"±{result.spread:.1%}"])
                if progress:
                    progress()
    return Result("scopes", f"Observe rate and slowdown per view size ({tree}/{placement} gather, latest mode)",
                  ["size", "view", "trace elements", "observe Hz", "slowdown", "spread"], rows,
                  _meta(scale, tree=tree, placement=placement), raw)


# -- reconfigure: one view, many tree configurations ----------------------------------------------------

CONFIGS = tuple((label, TREE_CONFIGS[label]) for label in (
    "flat/monitor", "kary:2/near", "per-node/near", "per-node/near sequential", "per-node/near max 20 Hz",
    "per-cluster/near", "per-node/monitor"))


def reconfigure(scale: Scale, sizes=None, run_dir=None, progress=None) -> Result:
    """The everything view under several gather trees (shape, placement, concurrency, rate cap):
    each configuration's observe rate against the application's slowdown: the trade-off a
    monitor chooses from, and can change while the application runs."""
    pm = _pathmap(scale)
    size = next(iter(sizes or ["small"]))
    n, steps = scale.sizes[size], scale.steps[size]
    rows, raw = [], {}
    with launch(pm, run_dir=run_dir) as run:
        scope = EventScope(run, "all", mode="latest")
        try:
            for label, config in CONFIGS:
                rates: list[float] = []

                def make_pull(config=config):
                    reshape(scope, config)   # one scope, reshaped each time
                    return scope.pull, lambda: None

                result = alternate(scale.repeats, lambda: step_time(run, n, steps),
                                   monitored(run, n, steps, make_pull, rates))
                settings = scope.settings   # what was pulled with, as the label says
                raw[label] = {**result.as_dict(), "observe_rates": rates,
                              "settings": {"tree": settings.shape, "placement": settings.placement,
                                           "concurrency": settings.concurrency, "max_rate": settings.max_rate}}
                rows.append([label, len(scope.entries), round(statistics.median(rates)), round(result.slowdown, 3),
                             f"±{result.spread:.1%}"])
                if progress:
                    progress()
        finally:
            scope.close()
    return Result("reconfigure", f"Observe rate vs slowdown for one view under different trees ({size})",
                  ["tree", "trace elements", "observe Hz", "slowdown", "spread"], rows, _meta(scale, size=size), raw)


# -- monitors: several monitors at once ------------------------------------------------------------------

def monitors(scale: Scale, sizes=None, run_dir=None, progress=None) -> Result:
    """Heartbeat, getevent, colop and an archive consumer, each alone and all at once, each pulling
    back to back: the slowdown of each set (the paper: together about the worst one alone)."""
    from monitors.colop import ColOpMon
    from monitors.getevent import GetEventMon
    from monitors.heartbeat import Heartbeat

    pm = _pathmap(scale)
    size = next(iter(sizes or ["small"]))
    n, steps = scale.sizes[size], scale.steps[size]
    folder = Path(tempfile.mkdtemp(prefix="eventspace-experiment-"))

    def heartbeat(run):
        m = Heartbeat(run)
        return m.read, m.close

    def getevent(run):
        m = GetEventMon(run, "all", sync_clocks=False)
        return m.read, m.close

    def colop(run):
        m = ColOpMon(run, sync_clocks=False)
        return m.read, m.close

    def archive(run):
        m = GetEventMon(run, "all", folder / f"archive-{time.monotonic_ns()}.sqlite", sync_clocks=False)
        return m.read, m.close

    makers = {"heartbeat": heartbeat, "getevent": getevent, "colop": colop, "archive": archive}
    sets = [[name] for name in makers] + [list(makers)]
    rows, raw = [], {}
    with launch(pm, run_dir=run_dir) as run:
        for chosen in sets:
            rates: dict[str, list[float]] = {name: [] for name in chosen}

            def treated(chosen=chosen, rates=rates):
                opened = [makers[name](run) for name in chosen]
                pullers = [Pulling(pull) for pull, _ in opened]
                try:
                    for p in pullers:
                        p.__enter__()
                    for p in pullers:
                        p.warm()
                    seconds = step_time(run, n, steps)
                finally:
                    for p in pullers:
                        p.__exit__(None, None, None)
                    for _, close in opened:
                        close()
                for name, p in zip(chosen, pullers):
                    p.check()
                    rates[name].append(p.rate)
                return seconds

            result = alternate(scale.repeats, lambda: step_time(run, n, steps), treated)
            label = " + ".join(chosen) if len(chosen) < len(makers) else "all four at once"
            raw[label] = {**result.as_dict(), "pull_rates": rates}
            rows.append([label, ", ".join(f"{k} {statistics.median(v):,.0f} Hz" for k, v in rates.items()),
                         round(result.slowdown, 3), f"±{result.spread:.1%}"])
            if progress:
                progress()
    return Result("monitors", f"Monitors alone and together ({size})", ["monitors", "pull rates", "slowdown", "spread"],
                  rows, _meta(scale, size=size), raw)


# -- trees: MRNet-style reduction micro-benchmark ----------------------------------------------------------

TREE_SHAPES = ("flat", "kary:2", "kary:4", "kary:8")


def trees(scale: Scale, sizes=None, run_dir=None, progress=None) -> Result:
    """Allreduce latency and throughput over flat and k-ary trees for 2..64 participants spread
    over four node processes (the collectives app), in the style of MRNet's micro-benchmarks."""
    from apps.collectives.appmap import app_map
    from apps.collectives.cli import run_collectives

    cluster = ClusterMap.load(PATHMAPS / "inputs" / "cluster-4node-cluster.yaml")
    rows, raw = [], {}
    for participants in scale.participants:
        for shape in TREE_SHAPES:
            if shape != "flat" and int(shape.split(":")[1]) >= participants:
                continue  # the same tree as flat
            pm = generate(app_map(participants), cluster, Placement(rule="block"), shape,
                          name=f"trees-{participants}-{shape.replace(':', '')}")
            summary = run_collectives(pm, rounds=scale.rounds, ops=("allreduce",), run_dir=run_dir)
            stats = summary.ops[0]
            raw[f"{participants}/{shape}"] = {"median_us": stats.median_us, "p95_us": stats.p95_us}
            rows.append([participants, shape, round(stats.median_us), round(stats.p95_us),
                         round(1e6 / stats.median_us) if stats.median_us else 0])
            if progress:
                progress()
    return Result("trees", "Allreduce over flat and k-ary trees (4 node processes)",
                  ["participants", "tree", "latency median µs", "latency p95 µs", "allreduces/s"],
                  rows, _meta(scale, nodes=4, rounds=scale.rounds), raw)


# -- scale: one application over more and more nodes, watched through bigger and bigger views --------------

# Per scale: the wind tunnel's threads, the node counts it is spread over (8 a cluster), the view sizes.
SCALE_RUNS = {"tiny": (16, (1, 2), (100, 200)), "quick": (256, (8, 16), (1000, 4000)),
              "full": (1024, (8, 16, 32, 64), (1000, 4000, 16000))}
SCALE_TREES = (("flat/monitor", dict(tree="flat", placement="monitor")),
               ("per-cluster/near", dict(tree="per-cluster", placement="near")))
SCALE_SECONDS = {"tiny": 0.5, "quick": 2.0, "full": 3.0}   # of pulling, per figure


def scaled(threads: int, nodes: int) -> Pathmap:
    """The wind tunnel's `threads` threads on `nodes` node processes (clusters of 8), every path
    collected at both ends and every tree point (the 64-node layout's instrumentation)."""
    from apps.windtunnel.appmap import app_map
    from paths.instrument import preset

    lines = ["clusters:"]
    for c in range(0, nodes, 8):
        members = ", ".join(f"n{k}: {{host: 127.0.0.1}}" for k in range(c, min(c + 8, nodes)))
        lines.append(f"  c{c // 8}: {{nodes: {{{members}}}}}")
    pm = generate(app_map(threads), ClusterMap.loads("\n".join(lines)), Placement(rule="block"),
                  "per-cluster", name=f"scale-{nodes}node")
    return dataclasses.replace(pm, instrument=preset(pm, "ends")).validate()


def scaling(scale: Scale, sizes=None, run_dir=None, progress=None) -> Result:
    """Observe rate and the monitor's CPU per pull against view size and node count: one wind tunnel
    (its trace elements filled by a short run, then idle) spread over more node processes each time,
    views of the first threads holding about each size, pulled flat in the monitor and per-cluster
    near the data. The ratio column is each figure's rate over the flat monitor's of the same view."""
    from eventspace.catalogue import Catalogue

    threads, node_counts, view_sizes = SCALE_RUNS[scale.name]
    seconds = SCALE_SECONDS[scale.name]
    rows, raw = [], {}
    for nodes in node_counts:
        pm = scaled(threads, nodes)
        catalogue = Catalogue(pm)
        with launch(pm, run_dir=run_dir) as run:
            run.run("windtunnel", {"size": threads + threads % 2, "steps": 3}, timeout=600)
            for size in view_sizes:
                view = _threads_holding(pm, catalogue, size)
                flat_rate = None
                for label, config in SCALE_TREES:
                    with EventScope(run, view, mode="latest", **config) as scope:
                        scope.pull()   # warm: joins placed, names encoded
                        cpu, pulls = _cpu(), 0
                        started = time.monotonic()
                        while time.monotonic() - started < seconds:
                            scope.pull()
                            pulls += 1
                        wall, cpu = time.monotonic() - started, _cpu() - cpu
                        elements = len(scope.entries)
                    rate = pulls / wall
                    flat_rate = flat_rate or rate
                    raw[f"{nodes}/{size}/{label}"] = {"pulls": pulls, "seconds": wall, "cpu_seconds": cpu}
                    rows.append([nodes, elements, label, round(rate), round(1e3 * cpu / pulls, 2),
                                 round(rate / flat_rate, 2)])
                    if progress:
                        progress()
    return Result("scale", f"Observe rate against view size and node count ({threads} threads, latest mode, app idle)",
                  ["nodes", "trace elements", "tree", "observe Hz", "monitor CPU ms/pull", "vs flat"],
                  rows, _meta(scale, threads=threads, pathmap=f"generated: the wind tunnel's {threads} threads on "
                                                             f"{', '.join(map(str, node_counts))} nodes"), raw)


def _threads_holding(pm: Pathmap, catalogue, size: int) -> str:
    """A view of the first threads whose trace elements number at least `size`; `all` where every
    thread's do not (the sinks in front of elements belong to no thread)."""
    from eventspace.view import View

    chosen = []
    for thread in pm.threads:
        chosen.append(thread.name)
        if len(View.parse(f"thread:{','.join(chosen)}").select(catalogue)) >= size:
            return f"thread:{','.join(chosen)}"
    return "all"


def _cpu() -> float:
    """This process's CPU seconds, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def clusters(scale: Scale, sizes=None, run_dir=None, progress=None) -> Result:
    """The reconfigure study on two emulated clusters over a slow link (experiments.clusters)."""
    from .clusters import COLUMNS, TITLE, measure

    rows, raw, ran_on = measure(scale.name, run_dir, progress)
    return Result("clusters", TITLE, COLUMNS, rows, _meta(scale, **ran_on), raw)


EXPERIMENTS = {"collect": collect, "scopes": scopes, "reconfigure": reconfigure, "monitors": monitors, "trees": trees,
               "scale": scaling, "clusters": clusters}


def _ms(seconds: list[float]) -> float:
    return round(statistics.median(seconds) * 1e3, 2)


def _scope_sizes(scale: Scale, sizes) -> dict[str, int]:
    """The scopes experiment's sizes: the paper's small and large, or those asked for."""
    chosen = {k: v for k, v in scale.sizes.items()
              if (k in ("small", "large") if sizes is None else k in sizes)}
    return chosen or dict(list(scale.sizes.items())[:1])


def work(name: str, scale: Scale, sizes=None) -> int:
    """How many progress steps experiment `name` makes (for progress bars)."""
    if name == "clusters":
        from .clusters import CLUSTER_TREES, LINKS, STAGES

        return len(LINKS) * len(STAGES) * len(CLUSTER_TREES)
    chosen = len([s for s in scale.sizes if sizes is None or s in sizes]) or 1
    return {"collect": chosen, "scopes": len(VIEWS) * len(_scope_sizes(scale, sizes)), "reconfigure": len(CONFIGS),
            "monitors": 5, "trees": sum(1 for p in scale.participants for s in TREE_SHAPES
                                         if s == "flat" or int(s.split(':')[1]) < p),
            "scale": len(SCALE_RUNS[scale.name][1]) * len(SCALE_RUNS[scale.name][2]) * len(SCALE_TREES)}[name]
