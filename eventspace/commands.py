"""The eventspace subcommands of `eventspace`: space (the virtual event space: ls, switch) and scope (pull one)."""

from __future__ import annotations

import sys

# Seconds a node is given to answer `space ls` or `space switch` before it is named as not answering.
SILENT_NODE_S = 5.0


def register(subparsers) -> None:
    space = subparsers.add_parser("space", help="the virtual event space: list and switch collectors")
    commands = space.add_subparsers(dest="space_command", metavar="SUBCOMMAND", required=True)
    ls = commands.add_parser("ls", help="list every collector of a pathmap (or a live run)")
    ls.add_argument("file", help="a pathmap (YAML), or a live run (run file or pathmap name)")
    ls.add_argument("--view", default="all", help="only the collectors in this view (default: all)")
    ls.set_defaults(func=_ls)
    switch = commands.add_parser("switch", help="switch collectors of a live run on or off, without restarting it")
    switch.add_argument("state", choices=("on", "off"))
    switch.add_argument("--run", required=True, help="the live run (run file, or pathmap name)")
    switch.add_argument("--view", default="all", help="which collectors (default: all)")
    switch.set_defaults(func=_switch)

    dump = subparsers.add_parser(
        "dump", help="dump a live run's recording (its flight recorder's window) into a new archive",
        description="Ask every node of a run started with --record last:... (or --archive) for what it has "
                    "recorded so far, and build a new archive of it (`eventspace archive query|export`, "
                    "`eventspace replay` read it). The run goes on.")
    dump.add_argument("--run", required=True, help="the live run (run file, or its name)")
    dump.add_argument("-o", "--out", metavar="F.sqlite", help="the new archive (default: NAME.dump-TIME.sqlite here)")
    dump.set_defaults(func=_dump)

    scope = subparsers.add_parser("scope", help="pull a scope over a live run: its figures, and the last events")
    scope.add_argument("--run", required=True, help="the live run (run file, or pathmap name)")
    scope.add_argument("--view", default="all", help="which trace elements (default: all)")
    scope.add_argument("--mode", default="latest", choices=("latest", "stream", "backlog"))
    scope.add_argument("--tree", default="flat", help="flat, kary:K, per-node or per-cluster (default flat)")
    scope.add_argument("--placement", default="monitor", choices=("monitor", "near"))
    scope.add_argument("--concurrency", default="concurrent", choices=("concurrent", "sequential"))
    scope.add_argument("--stage", action="append", help="a stage at every join, e.g. reduce:max_t_end@thread (repeatable)")
    scope.add_argument("--max-rate", type=float, help="pulls per second at most")
    scope.add_argument("--pipeline", type=int, default=1, metavar="K",
                       help="pulls kept in flight (latest and backlog modes; default %(default)s): "
                            "K times the rate where a pull waits on a slow link")
    scope.add_argument("--pulls", type=int, default=100, help="how many pulls (default %(default)s)")
    scope.add_argument("--show", type=int, default=5, help="events of the last pull to print (default %(default)s)")
    scope.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    scope.set_defaults(func=_scope)


def _dump(args) -> int:
    from pastset.terminal import counted
    from paths import RunFile

    from .recording import dump_run

    run = RunFile.find(args.run).check_live()
    path, built = dump_run(run, args.out, "dumped on demand (eventspace dump)")
    print(f"dumped run {run.name}'s recording to {path}: {counted(built.tuples, 'event')} from "
          f"{counted(len(built.nodes), 'node')}")
    return 0


def _scope(args) -> int:
    import json
    import time

    from pastset.terminal import console as terminal_console
    from rich.table import Table

    from paths import RunFile
    from paths.runfile import run_ended

    from .scope import EventScope

    run = RunFile.find(args.run).check_live()
    ended = None
    with EventScope(run, args.view, mode=args.mode, tree=args.tree, placement=args.placement,
                    concurrency=args.concurrency, stages=args.stage or (), max_rate=args.max_rate,
                    pipeline=args.pipeline) as scope:
        records = []
        started = time.monotonic()
        for _ in range(args.pulls):
            pulled = scope.pull()
            records = pulled.records
            if pulled.missing and (ended := run_ended(run)):
                break  # no use pulling a run that has ended (each pull would wait out its timeout)
        wall = time.monotonic() - started
        stats = scope.stats()
    figures = {"view": args.view, "trace_elements": len(scope.entries), "tree": args.tree, "placement": args.placement,
               "mode": args.mode, "pulls": stats.pulls, "observe_rate": stats.observe_rate,
               "pulls_per_wall_second": stats.pulls / wall if wall else 0.0, "tuples": stats.tuples,
               "bytes_in_per_pull": stats.bytes_in / max(1, stats.pulls), "discarded": stats.discarded,
               "missing": sorted(pulled.missing),
               "seconds_per_level": {str(k): v[0] / max(1, stats.pulls) for k, v in sorted(stats.levels.items())}}
    if ended:
        figures["ended"] = ended
    if args.json:
        print(json.dumps(figures))
        return 0
    console = terminal_console()
    table = Table(title=f"scope over {args.view}: {len(scope.entries)} trace elements, {args.tree}/{args.placement}",
                  show_header=False)
    for key, value in figures.items():
        table.add_row(key.replace("_", " "), f"{value:,.1f}" if isinstance(value, float) else str(value))
    console.print(table)
    if len(records) and not isinstance(records, list):
        from rich.markup import escape

        for event in scope.catalogue.label(records[-args.show:]):
            console.print(escape(str(event)))
    if ended:
        console.print(f"run {run.name} ended: {ended}; {stats.pulls} pulls")
    return 0


def _ls(args) -> int:
    from rich.table import Table

    from pastset.terminal import console

    from .catalogue import Catalogue
    from .view import View

    pathmap, run = _pathmap(args.file)
    catalogue = Catalogue(pathmap)
    entries = View.parse(args.view).select(catalogue) if args.view != "all" else catalogue.entries
    off, silent = _switched_off(run, entries) if run is not None else (None, {})
    table = Table(title=f"collectors of {catalogue.pathmap.name}: {len(entries)} of {len(catalogue)}"
                        + (f", {len(off)} switched off" if off else "")
                        + "".join(f"; node {node} does not answer ({why}): its switches show ?"
                                  for node, why in sorted(silent.items())))
    columns = ["id", "role", "thread", "element / tree", "node", "stage", "trace element"]
    for column in columns + (["switch"] if off is not None else []):
        table.add_column(column, justify="right" if column == "id" else "left")
    for e in entries:
        table.add_row(str(e.id), e.role, e.thread or "-", e.element or e.tree or "-", f"{e.node} ({e.cluster})",
                      e.stage, f"{e.trace} @ {e.trace_node}",
                      *([] if off is None else ["?" if e.node in silent else "off" if e.id in off else "on"]))
    console().print(table)
    return 0


def _switched_off(run, entries) -> tuple[set[int], dict[str, str]]:
    """The collectors among `entries` that the live run's nodes have switched off, and {node: why}
    for each node of theirs that did not say (paused, hung, or gone)."""
    import pastset

    from .hosted import OFF

    off: set[int] = set()
    silent: dict[str, str] = {}
    for node in sorted({e.node for e in entries}):
        try:
            with pastset.connect(run.endpoints[node]) as client:
                off.update(client.call(OFF, timeout=SILENT_NODE_S))
        except pastset.PastSetError as exc:
            silent[node] = str(exc)
    return off & {e.id for e in entries}, silent


def _switch(args) -> int:
    import pastset
    from paths import RunFile

    from .catalogue import SYSTEM_ROLE, Catalogue
    from .space import switch_collectors
    from .view import View

    run = RunFile.find(args.run).check_live()
    catalogue = Catalogue(run.pathmap())
    entries = View.parse(args.view).select(catalogue)
    by_node: dict[str, list[int]] = {}
    for entry in entries:
        by_node.setdefault(entry.node, []).append(entry.id)
    silent: dict[str, str] = {}
    for node, cids in sorted(by_node.items()):   # every node that answers, whichever does not
        try:
            with pastset.connect(run.endpoints[node], timeout=SILENT_NODE_S) as client:
                switch_collectors(client, args.state == "on", cids, wait=SILENT_NODE_S)
        except pastset.PastSetError as exc:
            silent[node] = str(exc)
    switched = [e for e in entries if e.node not in silent]
    nodes = sorted(set(by_node) - set(silent))
    samplers = sum(1 for e in switched if e.role == SYSTEM_ROLE)
    what = f"{len(switched) - samplers} collectors" + (f" and {samplers} system samplers" if samplers else "")
    if nodes:
        print(f"switched {args.state} {what} on {len(nodes)} nodes ({', '.join(nodes)}); they take effect "
              "within milliseconds")
    for node, why in sorted(silent.items()):
        print(f"eventspace space switch: node {node} did not answer ({why}): its {len(by_node[node])} "
              f"collectors are as they were; run the command again once it answers", file=sys.stderr)
    return 1 if silent else 0


def _pathmap(file: str):
    """(a pathmap, None) from a YAML file, or (its pathmap, its RunFile) for a live run's run file (or
    name); RunError (one line) for a run that has ended."""
    from pathlib import Path

    from paths import Pathmap, RunFile

    if Path(file).suffix in (".yaml", ".yml"):
        return Pathmap.load(file), None
    run = RunFile.find(file).check_live()
    return run.pathmap(), run
