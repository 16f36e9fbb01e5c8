"""`eventspace run collectives`: launch a pathmap's nodes, run rounds of collectives, summarise their latency."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .program import OPS, TREE, check_ops


def register(programs) -> None:
    from paths.runcommand import add_run_options

    run = programs.add_parser("collectives", help="a micro-benchmark of allreduce, barrier and broadcast "
                                                  "over a pathmap's tree")
    add_run_options(run, "pathmaps/collectives-kary.yaml")
    run.add_argument("--rounds", type=int, default=100, help="rounds; each runs every op once (default %(default)s)")
    run.add_argument("--payload", type=int, default=0,
                     help="bytes each allreduce contribution and each broadcast carries (default %(default)s)")
    run.add_argument("--ops", default=",".join(OPS), help="comma-separated, in round order (default %(default)s)")
    run.add_argument("--delay", metavar="THREAD:SECONDS[:EVERY]",
                     help="test hook: THREAD sleeps SECONDS before each op of every EVERY-th round "
                          "(to see a monitor find the late arrival)")
    run.set_defaults(func=_run)


@dataclass
class OpLatency:
    """One op's latency over every thread and round, in microseconds."""

    op: str
    samples: int
    median_us: float
    p95_us: float
    min_us: float
    max_us: float


@dataclass
class CollectivesSummary:
    """What a run measured: the tree, sizes, and each op's latency. `latencies` holds the raw
    samples (thread -> op -> seconds per round); `delayed` the seconds each delayed thread slept."""

    pathmap: str
    tree: str
    shape: str
    threads: int
    nodes: int
    rounds: int
    payload: int
    ops: list[OpLatency]
    wall_seconds: float
    delayed: dict[str, float]
    latencies: dict[str, dict[str, list[float]]]


def run_collectives(pathmap, rounds: int = 100, payload: int = 0, ops=OPS, run_dir=None, delay=None,
                    on_progress=None, path=(), grace=None, mpiexec=None, archive=None,
                    record=None) -> CollectivesSummary:
    """Launch, run `rounds` rounds of `ops` over the pathmap's `ops` tree, stop; what it measured.

    `delay` is the test hook {thread, seconds, every} (see program.thread). Raises ValueError for
    bad arguments before launching anything, paths.NodeDied naming a node that died (or, after
    `grace` seconds, default the pathmap's, did not answer), or
    paths.ProgramFailed naming a thread that failed (a wrong collective result among them).
    `on_progress(round)` is called with the slowest thread's round while it runs.
    """
    from paths import Pathmap
    from paths.execution import execute, slowest

    ops = check_args(rounds, payload, ops)
    pm = pathmap if isinstance(pathmap, Pathmap) else Pathmap.load(pathmap)
    try:
        tree = pm.tree(TREE)
    except KeyError:
        known = ", ".join(t.name for t in pm.trees) or "none"
        raise ValueError(f"pathmap {pm.name} has no tree {TREE!r} (its trees: {known}); generate one with "
                         "`eventspace pathmap generate collectives --threads N ...`") from None
    args = {"rounds": rounds, "payload": payload, "ops": list(ops), "tree": TREE}
    if delay:
        if delay.get("thread") not in tree.members:
            raise ValueError(f"delay: {delay.get('thread')!r} is not a member of tree {TREE} "
                             f"({', '.join(tree.members)})")
        args["delay"] = dict(delay)
    follow = None if on_progress is None else (lambda progress: on_progress(slowest(progress, "round")))
    execution = execute(pm, "collectives", args, run_dir=run_dir, path=path, on_progress=follow, grace=grace,
                        mpiexec=mpiexec, archive=archive, record=record)
    results, wall = execution.results, execution.wall_seconds
    latencies = {t: results[t]["latency"] for t in sorted(results, key=_thread_order(pm))}
    return CollectivesSummary(
        pathmap=pm.name, tree=TREE, shape=tree.shape, threads=len(results), nodes=len(pm.nodes),
        rounds=rounds, payload=payload, ops=[op_latency(o, [s for t in latencies.values() for s in t[o]]) for o in ops],
        wall_seconds=wall, delayed={t: r["delayed"] for t, r in results.items() if r["delayed"]},
        latencies=latencies,
    )


def check_args(rounds: int, payload: int, ops) -> tuple[str, ...]:
    """The ops as a tuple; ValueError, naming the option, for an unknown op, rounds < 1 or payload < 0."""
    if rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {rounds}")
    if payload < 0:
        raise ValueError(f"--payload must be 0 or more bytes, got {payload}")
    try:
        return check_ops(ops)
    except ValueError as exc:
        raise ValueError(f"--ops: {exc}") from None


def op_latency(op: str, seconds: list[float]) -> OpLatency:
    """Median, 95th percentile (linear interpolation), min and max of `seconds`, in microseconds."""
    import numpy as np

    us = np.asarray(seconds, dtype=float) * 1e6
    return OpLatency(op, len(us), float(np.median(us)), float(np.percentile(us, 95)), float(us.min()),
                   float(us.max()))


def _thread_order(pm):
    order = {t.name: i for i, t in enumerate(pm.threads)}
    return lambda name: order.get(name, len(order))


def _parse_delay(text: str | None) -> dict | None:
    if not text:
        return None
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        delay = {"thread": parts[0], "seconds": float(parts[1]), "every": int(parts[2]) if len(parts) == 3 else 1}
    except ValueError:
        raise ValueError(f"--delay {text!r}: write THREAD:SECONDS[:EVERY], e.g. T3:0.05:1") from None
    if delay["seconds"] < 0 or delay["every"] < 1:
        raise ValueError(f"--delay {text!r}: SECONDS must be >= 0 and EVERY >= 1")
    return delay


def _run(args) -> int:
    from paths.runcommand import ProgressBar, mpiexec_args, print_summary, recording_args

    ops = check_args(args.rounds, args.payload, args.ops)
    delay = _parse_delay(args.delay)
    with ProgressBar(args, "collectives", "rounds", total=args.rounds) as bar:
        summary = run_collectives(args.pathmap, args.rounds, args.payload, ops, args.run_dir, delay,
                                  on_progress=bar.update, path=args.path, grace=args.grace,
                                  mpiexec=mpiexec_args(args), **recording_args(args))
    data = asdict(summary)
    del data["latencies"]
    return print_summary(args, bar.console, data, render(summary))


def render(summary: CollectivesSummary):
    """The summary as a rich Table: one row per op, latency in microseconds."""
    from rich.table import Table

    table = Table(title=f"collectives on {summary.pathmap}: {summary.shape} tree",
                  caption=f"{summary.threads} threads, {summary.nodes} nodes, {summary.rounds} rounds, "
                          f"payload {summary.payload} B, {summary.wall_seconds:.2f} s"
                          + (f"; delayed: {', '.join(summary.delayed)}" if summary.delayed else ""))
    table.add_column("op")
    for column in ("samples", "median µs", "p95 µs", "min µs", "max µs"):
        table.add_column(column, justify="right")
    for s in summary.ops:
        table.add_row(s.op, str(s.samples), f"{s.median_us:,.1f}", f"{s.p95_us:,.1f}", f"{s.min_us:,.1f}",
                      f"{s.max_us:,.1f}")
    return table
