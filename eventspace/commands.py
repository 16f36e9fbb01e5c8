"""The eventspace subcommands of `eventspace`: space (the virtual event space) and scope."""

from __future__ import annotations


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


def _ls(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from .catalogue import Catalogue
    from .view import View

    catalogue = Catalogue(_pathmap(args.file))
    entries = View.parse(args.view).select(catalogue) if args.view != "all" else catalogue.entries
    table = Table(title=f"collectors of {catalogue.pathmap.name}: {len(entries)} of {len(catalogue)}")
    for column in ("id", "role", "thread", "element / tree", "node", "stage", "trace element"):
        table.add_column(column, justify="right" if column == "id" else "left",
                         no_wrap=column not in ("stage", "trace element"))
    for e in entries:
        table.add_row(str(e.id), e.role, e.thread or "-", e.element or e.tree or "-", f"{e.node} ({e.cluster})",
                      e.stage, f"{e.trace} @ {e.trace_node}")
    Console().print(table)
    return 0


def _switch(args) -> int:
    import pastset
    from paths import RunFile

    from .catalogue import Catalogue
    from .space import switch_collectors
    from .view import View

    run = RunFile.find(args.run).check_live()
    catalogue = Catalogue(run.pathmap())
    entries = View.parse(args.view).select(catalogue)
    by_node: dict[str, list[int]] = {}
    for entry in entries:
        by_node.setdefault(entry.node, []).append(entry.id)
    for node, cids in sorted(by_node.items()):
        with pastset.connect(run.endpoints[node]) as client:
            switch_collectors(client, args.state == "on", cids)
    print(f"switched {args.state} {len(entries)} collectors on {len(by_node)} nodes "
          f"({', '.join(sorted(by_node))}); they take effect within milliseconds")
    return 0


def _pathmap(file: str):
    """A pathmap from a YAML file, or from a live run's run file (or pathmap name)."""
    from pathlib import Path

    from paths import Pathmap, RunFile

    if Path(file).suffix in (".yaml", ".yml"):
        return Pathmap.load(file)
    return RunFile.find(file).pathmap()
