"""`eventspace run PROGRAM`: the shipped applications and the user's own `module:function`, with one
set of options, one progress bar, one summary (or `--json`) and one way to fail."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from importlib.metadata import entry_points

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from pastset.terminal import console as terminal_console

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

    up = subparsers.add_parser(
        "launch", help="start a pathmap's nodes and keep them up for monitors (Ctrl-C stops them)",
        description="Start one node server per pathmap node (as local processes, or as MPI ranks with --mpiexec: "
                    "node i is rank i, placed by mpiexec or srun), publish the run file, and keep them up until "
                    "Ctrl-C, SIGTERM or --duration; then stop them all.")
    up.add_argument("pathmap", help="the pathmap (YAML)")
    up.add_argument("--run-dir", help="where the run file goes (default: $EVENTSPACE_RUN_DIR, "
                                      "$XDG_RUNTIME_DIR/eventspace/runs or ~/.eventspace/runs)")
    up.add_argument("--path", action="append", default=[], metavar="DIR",
                    help="a directory node processes import programs from (repeatable)")
    up.add_argument("--duration", type=float, metavar="S", help="stop the nodes after S seconds")
    add_grace_option(up)
    add_mpiexec_option(up)
    up.set_defaults(func=_launch)


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


def _launch(args) -> int:
    import time

    from .launch import NodeDied, launch

    mpiexec = mpiexec_args(args)
    console = terminal_console(stderr=True)
    started = time.monotonic()
    with launch(args.pathmap, run_dir=args.run_dir, path=args.path, grace=args.grace, mpiexec=mpiexec) as run:
        how = " as MPI ranks" if mpiexec is not None else ""
        console.print(f"run {run.name}: {len(run.endpoints)} nodes up{how} in {time.monotonic() - started:.1f} s; "
                      "Ctrl-C stops them")
        deadline = None if args.duration is None else time.monotonic() + args.duration
        try:
            while deadline is None or time.monotonic() < deadline:
                run.check_nodes()
                time.sleep(0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic())))
        except KeyboardInterrupt:
            pass
        except NodeDied as exc:
            console.print(f"eventspace launch: {exc}; stopping the others")
            return 1
        stopping = time.monotonic()
    console.print(f"run {run.name}: stopped its {len(run.endpoints)} nodes in {time.monotonic() - stopping:.1f} s")
    return 0


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
    add_mpiexec_option(parser)


def add_mpiexec_option(parser) -> None:
    """--mpiexec and --mpiexec-args "ARGS": start the nodes as MPI ranks (paths.mpiexec)."""
    parser.add_argument("--mpiexec", action="store_true",
                        help="start the nodes with mpiexec (node i = rank i), so that it places them on its "
                             "hosts; $EVENTSPACE_MPIEXEC names another launcher (e.g. srun)")
    parser.add_argument("--mpiexec-args", metavar='"ARGS"',
                        help='with --mpiexec: mpiexec\'s own arguments, one quoted string, e.g. "-f hosts"')


def mpiexec_args(args) -> list[str] | None:
    """The mpiexec arguments of --mpiexec and --mpiexec-args (None: start nodes as local processes);
    ValueError for --mpiexec-args alone."""
    extra = shlex.split(getattr(args, "mpiexec_args", None) or "")
    if not getattr(args, "mpiexec", False):
        if extra:
            raise ValueError("--mpiexec-args without --mpiexec: add --mpiexec to start the nodes with mpiexec")
        return None
    return extra


class ProgressBar:
    """The progress of a run on the terminal (on stderr with --json, and then hidden): `label`, a
    bar, done/total `unit`, elapsed time. `console` is where the summary goes after it."""

    def __init__(self, args, label: str, unit: str, total: int | None = None):
        self.console = terminal_console(stderr=args.json)
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
                            on_progress=follow, grace=args.grace, mpiexec=mpiexec_args(args))
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
