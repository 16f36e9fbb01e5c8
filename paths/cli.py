"""The `paths` subcommands of `eventspace`: pathmap validate|show|generate|instrument, node, run, runs."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path as FilePath

from rich.table import Table
from rich.text import Text
from rich.tree import Tree as RichTree

from pastset.terminal import console as terminal_console

from . import runcommand, runfile
from .atomicfile import write_atomically
from .__main__ import add_grace_option
from .document import PathmapError, listing
from .inputs import RULES, AppMap, ClusterMap, Placement
from .instrument import PRESETS, preset
from .pathmap import Pathmap
from .pathmap_yaml import edit_instrument
from .registry import is_module_name
from .sections import DEFAULT_KEEP

# Applications offer their application map for any thread count through this group.
APPMAPS = "eventspace.appmaps"


def register(subparsers) -> None:
    """Add `pathmap validate | show | generate` to the `eventspace` command."""
    pathmap = subparsers.add_parser("pathmap", help="validate, draw and generate pathmaps")
    commands = pathmap.add_subparsers(dest="pathmap_command", metavar="SUBCOMMAND", required=True)

    validate = commands.add_parser("validate", help="check a pathmap; print a summary, or every problem")
    validate.add_argument("file", help="a pathmap (YAML)")
    validate.set_defaults(func=_validate)

    show = commands.add_parser("show", help="draw a pathmap's paths and trees, with the node of each stage")
    show.add_argument("file", help="a pathmap (YAML)")
    only = show.add_mutually_exclusive_group()
    only.add_argument("--tree", metavar="NAME", help="draw only this tree")
    only.add_argument("--thread", metavar="T", help="draw only this thread's paths")
    show.set_defaults(func=_show)

    gen = commands.add_parser("generate", help="build a pathmap from an application map, a cluster "
                                               "map and an application-to-cluster map")
    gen.add_argument("application", nargs="?", metavar="APP",
                     help=f"an application's own map for --threads N ({', '.join(_appmaps()) or 'none installed'}); "
                          "or give --app")
    gen.add_argument("--app", help="application map (YAML)")
    gen.add_argument("--threads", type=int, help="thread count, with APP")
    gen.add_argument("--instrument", default="none", choices=PRESETS,
                     help="collectors to add (default %(default)s): all = every path and tree point")
    gen.add_argument("--cluster", required=True, help="cluster map (YAML)")
    gen.add_argument("--mapping", required=True,
                     help=f"application-to-cluster map (YAML), or a rule alone: {' or '.join(RULES)}")
    gen.add_argument("--tree-shape", default="flat",
                     help="flat, kary:K, knomial:K, per-node or per-cluster (default %(default)s)")
    gen.add_argument("--name", help="the pathmap's name (default: the output file's stem)")
    gen.add_argument("--allow-module", action="append", default=[], metavar="MODULE",
                     help="a module the pathmap may import programs, functions and wrappers from "
                          "(allow_modules; repeatable)")
    gen.add_argument("-o", "--output", required=True, help="the pathmap file to write")
    gen.set_defaults(func=_generate)

    ins = commands.add_parser("instrument", help="add event collectors to a pathmap (edits its instrument section, "
                                                 "keeping everything else, comments included)")
    ins.add_argument("file", help="a pathmap (YAML)")
    which = ins.add_mutually_exclusive_group()
    for choice in PRESETS:
        which.add_argument(f"--{choice}", dest="what", action="store_const", const=choice,
                           help=_INSTRUMENT_HELP[choice] + (" (the default)" if choice == "all" else ""))
    ins.add_argument("--threads", help="only these threads (comma-separated), e.g. T0,T3")
    ins.add_argument("--keep", type=int, help=f"trace element discard threshold (default: as the pathmap says, "
                                               f"else {DEFAULT_KEEP})")
    ins.add_argument("--location", help="where trace elements live: local or a node name (default: as the pathmap "
                                        "says, else local)")
    ins.add_argument("-o", "--output", help="write here (default: rewrite FILE)")
    ins.set_defaults(func=_instrument, what="all")

    node = subparsers.add_parser("node", help="run one node server of a pathmap in the foreground "
                                              "(start one per host with ssh, mpirun or srun)")
    node.add_argument("--pathmap", required=True, help="the pathmap (YAML)")
    node.add_argument("--node", required=True, help="which of its nodes this process is")
    node.add_argument("--bind", help="endpoint to bind (default: the node's host and port in the pathmap)")
    node.add_argument("--insecure", action="store_true",
                      help="allow a non-loopback address without CURVE (keys: the pathmap's "
                           "security section, or $EVENTSPACE_KEYS)")
    node.add_argument("--path", action="append", default=[], metavar="DIR",
                      help="a directory to import programs from (repeatable; the node also imports from "
                           "its working directory and $PYTHONPATH)")
    add_grace_option(node)
    node.set_defaults(func=_node)

    runcommand.register(subparsers)

    runs = subparsers.add_parser("runs", help="list the live runs (and remove the run files of runs whose "
                                              "launcher is gone)")
    runs.add_argument("--run-dir", help="the run files' directory (default: $EVENTSPACE_RUN_DIR, "
                                        "$XDG_RUNTIME_DIR/eventspace/runs or ~/.eventspace/runs)")
    runs.add_argument("--json", action="store_true", help="print the runs as one JSON array")
    runs.set_defaults(func=_runs)


def _validate(args) -> int:
    try:
        pathmap = Pathmap.load(args.file)
    except PathmapError as exc:
        for line in exc.lines():
            print(line)
        count = len(exc.problems)
        print(f"{count} problem{'s' if count != 1 else ''} in {args.file}")
        return 1
    console = terminal_console(highlight=False)
    totals = ", ".join(f"{what} {n}" for what, n in pathmap.summary().items())
    console.print(f"ok: {args.file} ({pathmap.name}): {totals}", soft_wrap=True)
    if pathmap.security.keys is not None:
        console.print(f"security: CURVE with the keys in {pathmap.security.keys}", soft_wrap=True)
    console.print(_node_table(pathmap))
    return 0


def _node_table(pathmap: Pathmap) -> Table:
    table = Table(title=f"pathmap {pathmap.name}: per node")
    for column in ("node", "cluster", "endpoint"):
        table.add_column(column)
    for column in ("threads", "elements", "stages"):
        table.add_column(column, justify="right")
    for node in pathmap.nodes:
        endpoint = f"{node.host}:{node.port if node.port else 'free port'}"
        table.add_row(node.name, node.cluster, endpoint, str(len(pathmap.threads_on(node.name))),
                      str(len(pathmap.elements_on(node.name))), str(len(pathmap.stages_on(node.name))))
    return table


def _show(args) -> int:
    pathmap = Pathmap.load(args.file)
    if args.tree:
        drawing = _draw_tree(pathmap, args.tree)
    elif args.thread:
        drawing = _draw_thread(pathmap, args.thread)
    else:
        drawing = RichTree(Text(f"pathmap {pathmap.name} ({pathmap.source})", style="bold"))
        for thread in pathmap.threads:
            drawing.children.append(_draw_thread(pathmap, thread.name))
        for tree in pathmap.trees:
            drawing.children.append(_draw_tree(pathmap, tree.name))
    terminal_console(highlight=False).print(drawing)
    return 0


def _stage_label(pathmap: Pathmap, stage_id: str, marks: tuple[str, ...] = ()) -> Text:
    stage = pathmap.stage(stage_id)
    extra = ", ".join(f"{k}={v}" for k, v in stage.params.items() if k != "element")
    return Text.assemble((stage_id, "bold"), f"  {stage.type} @ {stage.node}",
                         (f"  {extra}" if extra else "", "dim"),
                         (f"  ● {', '.join(marks)}" if marks else "", "yellow"))


def _collector_marks(pathmap: Pathmap) -> dict[tuple, list[str]]:
    """Where collectors sit, for drawing: (stage, path or member or None) -> ["collector 3 (source)", ...]."""
    marks: dict[tuple, list[str]] = {}
    for point in pathmap.collector_points():
        owner = point.path if point.role == "source" else (point.thread if point.role == "contribute" else None)
        marks.setdefault((point.stage, owner), []).append(f"collector {point.id} ({point.role})")
    return marks


def _draw_thread(pathmap: Pathmap, name: str) -> RichTree:
    thread = _known(pathmap.thread, name, "thread", [t.name for t in pathmap.threads])
    drawing = RichTree(Text.assemble(("thread ", ""), (thread.name, "bold cyan"), f" @ {thread.node}"))
    marks = _collector_marks(pathmap)
    for path in pathmap.paths_of(thread.name):
        element = pathmap.element(path.element)
        branch = drawing.add(Text.assemble(f"path {path.name} -> element ",
                                           (element.name, "bold green"), f" @ {element.node}"))
        for i, stage_id in enumerate(path.stages):
            here = marks.get((stage_id, None), []) + (marks.get((stage_id, path.name), []) if i == 0 else [])
            branch.add(_stage_label(pathmap, stage_id, tuple(here)))
    return drawing


def _draw_tree(pathmap: Pathmap, name: str) -> RichTree:
    tree = _known(pathmap.tree, name, "tree", [t.name for t in pathmap.trees])
    drawing = RichTree(Text.assemble(("tree ", ""), (tree.name, "bold magenta"),
                                     f" ({tree.kind}, {tree.shape}, {len(tree.members)} members)"))

    marks = _collector_marks(pathmap)

    def grow(branch: RichTree, stage_id: str) -> None:
        here = branch.add(_stage_label(pathmap, stage_id, tuple(marks.get((stage_id, None), []))))
        for member in tree.entrants(stage_id):
            contributed = marks.get((stage_id, member), [])
            here.add(Text.assemble(("thread ", ""), (member, "cyan"), f" @ {pathmap.thread(member).node}",
                                   (f"  ● {', '.join(contributed)}" if contributed else "", "yellow")))
        for child in tree.children(stage_id):
            grow(here, child)

    grow(drawing, tree.root)
    return drawing


def _known(lookup, name: str, what: str, names: list[str]):
    try:
        return lookup(name)
    except KeyError:
        # ValueError, not KeyError: the command prints the message, and KeyError's has quotes.
        raise ValueError(f"no {what} {name!r}; the pathmap has: {listing(names)}") from None


_INSTRUMENT_HELP = {
    "all": "a collector on every path and at every tree point", "paths": "a collector on every path",
    "trees": "collectors at every tree point (contribute, arrival, departure)",
    "sinks": "a collector in front of every element",
    "ends": "all, and a collector in front of every element", "none": "remove every collector",
}


def _appmaps() -> list[str]:
    return sorted(entry_points(group=APPMAPS).names)


def _generate(args) -> int:
    if args.application:
        if args.app:
            raise ValueError("give an application name or --app FILE, not both")
        if not args.threads or args.threads < 1:
            raise ValueError(f"{args.application} needs --threads N (N >= 1)")
        found = entry_points(group=APPMAPS, name=args.application)
        if not found:
            raise ValueError(f"no application {args.application!r}; installed: {', '.join(_appmaps()) or 'none'}")
        app = next(iter(found)).load()(args.threads)
        source = [args.application, "--threads", str(args.threads)]
    elif args.app:
        app = AppMap.load(args.app)
        source = ["--app", args.app]
    else:
        raise ValueError(f"name an application ({', '.join(_appmaps())}) with --threads, or give --app FILE")
    cluster = ClusterMap.load(args.cluster)
    mapping = Placement(rule=args.mapping) if args.mapping in RULES else Placement.load(args.mapping)
    out = FilePath(args.output)
    from .generate import generate   # here: networkx is for the generators, not every command

    pathmap = generate(app, cluster, mapping, args.tree_shape, name=args.name or out.stem)
    if args.allow_module:
        pathmap = dataclasses.replace(pathmap, allow_modules=_modules(args.allow_module)).validate()
    if args.instrument != "none":
        pathmap = dataclasses.replace(pathmap, instrument=preset(pathmap, args.instrument)).validate()
    command = ["eventspace", "pathmap", "generate", *source, "--cluster", args.cluster,
               "--mapping", args.mapping, "--tree-shape", args.tree_shape]
    if args.instrument != "none":
        command += ["--instrument", args.instrument]
    if args.name:
        command += ["--name", args.name]
    for module in args.allow_module:
        command += ["--allow-module", module]
    command += ["-o", args.output]
    pathmap.dump(out, header=f"Generated by: {shlex.join(command)}")
    totals = ", ".join(f"{what} {n}" for what, n in pathmap.summary().items())
    print(f"wrote {out}: {totals}", file=sys.stdout)
    return 0


def _modules(names: list[str]) -> tuple[str, ...]:
    """--allow-module values, checked, each once, in order."""
    for name in names:
        if not is_module_name(name):
            raise ValueError(f"--allow-module {name!r}: not a module name; write a dotted name, e.g. mylib "
                             "or mylib.programs")
    return tuple(dict.fromkeys(names))


def _node(args) -> int:
    from .__main__ import run_node

    pathmap = Pathmap.load(args.pathmap)
    if args.node not in {n.name for n in pathmap.nodes}:
        raise ValueError(f"no node {args.node!r} in {args.pathmap}; its nodes: "
                         f"{listing([n.name for n in pathmap.nodes])}")
    # As a launched node's PYTHONPATH does: --path first, then the working directory (a console
    # script's sys.path starts with its own bin directory, not the directory it was started from).
    for directory in reversed([*args.path, "."]):
        if not os.path.isdir(directory):
            raise ValueError(f"--path {directory}: no such directory")
        sys.path.insert(0, os.path.abspath(directory))
    # The node refuses a non-loopback address without CURVE itself (NodeServer.serve).
    return run_node(args.pathmap, args.node, args.bind, insecure=args.insecure, grace=args.grace)


def _instrument(args) -> int:
    pathmap = Pathmap.load(args.file)
    threads = tuple(t.strip() for t in args.threads.split(",") if t.strip()) if args.threads else ()
    unknown = [t for t in threads if t not in {th.name for th in pathmap.threads}]
    if unknown:
        raise ValueError(f"--threads: no thread {', '.join(map(repr, unknown))} in {args.file}; its threads: "
                         f"{listing([t.name for t in pathmap.threads])}")
    before = len(pathmap.collector_points())
    rules = preset(pathmap, args.what, threads).collectors
    text = FilePath(args.file).read_text(encoding="utf-8")
    edited = edit_instrument(text, rules, keep=args.keep, location=args.location, clear=args.what == "none")
    out = FilePath(args.output or args.file)
    pathmap = Pathmap.loads(edited, source=str(out))   # checked before anything is written
    write_atomically(out, edited)
    after = len(pathmap.collector_points())
    print(f"wrote {out}: {after} collectors ({after - before:+d}: {args.what}"
          f"{', threads ' + ','.join(threads) if threads else ''}), keep {pathmap.instrument.keep}")
    return 0


def _first_comment_block(text: str) -> str | None:
    """The comment lines a file starts with (a generated pathmap's command), kept on rewriting."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].removeprefix(" "))
    return "\n".join(lines) or None


def _runs(args) -> int:
    removed = runfile.prune(args.run_dir)
    rows = [_run_row(run) for run in runfile.live_runs(args.run_dir)]
    if args.json:
        print(json.dumps(rows))
        return 0
    console = terminal_console(highlight=False)
    if rows:
        console.print(_runs_table(rows, runfile.run_dir(args.run_dir)))
    else:
        console.print(f"no live runs in {runfile.run_dir(args.run_dir)}", soft_wrap=True)
    for run in removed:
        console.print(f"removed the run file of {run.name}: its launcher (pid {run.owner.pid}) is gone",
                      soft_wrap=True)
    return 0


def _run_row(run: runfile.RunFile) -> dict:
    """One live run as plain data: what `eventspace runs` shows (and prints with --json)."""
    return {"name": run.name, "pathmap": run.pathmap_name, "source": run.source, "run_file": run.path,
            "state": "starting" if run.starting else "live", "nodes": dict(run.endpoints), "pids": dict(run.pids),
            "started": run.started, "launcher": run.owner.as_dict() if run.owner else None,
            "monitors": [{"kind": m.kind, "pid": m.owner.pid, "host": m.owner.host, "started": m.started}
                         for m in run.monitors()]}


def _runs_table(rows: list[dict], directory) -> Table:
    table = Table(title=f"live runs in {directory}")
    for column in ("run", "pathmap", "nodes", "started", "launcher", "monitors"):
        table.add_column(column, justify="right" if column == "nodes" else "left",
                         overflow="fold", no_wrap=column != "pathmap")
    now = time.time()
    for row in rows:
        kinds: dict[str, int] = {}
        for monitor in row["monitors"]:
            kinds[monitor["kind"]] = kinds.get(monitor["kind"], 0) + 1
        launcher = row["launcher"]
        table.add_row(
            Text(row["name"]), Text(_shown_path(row["source"]) if row["source"] else row["pathmap"]),
            "starting" if row["state"] == "starting" else str(len(row["nodes"])),
            _ago(now - row["started"]),
            Text(f"pid {launcher['pid']} on {launcher['host']}" if launcher else "unknown"),
            ", ".join(kind if n == 1 else f"{n} {kind}" for kind, n in sorted(kinds.items())) or "none")
    return table


def _ago(seconds: float) -> str:
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _shown_path(path: str) -> str:
    """`path` as short as it reads unambiguously: relative under the current directory, ~ under home."""
    if path.startswith("<"):
        return path
    for base, shown in ((os.getcwd(), ""), (os.path.expanduser("~"), "~/")):
        if os.path.commonpath([base, path]) == base:
            return shown + os.path.relpath(path, base)
    return path
