"""`eventspace run windtunnel`: launch a pathmap's nodes, run the wind tunnel on them, summarise."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from .lattice import SIZES, digests_sha256
from .picture import picture_from_blocks
from .program import size_n


def register(programs) -> None:
    from paths.runcommand import add_run_options

    run = programs.add_parser("windtunnel", help="the wind tunnel (FHP lattice gas) on a pathmap's nodes")
    add_run_options(run, "pathmaps/windtunnel-4node.yaml")
    run.add_argument("--size", default="small",
                     help=f"{', '.join(f'{k} (N={v})' for k, v in SIZES.items())}, or a number of rows N "
                          "(matrices are N x 2N; default %(default)s)")
    run.add_argument("--steps", type=int, default=100, help="time steps (default %(default)s)")
    run.add_argument("--seed", type=int, default=1, help="the initial state's seed (default %(default)s)")
    run.add_argument("--check-every", type=int, default=10,
                     help="allreduce the particle count every K steps (default %(default)s)")
    run.add_argument("--stall", metavar="THREAD:STEP:SECONDS",
                     help="test hook: THREAD sleeps SECONDS before STEP (to see a monitor catch it)")
    run.set_defaults(func=_run)


@dataclass
class WindtunnelSummary:
    """What a run did: sizes, time, rates, the particle count, and the final grid's hash."""

    pathmap: str
    n: int
    steps: int
    threads: int
    nodes: int
    particles: int
    wall_seconds: float
    steps_per_second: float
    exchanges: int
    exchanges_per_second: float
    exchange_interval_ms: float     # per thread: wall time between its border-row exchanges
    grid_sha256: str
    picture: list[str]


def run_windtunnel(pathmap, size="small", steps=100, seed=1, check_every=10, run_dir=None, stall=None,
                   on_progress=None, duration=None, path=(), grace=None, mpiexec=None, archive=None,
                   record=None) -> WindtunnelSummary:
    """Launch, run, stop; what the run did. Raises paths.NodeDied naming a node that died (or, after
    `grace` seconds, default the pathmap's, did not answer), or paths.ProgramFailed naming the
    thread that failed (a conservation error among them). `on_progress(step)` is called with the
    slowest thread's step while it runs; with `duration` (seconds) the program is told to stop
    that long after the nodes are up (its `until`)."""
    from paths import Pathmap
    from paths.execution import execute, slowest

    pm = pathmap if isinstance(pathmap, Pathmap) else Pathmap.load(pathmap)
    n = size_n(size)
    if n < 4 or n % 2 or n < len(pm.threads):
        raise ValueError(f"size N={n}: N must be even, at least 4 and at least the thread count "
                         f"({len(pm.threads)}), so that every thread has a row")
    args = {"size": n, "steps": steps, "seed": seed, "check_every": check_every}
    if stall:
        args["stall"] = stall

    def started_args():  # the deadline counts from when the nodes are up
        return args if duration is None else {**args, "until": time.time() + duration}

    follow = None if on_progress is None else (lambda progress: on_progress(slowest(progress, "step")))
    execution = execute(pm, "windtunnel", started_args, run_dir=run_dir, path=path, on_progress=follow,
                        grace=grace, mpiexec=mpiexec, archive=archive, record=record)
    results, wall = execution.results, execution.wall_seconds
    ordered = sorted(results.values(), key=lambda r: r["index"])
    exchanges = sum(r["exchanges"] for r in ordered)
    steps = ordered[0]["steps"]
    blocks = [sum((r["blocks"][i] for r in ordered), []) for i in range(3)]
    return WindtunnelSummary(
        pathmap=pm.name, n=n, steps=steps, threads=len(ordered), nodes=len(pm.nodes),
        particles=sum(r["particles"] for r in ordered), wall_seconds=wall,
        steps_per_second=steps / wall if wall else 0.0, exchanges=exchanges,
        exchanges_per_second=exchanges / wall if wall else 0.0,
        exchange_interval_ms=1000 * wall / steps if steps else 0.0,
        grid_sha256=digests_sha256(b"".join(r["digests"] for r in ordered)),
        picture=picture_from_blocks(*blocks, height=min(16, n)),
    )


def _run(args) -> int:
    from rich.panel import Panel
    from rich.table import Table

    from paths.runcommand import ProgressBar, mpiexec_args, print_summary, recording_args

    stall = None
    if args.stall:
        try:
            thread, step, seconds = args.stall.split(":")
            stall = {"thread": thread, "at_step": int(step), "seconds": float(seconds)}
        except ValueError:
            raise ValueError(f"--stall {args.stall!r}: write THREAD:STEP:SECONDS, e.g. T3:20:10") from None
    with ProgressBar(args, "wind tunnel", "steps", total=args.steps) as bar:
        summary = run_windtunnel(args.pathmap, args.size, args.steps, args.seed, args.check_every,
                                 args.run_dir, stall, on_progress=bar.update, path=args.path,
                                 grace=args.grace, mpiexec=mpiexec_args(args), **recording_args(args))
    data = asdict(summary)
    del data["picture"]
    table = Table(title=f"wind tunnel on {summary.pathmap}", show_header=False)
    for label, value in (
        ("grid", f"8 matrices of {summary.n} x {2 * summary.n}"), ("threads / nodes", f"{summary.threads} / {summary.nodes}"),
        ("steps", str(summary.steps)), ("wall time", f"{summary.wall_seconds:.2f} s"),
        ("steps/s", f"{summary.steps_per_second:.1f}"),
        ("exchanges/s", f"{summary.exchanges_per_second:,.0f} ({summary.exchange_interval_ms:.1f} ms between a thread's exchanges)"),
        ("particles", f"{summary.particles:,} (conserved)"), ("grid sha256", summary.grid_sha256[:16] + "…"),
    ):
        table.add_row(label, value)
    picture = Panel("\n".join(summary.picture), title="matrix 0: particle density (# = obstacle, wind →)",
                    expand=False)
    return print_summary(args, bar.console, data, table, picture)
