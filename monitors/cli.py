"""The monitors' subcommands of `eventspace`: archive query, archive export."""

from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    archive = subparsers.add_parser("archive", help="query and export an event archive (SQLite)")
    commands = archive.add_subparsers(dest="archive_command", metavar="SUBCOMMAND", required=True)

    query = commands.add_parser("query", help="run one read-only SQL statement over an archive")
    query.add_argument("db", help="the archive file")
    query.add_argument("sql", help='e.g. "SELECT thread, count(*) FROM events GROUP BY thread"')
    query.add_argument("--json", action="store_true", help="print the rows as a JSON array of objects")
    query.set_defaults(func=_query)

    export = commands.add_parser("export", help="write an archive's events as Perfetto JSON or OTF2")
    export.add_argument("db", help="the archive file")
    export.add_argument("--perfetto", metavar="OUT.json",
                        help="Perfetto / Chrome trace JSON (open it in ui.perfetto.dev)")
    export.add_argument("--otf2", metavar="DIR", help="an OTF2 archive in a new directory (needs eventspace[otf2])")
    export.set_defaults(func=_export)


def _query(args) -> int:
    from .archive import Archive

    with Archive.open(args.db) as archive:
        columns, rows = archive.query(args.sql)
    if args.json:
        json.dump([dict(zip(columns, row)) for row in rows], sys.stdout, default=_json_value)
        sys.stdout.write("\n")
        return 0

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{len(rows)} row{'s' if len(rows) != 1 else ''}")
    for column in columns:
        table.add_column(escape(column))
    for row in rows:
        # Values are data, not markup: "[error]" must print as itself.
        table.add_row(*("NULL" if v is None else escape(str(v)) for v in row))
    Console().print(table)
    return 0


def _export(args) -> int:
    from .archive import Archive

    if not args.perfetto and not args.otf2:
        raise ValueError("say what to write: --perfetto OUT.json and/or --otf2 DIR")
    if args.otf2:
        from .otf2_export import INSTALL_HINT, Otf2Unavailable, available
        if not available():   # before any output is written
            raise Otf2Unavailable(f"--otf2 needs the otf2 package: {INSTALL_HINT}")
    with Archive.open(args.db) as archive:
        records, catalogue = archive.records(), archive.catalogue
    if args.perfetto:
        from .perfetto import write_perfetto
        doc = write_perfetto(args.perfetto, records, catalogue)
        phases = [e["ph"] for e in doc["traceEvents"]]
        tracks = sum(1 for e in doc["traceEvents"] if e.get("name") == "thread_name")
        print(f"wrote {args.perfetto}: {phases.count('X')} events on {tracks} tracks, "
              f"{phases.count('s')} flows")
    if args.otf2:
        from .otf2_export import write_otf2
        anchor = write_otf2(args.otf2, records, catalogue)
        print(f"wrote {anchor}: {len(records)} events")
    return 0


def _json_value(value):
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
