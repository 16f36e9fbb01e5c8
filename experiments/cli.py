"""`eventspace experiment NAME|all`: run the experiments, print their tables, write JSON, markdown and figures."""

from __future__ import annotations

import time
from pathlib import Path

NAMES = ("collect", "scopes", "reconfigure", "monitors", "trees", "scale")


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
    parser.set_defaults(func=_run)


def _run(args) -> int:
    from rich.console import Console
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
    names = NAMES if args.name == "all" else (args.name,)
    out = Path(args.out)
    console = Console()
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
