"""`eventspace run PROGRAM`: the shipped applications and the user's own `module:function`, with one
set of options, one progress bar, one summary (or `--json`) and one way to fail."""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import entry_points

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .__main__ import add_grace_option
from .execution import Execution, execute, slowest
from .pathmap import Pathmap
from .registry import module_allowed

# Applications add `eventspace run NAME` through this entry-point group: `register(programs)`, with
# `programs` an argparse subparsers object (see apps/windtunnel/cli.py).
RUN_COMMANDS = "eventspace.run"


def register(subparsers) -> None:
    """Add `run PROGRAM [options]` to the `eventspace` command."""
    names = sorted(entry_points(group=RUN_COMMANDS).names)
    run = subparsers.add_parser(
        "run", help="launch a pathmap's nodes and run a program on them",
        description="Launch a pathmap's nodes, run PROGRAM in every thread, show its progress, summarise.",
        epilog=f"PROGRAM is one of {', '.join(names) or '(none installed)'} (`eventspace run NAME --help`), "
               "or MODULE:FUNCTION, your own program (`eventspace run MODULE:FUNCTION --help`).")
    run.add_argument("program", metavar="PROGRAM", help=f"{', '.join(names)}, or MODULE:FUNCTION")
    run.add_argument("options", nargs=argparse.REMAINDER, help="the program's options")
    run.set_defaults(func=_run)


def _run(args) -> int:
    parser = argparse.ArgumentParser(prog="eventspace run")
    programs = parser.add_subparsers(dest="program", metavar="PROGRAM", required=True)
    if ":" in args.program:
        _add_user_program(programs, args.program)
    else:
        for ep in sorted(entry_points(group=RUN_COMMANDS), key=lambda ep: ep.name):
            ep.load()(programs)
    chosen = parser.parse_args([args.program, *args.options])
    return chosen.func(chosen)


def add_run_options(parser, example: str) -> None:
    """The options every `eventspace run` program has: --pathmap, --path, --run-dir, --json, --grace."""
    parser.add_argument("--pathmap", required=True, help=f"the pathmap (YAML), e.g. {example}")
    parser.add_argument("--path", action="append", default=[], metavar="DIR",
                        help="a directory node processes import from (repeatable; they also import from "
                             "this directory and $PYTHONPATH)")
    parser.add_argument("--run-dir", help="where the run file goes (default: $EVENTSPACE_RUN_DIR, "
                                          "$XDG_RUNTIME_DIR/eventspace/runs or ~/.eventspace/runs)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object, nothing else")
    add_grace_option(parser)


class ProgressBar:
    """The progress of a run on the terminal (on stderr with --json, and then hidden): `label`, a
    bar, done/total `unit`, elapsed time. `console` is where the summary goes after it."""

    def __init__(self, args, label: str, unit: str, total: int | None = None):
        self.console = Console(stderr=args.json)
        self._progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                                  TimeElapsedColumn(), console=self.console, disable=args.json)
        self._task = self._progress.add_task(unit, total=total)

    def update(self, done: int, total: int | None = None) -> None:
        if total is not None:
            self._progress.update(self._task, total=total)
        self._progress.update(self._task, completed=done)

    def __enter__(self) -> ProgressBar:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)


def print_summary(args, console: Console, data: dict, *renderables) -> int:
    """With --json, `data` as one JSON line on stdout; else the renderables on `console`. Returns 0."""
    if args.json:
        print(json.dumps(data, default=_json_value), file=sys.stdout)
        return 0
    for renderable in renderables:
        console.print(renderable)
    return 0


def _json_value(value):
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


# -- the user's own program ----------------------------------------------------------------------

def _add_user_program(programs, name: str) -> None:
    run = programs.add_parser(
        name, help="your own program: a function of a module in the pathmap's allow_modules",
        description=f"Run {name}(ctx) in every thread of the pathmap. ctx.args holds the --arg and "
                    "--args-json values; ctx.report(step=N) (and steps=TOTAL) drives the progress bar.")
    add_run_options(run, "my-program.yaml")
    run.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                     help="ctx.args[KEY] (repeatable); VALUE is read as JSON when it is valid JSON "
                          "(3, 0.5, true, null, [1, 2], {\"a\": 1}, \"3\"), else it is a string")
    run.add_argument("--args-json", metavar="JSON", help="ctx.args as one JSON object (--arg adds to it)")
    run.set_defaults(func=_run_user_program)


def program_args(args_json: str | None, pairs: list[str]) -> dict:
    """ctx.args from --args-json (a JSON object) and --arg KEY=VALUE pairs (VALUE as JSON when it is
    valid JSON, else as text; a pair wins over --args-json); ValueError naming the bad option."""
    values: dict = {}
    if args_json is not None:
        try:
            values = json.loads(args_json)
        except ValueError as exc:
            raise ValueError(f"--args-json: not JSON ({exc}); write an object, e.g. '{{\"steps\": 10}}'") from None
        if not isinstance(values, dict):
            raise ValueError(f"--args-json: expected a JSON object, got {type(values).__name__}; "
                             "write e.g. '{\"steps\": 10}'")
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--arg {pair!r}: write KEY=VALUE, e.g. --arg steps=10")
        try:
            values[key] = json.loads(text)
        except ValueError:
            values[key] = text
    return values


def _run_user_program(args) -> int:
    module = args.program.partition(":")[0]
    pathmap = Pathmap.load(args.pathmap)
    if not module_allowed(module, pathmap.allow_modules):
        raise ValueError(f"{args.pathmap}: module {module!r} is not in the pathmap's allow_modules; add "
                         f"`allow_modules: [{module}]` (or generate it with --allow-module {module})")
    values = program_args(args.args_json, args.arg)

    with ProgressBar(args, args.program, "steps") as bar:
        def follow(progress):
            totals = [p["steps"] for p in progress.values() if isinstance(p.get("steps"), int)]
            bar.update(slowest(progress), max(totals) if totals else None)

        execution = execute(pathmap, args.program, values, run_dir=args.run_dir, path=args.path,
                            on_progress=follow, grace=args.grace)
    return print_summary(args, bar.console, execution_summary(execution), execution_table(execution))


def execution_summary(execution: Execution) -> dict:
    pm = execution.pathmap
    return {"program": execution.program, "pathmap": pm.name, "run": execution.run,
            "threads": len(execution.results), "nodes": len(pm.nodes), "wall_seconds": execution.wall_seconds,
            "results": {t.name: execution.results[t.name] for t in pm.threads if t.name in execution.results}}


def execution_table(execution: Execution) -> Table:
    """Every thread's result, one row each, in pathmap order."""
    pm = execution.pathmap
    table = Table(title=f"{execution.program} on {pm.name}",
                  caption=f"{len(execution.results)} threads on {len(pm.nodes)} nodes, "
                          f"{execution.wall_seconds:.2f} s")
    for column in ("thread", "node", "result"):
        table.add_column(column)
    for thread in pm.threads:
        if thread.name in execution.results:
            table.add_row(thread.name, thread.node, Text(_short(execution.results[thread.name])))
    return table


def _short(value, width: int = 70) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 1] + "…"
