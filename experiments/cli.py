"""`eventspace experiment NAME|all`: run the experiments, print their tables, write JSON, markdown and figures."""

from __future__ import annotations

import time
from pathlib import Path

NAMES = ("collect", "scopes", "reconfigure", "monitors", "trees", "scale", "clusters")


def register(subparsers) -> None:
    parser = subparsers.add_parser("experiment", help="rerun the paper's experiments (and more): tables and plots")
    parser.add_argument("name", choices=(*NAMES, "all"), help="which experiment, or all of them")
    parser.add_argument("--quick", action="store_true",
                        help="the 16-thread, 4-node layout, two sizes: a few minutes for all")
    parser.add_argument("--tiny", action="store_true",
                        help="one node, four threads, tiny grids, one repetition: a smoke test "
                             "(wins over --quick)")
    parser.add_argument("--sizes", help="comma-separated sizes to run (default: the scale's)")
    parser.add_argument("--out", default="experiment-results", help="folder for the results (default %(default)s)")
    parser.add_argument("--cleanup", action="store_true",
                        help="with clusters: remove what a crashed run left (its namespaces, bridges, relay and "
                             "node processes), then stop")
    parser.set_defaults(func=_run)


def _run(args) -> int:
    from pastset.terminal import console as terminal_console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from . import report
    from .study import EXPERIMENTS, SCALES, work

    scale = SCALES["tiny" if args.tiny else "quick" if args.quick else "full"]
    sizes = [s.strip() for s in args.sizes.split(",")] if args.sizes else None
    if sizes:
        unknown = [s for s in sizes if s not in scale.sizes]
        if unknown:
            raise ValueError(f"unknown size {', '.join(unknown)} at scale {scale.name}; "
                             f"use {', '.join(scale.sizes)}")
    if args.cleanup:
        if args.name != "clusters":
            raise ValueError("--cleanup goes with the clusters experiment: eventspace experiment clusters --cleanup")
        from .network import cleanup

        removed = cleanup()
        print("\n".join(f"removed {thing}" for thing in removed) or "nothing of the clusters experiment was left")
        return 0
    names = NAMES if args.name == "all" else (args.name,)
    if "clusters" in names:
        from .network import unavailable

        problem = unavailable()
        if problem and args.name == "clusters":
            raise RuntimeError(f"the clusters experiment cannot run here: {problem}")
        if problem:
            print(f"skipping experiment clusters: {problem}")
            names = tuple(n for n in names if n != "clusters")
    out = Path(args.out)
    console = terminal_console()
    started = time.monotonic()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        results = []
        for name in names:
            task = progress.add_task(f"experiment {name}", total=work(name, scale, sizes))
            result = EXPERIMENTS[name](scale, sizes=sizes,
                                       progress=lambda task=task: progress.advance(task))
            written = report.write(result, out)
            results.append(result)
            table = Table(title=result.title)
            for column in result.columns:
                table.add_column(column)
            for row in result.rows:
                table.add_row(*(report._cell(v) for v in row))
            progress.console.print(table)
            progress.console.print(f"wrote {', '.join(str(p) for p in written)}")
    report.index(out)
    console.print(f"all done in {time.monotonic() - started:.0f} s; results in {out}/")
    return 0
