"""The monitors' subcommands of `eventspace`: monitor heartbeat|getevent|colop|classes|matrix|waits, dashboard, replay, demo, archive."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def register(subparsers) -> None:
    monitor = subparsers.add_parser("monitor", help="attach a monitor to a live run")
    monitors = monitor.add_subparsers(dest="monitor_command", metavar="MONITOR", required=True)

    hb = monitors.add_parser("heartbeat", help="which threads make progress, and which one is stuck")
    _run_options(hb, interval=1.0)
    hb.add_argument("--view", default="role:source | role:contribute | role:stage",
                    help="the collectors to watch (default: every thread's)")
    hb.add_argument("--tree", default="per-node", help="the scope's tree shape (default %(default)s)")
    hb.add_argument("--placement", default="near", help="near or monitor (default %(default)s)")
    hb.add_argument("--all", action="store_true", help="a row for every thread at every beat, not only "
                                                       "the threads that are not alive")
    hb.add_argument("--stacks", action="store_true", help="the whole Python stack of every thread that does not "
                                                          "progress, under the table (identical stacks once)")
    hb.add_argument("--depth", type=int, default=40, help="frames of a stack at most, the innermost "
                                                          "(default %(default)s)")
    hb.set_defaults(func=_heartbeat)

    ge = monitors.add_parser("getevent", help="stream raw events to a trace file or archive, or print them live")
    _run_options(ge, interval=0.2)
    ge.add_argument("--view", default="all | role:system",
                    help="the collectors to stream (default: every collector, and each node's system summaries)")
    ge.add_argument("--out", help="trace.pftrace (Perfetto), trace.json (Perfetto/Chrome JSON), trace.otf2 "
                                  "(OTF2 dir) or archive.sqlite")
    ge.add_argument("--live", action="store_true", help="print events as they arrive")
    ge.add_argument("--tree", default="flat", help="the scope's tree shape (default %(default)s)")
    ge.add_argument("--placement", default="monitor", help="near or monitor (default %(default)s)")
    ge.set_defaults(func=_getevent)

    co = monitors.add_parser("colop", help="where the time of collective operations goes")
    _run_options(co, interval=1.0)
    co.add_argument("--tree", help="the tree to watch (default: the run's only instrumented tree)")
    co.set_defaults(func=_colop)

    cl = monitors.add_parser("classes", help="threads (or nodes) in equivalence classes of like behaviour (MRNet)")
    _run_options(cl, interval=1.0)
    cl.add_argument("--view", default="all", help="the collectors whose events count (default: all)")
    cl.add_argument("--signature", default="ops", choices=("ops", "durations"),
                    help="what makes members alike: op counts per element class, or durations (default %(default)s)")
    cl.add_argument("--by", default="thread", choices=("thread", "node"), help="classes of (default %(default)s)")
    cl.add_argument("--tree", default="per-node", help="the scope's tree shape (default %(default)s)")
    cl.add_argument("--placement", default="near", help="near or monitor (default %(default)s)")
    cl.set_defaults(func=_classes)

    mx = monitors.add_parser("matrix", help="an MPI run's messages and bytes between ranks, by hop class")
    _run_options(mx, interval=1.0)
    _matrix_options(mx)
    mx.set_defaults(func=_matrix)

    wt = monitors.add_parser("waits", help="an MPI run's wait states (Scalasca's patterns): who waits for whom, "
                                           "how long, and where")
    _run_options(wt, interval=1.0)
    wt.add_argument("--view", default="all", help="the collectors whose records count (default: all; a wait is "
                                                  "found where both its ends are in the view)")
    _waits_options(wt)
    wt.set_defaults(func=_waits)

    stack = subparsers.add_parser("stack", help="the Python stack of every thread of a live run, identical ones "
                                                "merged, with the operation each is in")
    stack.add_argument("--run", required=True, help="the live run: its name (`eventspace runs` lists them) or its "
                                                    "run file")
    stack.add_argument("--view", default="all", help="whose threads (default: every thread with a collector)")
    stack.add_argument("--depth", type=int, default=40, help="frames of a stack at most, the innermost "
                                                             "(default %(default)s)")
    stack.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for a node (one in a C call "
                                                                  "that holds the GIL cannot answer; default "
                                                                  "%(default)s)")
    stack.add_argument("--json", action="store_true", help="print the report as one JSON object")
    stack.set_defaults(func=_stack)

    # The dashboard is a monitor too: `eventspace dashboard` and `eventspace monitor dashboard` are one command.
    for parsers in (subparsers, monitors):
        board = parsers.add_parser("dashboard", help="a live view of a run: heartbeat, scopes, collectives, cost")
        _run_options(board, interval=1.0)
        board.add_argument("--tree", action="append", help="a tree for the collectives panel (repeatable; default: "
                                                           "every instrumented tree)")
        board.set_defaults(func=_dashboard)

    demo = subparsers.add_parser("demo", help="the wind tunnel under three monitors and the live dashboard")
    demo.add_argument("--duration", type=float, default=30.0, help="seconds (default %(default)s)")
    demo.add_argument("--trace", default="demo-trace.pftrace", help="where getevent writes the Perfetto trace "
                                                                    "(.pftrace, or .json; default %(default)s)")
    demo.add_argument("--pathmap", default=str(_default_demo_pathmap()), help="the pathmap (default: %(default)s)")
    demo.add_argument("--size", default="small", help="the wind tunnel's size (default %(default)s)")
    demo.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout (the "
                                                          "dashboard and tables go to stderr)")
    demo.set_defaults(func=_demo)

    replay = subparsers.add_parser("replay", help="play an archived run back through the dashboard, as if live")
    replay.add_argument("db", help="the archive file (eventspace monitor getevent --out FILE.sqlite)")
    replay.add_argument("--speed", type=float, default=1.0, help="recorded seconds per second of play "
                                                                 "(default %(default)s)")
    replay.add_argument("--from", dest="start", type=float, metavar="T",
                        help="start T seconds after the recording's first event (default 0)")
    replay.add_argument("--to", dest="end", type=float, metavar="T", help="stop T seconds after it (default: the end)")
    replay.add_argument("--interval", type=float, default=1.0, help="recorded seconds per frame (default %(default)s)")
    replay.add_argument("--json", action="store_true", help="print every frame's state as one JSON line, at once")
    replay.set_defaults(func=_replay)

    archive = subparsers.add_parser("archive", help="query and export an event archive (SQLite)")
    commands = archive.add_subparsers(dest="archive_command", metavar="SUBCOMMAND", required=True)

    query = commands.add_parser("query", help="run one read-only SQL statement over an archive")
    query.add_argument("db", help="the archive file")
    query.add_argument("sql", help='e.g. "SELECT thread, count(*) FROM events GROUP BY thread"')
    query.add_argument("--json", action="store_true", help="print the rows as a JSON array of objects")
    query.set_defaults(func=_query)

    amx = commands.add_parser("matrix", help="an MPI run's messages and bytes between ranks, by hop class")
    amx.add_argument("db", help="the archive of an MPI run (eventspace mpirun --archive)")
    amx.add_argument("--json", action="store_true", help="print the matrix as one JSON object")
    _matrix_options(amx)
    amx.set_defaults(func=_archive_matrix)

    awt = commands.add_parser("waits", help="an MPI run's wait states (Scalasca's patterns): who waited for whom, "
                                            "how long, and where")
    awt.add_argument("db", help="the archive of an MPI run (eventspace mpirun --archive)")
    awt.add_argument("--json", action="store_true", help="print the report as one JSON object")
    _waits_options(awt)
    awt.set_defaults(func=_archive_waits)

    export = commands.add_parser("export", help="write an archive's events as a Perfetto trace or OTF2")
    export.add_argument("db", help="the archive file")
    export.add_argument("--perfetto", metavar="OUT.pftrace",
                        help="a Perfetto trace (open it in ui.perfetto.dev): OUT.pftrace, Perfetto's own "
                             "format, or OUT.json, Perfetto / Chrome trace JSON")
    export.add_argument("--otf2", metavar="DIR", help="an OTF2 archive in a new directory (needs eventspace[otf2])")
    export.set_defaults(func=_export)

    build = commands.add_parser("build", help="build the archive of a recording that its run could not build "
                                              "(an MPI job aborted under another launcher, a build that failed)")
    build.add_argument("recording", help="the recording directory (NAME.recording in the run directory)")
    build.add_argument("db", help="the new archive file")
    build.add_argument("--pathmap", help="the run's pathmap (a PATHS run's; an MPI run's recording says its own)")
    build.set_defaults(func=_build)


def _build(args) -> int:
    from eventspace.mpi.record import build_recording
    from eventspace.recording import closing_line

    print(closing_line(args.db, build_recording(args.recording, args.db, args.pathmap)))
    return 0


def _query(args) -> int:
    from .archive import Archive

    with Archive.open(args.db) as archive:
        columns, rows = archive.query(args.sql)
    if args.json:
        json.dump([dict(zip(columns, row)) for row in rows], sys.stdout, default=_json_value)
        sys.stdout.write("\n")
        return 0

    from rich.markup import escape
    from rich.table import Table

    from pastset.terminal import console

    table = Table(title=f"{len(rows)} row{'s' if len(rows) != 1 else ''}")
    for column in columns:
        table.add_column(escape(column))
    for row in rows:
        # Values are data, not markup: "[error]" must print as itself.
        table.add_row(*("NULL" if v is None else escape(str(v)) for v in row))
    console().print(table)
    return 0


def _export(args) -> int:
    from .archive import Archive
    from .perfetto import MAX_JSON_RECORDS

    if not args.perfetto and not args.otf2:
        raise ValueError("say what to write: --perfetto OUT.pftrace (or OUT.json) and/or --otf2 DIR")
    suffix = Path(args.perfetto).suffix.lower() if args.perfetto else None
    if args.perfetto and suffix not in (".pftrace", ".json"):
        raise ValueError(f"{args.perfetto}: --perfetto writes OUT.pftrace (Perfetto's own format) or OUT.json "
                         "(Perfetto / Chrome trace JSON); give one of those suffixes")
    if args.otf2:
        from .otf2_export import INSTALL_HINT, Otf2Unavailable, available
        if not available():   # before any output is written
            raise Otf2Unavailable(f"--otf2 needs the otf2 package: {INSTALL_HINT}")
    told = []
    with Archive.open(args.db) as archive:
        rows = len(archive)
        if suffix == ".json" and rows > MAX_JSON_RECORDS:
            raise ValueError(f"{args.db} holds {rows:,} events, more than a JSON trace is made of "
                             f"({MAX_JSON_RECORDS:,}: it is built whole in memory); write --perfetto OUT.pftrace, "
                             "Perfetto's own format, which is streamed")
        need, free = rows * EXPORT_BYTES_PER_RECORD, available_memory()
        if free is not None and need > free:
            raise MemoryError(f"{args.db} holds {rows:,} events: writing them as a trace takes about "
                              f"{need / 2**30:.1f} GiB of memory, and {free / 2**30:.1f} GiB are available; "
                              "export on a machine with more")
        catalogue, recorded = archive.catalogue, archive.info.clock
        if recorded is None:
            print(f"note: {args.db} does not say when its events were recorded (written before archives kept "
                  "it); the trace carries no wall-clock time", file=sys.stderr)
        with ExportProgress(rows) as progress:
            records = archive.records(progress("reading the archive"))
            if suffix == ".pftrace":
                from .pftrace import write_pftrace
                written = write_pftrace(args.perfetto, records, catalogue, recorded=recorded,
                                        progress=progress("writing the trace"))
                told.append(f"wrote {args.perfetto}: {written.slices} events on {written.tracks} tracks, "
                            f"{written.flows} flows, {written.counters} counter values, {written.nbytes:,} bytes")
            elif args.perfetto:
                from .perfetto import write_perfetto
                doc = write_perfetto(args.perfetto, records, catalogue, progress=progress("writing the trace"))
                phases = [e["ph"] for e in doc["traceEvents"]]
                tracks = sum(1 for e in doc["traceEvents"] if e.get("name") == "thread_name")
                told.append(f"wrote {args.perfetto}: {phases.count('X')} events on {tracks} tracks, "
                            f"{phases.count('s')} flows, {phases.count('C')} counter values")
            if args.otf2:
                from eventspace import system

                from .otf2_export import write_otf2
                anchor = write_otf2(args.otf2, records, catalogue, recorded=recorded, progress=progress("writing OTF2"))
                samples, operations = system.split(records)
                left_out = (f"; left out {len(samples):,} system summary records (metrics, not operations: the "
                            "Perfetto exports show them)") if len(samples) else ""
                told.append(f"wrote {anchor}: {len(operations):,} operations of the archive's {len(records):,} "
                            f"events{left_out}")
    print("\n".join(told))   # once the bars are gone
    return 0


LONG_EXPORT = 100_000   # rows from which an export shows its progress (on a terminal)
# What writing a trace holds at its peak, per record of the archive: its numpy columns (the records,
# their tracks and flows, the events in order: about 310 bytes measured at a million records).
EXPORT_BYTES_PER_RECORD = 400


def available_memory() -> int | None:
    """Bytes of memory the kernel says are available (MemAvailable), or None where it does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class ExportProgress:
    """A progress bar on stderr for an export of `rows` archive rows, shown while it is long
    (LONG_EXPORT rows or more) and stderr is a terminal, and gone when it ends: `progress(what)`
    gives the callable an exporter advances (n done, of total), a bar per `what`."""

    def __init__(self, rows: int):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        console = Console(stderr=True)
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeRemainingColumn(), console=console, transient=True,
                             disable=rows < LONG_EXPORT or not console.is_terminal)

    def __enter__(self) -> ExportProgress:
        self._bar.start()
        return self

    def __call__(self, what: str):
        task = self._bar.add_task(what, total=None)
        return lambda n, total: self._bar.update(task, advance=n, total=total)

    def __exit__(self, *exc) -> None:
        self._bar.stop()


def _replay(args) -> int:
    from pastset.terminal import console as terminal_console

    from .archive import Archive
    from .player import play
    from .replay import Replay

    with Archive.open(args.db) as archive:
        replay = Replay(archive, args.interval, args.start, args.end)
        if args.json:
            for frame in replay.frames():
                print(json.dumps(frame.as_dict()), flush=True)
            return 0
        console = terminal_console()
        shown = play(replay, console, args.speed)
    console.print(f"replayed {shown} of {replay.count} frames of {args.db} "
                  f"({replay.start:.1f} s to {replay.end:.1f} s of {replay.length:.1f} s recorded)")
    return 0



def _matrix_options(parser) -> None:
    parser.add_argument("--plot", metavar="OUT.png", help="also draw a heatmap (OUT.png) and bytes per host by hop "
                                                          "class (OUT-hosts.png); needs eventspace[plot]")


def _archive_matrix(args) -> int:
    from .archive import Archive
    from .matrix import archive_matrix

    with Archive.open(args.db) as archive:
        matrix = archive_matrix(archive)
    _show_matrix(args, matrix)
    return 0


def _matrix(args) -> int:
    from .watch import Watch
    with Watch(args.run, "matrix", interval=args.interval, duration=args.duration, json_lines=args.json) as watch:
        from .matrix import MatrixMon
        from .render import render

        with MatrixMon(watch.run_file) as mon:
            shown = {"messages": -1}

            def show(report):
                counts = int(report.matrix.messages.sum()) + int(report.matrix.rma_calls.sum())
                if args.json:
                    watch.emit(report.as_dict())
                elif counts != shown["messages"]:   # again only when messages (or one-sided calls) were added
                    shown["messages"] = counts
                    watch.out.print(render(report))

            watch.loop(mon.read, show)
            account = _account(mon.scope)
    if mon.discarded:
        watch.say(f"note: {mon.discarded:,} records were discarded before they were read: the matrix is short of "
                  "them (an archive, `eventspace mpirun --archive`, keeps every message)")
    _show_matrix(args, mon.matrix, table=False)
    messages, nbytes = int(mon.matrix.messages.sum()), int(mon.matrix.nbytes.sum())
    rma_calls, rma_bytes = int(mon.matrix.rma_calls.sum()), int(mon.matrix.rma_bytes.sum())
    rma = f", {rma_calls:,} one-sided calls, {rma_bytes:,} bytes" if rma_calls else ""
    watch.finish(f"{messages:,} messages, {nbytes:,} bytes{rma}" + _account_line(account, watch, "records"),
                 {"messages": messages, "bytes": nbytes, "rma_calls": rma_calls, "rma_bytes": rma_bytes,
                  "records": _account_figures(account)})
    return 0


def _account(scope):
    """The scope's Account (eventspace.scope), or None where its nodes can no longer say."""
    from pastset import PastSetError

    try:
        return scope.account()
    except PastSetError:
        return None


def _account_line(account, watch, what: str = "events") -> str:
    """`; N events made in its view: ...`; `as of its last pull` when the run ended without the final read
    (its nodes stopped before this monitor read what they wrote last: `made` counts what it saw)."""
    if account is None:
        return ""
    from .watch import PROGRAM_ENDED

    final = watch.why is None or watch.why == PROGRAM_ENDED
    return f"; {account.line(what)}" + ("" if final else ", as of its last pull (the run ended before a final read)")


def _account_figures(account) -> dict | None:
    return account.as_dict() if account is not None else None


def _show_matrix(args, matrix, table: bool = True) -> None:
    """The matrix as JSON or tables (unless `table` is False), and its plots if --plot asks."""
    from .heatmap import write_plots

    _show(args, matrix, write_plots, table)


def _show(args, report, draw, table: bool = True) -> None:
    """A monitor's report as JSON (`as_dict`) or rendered (unless `table` is False), and its plots,
    `draw(report, args.plot)`, if --plot asks (or a note that the plot extra is missing)."""
    from pastset.terminal import console

    from .heatmap import INSTALL_HINT, plotting
    from .render import render

    if table:
        if args.json:
            print(json.dumps(report.as_dict()))
        else:
            console(highlight=False).print(render(report))
    if args.plot:
        if not plotting():
            print(f"note: no plots: --plot needs matplotlib ({INSTALL_HINT})", file=sys.stderr)
            return
        written = draw(report, args.plot)
        print(f"wrote {', '.join(map(str, written))}", file=sys.stderr if args.json else sys.stdout)


def _waits_options(parser) -> None:
    parser.add_argument("--top", type=int, default=10, help="the largest waits listed, grouped by rank, pattern, "
                                                            "op, peer and communicator (default %(default)s)")
    parser.add_argument("--plot", metavar="OUT.png", help="also draw who waits for whom (OUT.png) and each rank's "
                                                          "waiting by pattern (OUT-ranks.png); needs eventspace[plot]")


def _archive_waits(args) -> int:
    from .archive import Archive
    from .waitstates import archive_waits

    with Archive.open(args.db) as archive:
        report = archive_waits(archive, top=args.top)
    _show_waits(args, report)
    return 0


def _waits(args) -> int:
    from .watch import Watch
    with Watch(args.run, "waits", interval=args.interval, duration=args.duration, json_lines=args.json) as watch:
        from .render import render
        from .waitstates import WaitStatesMon

        with WaitStatesMon(watch.run_file, args.view, top=args.top) as mon:
            shown = {"seen": None}

            def show(report):
                if args.json:
                    watch.emit(report.as_dict())
                    return
                seen = (report.waiting_ns, sum(p.uncertain_ns for p in report.patterns))
                if seen != shown["seen"]:   # the tables again only when waits were added
                    shown["seen"] = seen
                    watch.out.print(render(report))

            watch.loop(mon.read, show)
            if watch.why:   # the run has ended and its last records are in: settle what waited for more
                report = mon.finish()
                if args.json:
                    watch.emit(report.as_dict())
                else:
                    watch.out.print(render(report))
            else:
                report = mon.report()
            account = _account(mon.scope)
    _show_waits(args, report, table=False)
    watch.finish(_waits_line(report) + _account_line(account, watch, "records"),
                 {"waiting_ns": report.waiting_ns, "mpi_ns": report.mpi_ns,
                  "patterns": {p.key: p.waiting_ns for p in report.patterns}, "complete": report.complete,
                  "records": _account_figures(account)})
    return 0


def _waits_line(report) -> str:
    """`1,234.5 ms waiting of 3,456.7 ms in MPI: Late Sender 1,000.0 ms, Wait at N×N 234.5 ms`."""
    patterns = ", ".join(f"{p.name} {p.waiting_ns / 1e6:,.1f} ms" for p in report.patterns if p.waiting_ns)
    return (f"{report.waiting_ns / 1e6:,.1f} ms waiting of {report.mpi_ns / 1e6:,.1f} ms in MPI"
            + (f": {patterns}" if patterns else ""))


def _show_waits(args, report, table: bool = True) -> None:
    """The wait states as JSON or tables (unless `table` is False), and their plots if --plot asks."""
    from .waitplots import write_plots

    _show(args, report, write_plots, table)


def _json_value(value):
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _dashboard(args) -> int:
    from .watch import Watch
    from rich.console import Console
    from rich.live import Live

    with Watch(args.run, "dashboard", interval=args.interval, duration=args.duration, json_lines=args.json) as watch:
        from paths import attach
        from paths.runfile import run_ended

        from .dashboard import Dashboard
        from .render import render

        run_file = watch.run_file
        run = attach(run_file)
        board = Dashboard(run_file, progress=run.progress, title=f"EventSpace: {run_file.name}", trees=args.tree,
                          ended=lambda: run_ended(run_file))
        try:
            for note in board.notes:
                watch.say(f"note: {note}")
            if args.json:
                watch.loop(board.read, lambda state: watch.emit(state.as_dict()))
            else:
                console = Console()   # the terminal's own size: a frame fills it
                with Live(render(board.read()), console=console, auto_refresh=False) as view:
                    watch.loop(board.read, lambda state: view.update(render(state), refresh=True))
                if watch.why and not console.is_terminal:
                    console.line()  # rich ends a live display with a newline only on a terminal
        finally:
            board.close()
            run.close_clients()
    watch.finish(board.summary(), board.figures())
    return 0


def _demo(args) -> int:
    from rich.console import Console

    from .demo import run_demo

    # With --json, stdout carries the summary alone; the dashboard and the tables go to stderr.
    summary = run_demo(args.duration, args.trace, args.pathmap, args.size, console=Console(stderr=args.json))
    if args.json:
        print(json.dumps(summary))
    return 0


def _run_options(parser, interval: float) -> None:
    parser.add_argument("--run", required=True, help="the live run: its name (`eventspace runs` lists them) "
                                                     "or its run file")
    parser.add_argument("--interval", type=float, default=interval, help="seconds between pulls (default %(default)s)")
    parser.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C "
                                                       "or the run ends)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per interval on stdout, and "
                                                            "a last one that says how it ended; lines for people "
                                                            "go to stderr")


def _heartbeat(args) -> int:
    from .watch import Watch
    with Watch(args.run, "heartbeat", interval=args.interval, duration=args.duration, json_lines=args.json) as watch:
        from .heartbeat import Heartbeat
        from .render import render

        shown, dumped = [], []
        with Heartbeat(watch.run_file, args.view, tree=args.tree, placement=args.placement, stacks=args.stacks,
                       depth=args.depth) as hb:
            def show(report):
                shown.append(report)
                if report.deadlock and not dumped:   # once: the flight recorder's window, as the deadlock began
                    dumped.append(_dump_at_deadlock(watch, report.deadlock))
                if args.json:
                    watch.emit(report.as_dict())
                else:
                    watch.out.print(render(report, every_thread=args.all))

            watch.loop(hb.read, show)
    last = dict(shown[-1].counts()) if shown else {}
    told = (", the last: " + ", ".join(f"{n} {status}" for status, n in last.items())) if last else ""
    watch.finish(f"{len(shown)} beat{'s' if len(shown) != 1 else ''}{told}", {"beats": len(shown), "last": last})
    return 0


def _dump_at_deadlock(watch, lines: list[str]):
    """Dump the run's flight recorder (if it records) when the heartbeat finds a deadlock; say where."""
    from eventspace.archive import ArchiveError
    from eventspace.recording import dump_run
    from pastset import PastSetError

    try:
        path, built = dump_run(watch.run_file, why="deadlock: " + "; ".join(lines))
    except (ArchiveError, OSError, PastSetError) as exc:
        if "no node answered with a recording" not in str(exc):   # a run that does not record: nothing to say
            watch.say(f"the flight recorder could not be dumped: {exc}")
        return None
    watch.say(f"deadlock: flight recorder dumped to {path}: {built.tuples:,} events")
    return path


def _getevent(args) -> int:
    from .watch import Watch
    with Watch(args.run, "getevent", interval=args.interval, duration=args.duration, json_lines=args.json) as watch:
        from .getevent import GetEventMon
        from .render import render

        mon = GetEventMon(watch.run_file, args.view, args.out, tree=args.tree, placement=args.placement)
        try:
            def show(report):
                if args.json:
                    watch.emit(report.as_dict())
                elif args.live and report.events:
                    watch.out.print(render(report))

            watch.loop(mon.read, show)
            account = _account(mon.scope)
        finally:
            mon.scope.close()   # its nodes may stop once this watch detaches; the output is written after
    out = mon.close()
    lost = [f"node {node} {'gone' if gone else 'not answering'} since {time.strftime('%H:%M:%S', time.localtime(since))}"
            for node, (gone, since) in sorted(mon.lost.items(), key=lambda item: (item[1][1], item[0]))]
    summary = (f"{mon.stats.tuples:,} events streamed in {mon.stats.pulls} pulls, "
               f"{mon.stats.discarded:,} discarded before they were read" + _account_line(account, watch)
               + (f"; wrote {out}" if out else "") + "".join(f"; {line}" for line in lost))
    watch.finish(summary, {"events": mon.stats.tuples, "pulls": mon.stats.pulls, "discarded": mon.stats.discarded,
                           "account": _account_figures(account), "out": str(out) if out else None,
                           "lost": {node: {"gone": gone, "since": since} for node, (gone, since) in mon.lost.items()}})
    return 0


def _colop(args) -> int:
    from .watch import Watch
    with Watch(args.run, "colop", interval=args.interval, duration=args.duration, json_lines=args.json) as watch:
        from .colop import ColOpMon
        from .render import open_round, render

        with ColOpMon(watch.run_file, args.tree) as mon:
            shown = {"rounds": -1, "report": None}

            def show(report):
                shown["report"] = report
                if args.json:
                    watch.emit(report.as_dict())
                elif report.rounds != shown["rounds"]:  # the tables again only when rounds were added
                    shown["rounds"] = report.rounds
                    watch.out.print(render(report, open_for=args.interval))
                elif report.open is not None and report.open.open_for_s >= args.interval:
                    watch.out.print(open_round(report))

            watch.loop(mon.read, show)
            account = _account(mon.scope)
    report = shown["report"]
    summary = f"tree {mon.tree}: {report.rounds if report else 0:,} complete rounds"
    if report is not None and report.open is not None and report.open.open_for_s >= args.interval:
        summary += (f"; round {report.open.round} was open at the last look, waiting for "
                    f"{', '.join(report.open.waiting_for) or 'no member'}")
    watch.finish(summary + _account_line(account, watch), {"tree": mon.tree, "rounds": report.rounds if report else 0,
                                                     "account": _account_figures(account)})
    return 0


def _classes(args) -> int:
    from .watch import Watch

    with Watch(args.run, "classes", interval=args.interval, duration=args.duration, json_lines=args.json) as watch:
        from .classes import ClassesMon
        from .render import render

        with ClassesMon(watch.run_file, args.view, signature=args.signature, by=args.by, tree=args.tree,
                        placement=args.placement) as mon:
            shown = []

            def show(report):
                shown.append(report)
                if args.json:
                    watch.emit(report.as_dict())
                else:
                    watch.out.print(render(report))

            watch.loop(mon.read, show)
            account = _account(mon.scope)
    last = f", the last: {len(shown[-1].classes)} classes" if shown else ""
    watch.finish(f"{len(shown)} pulls{last}" + _account_line(account, watch),
                 {"pulls": len(shown), "account": _account_figures(account)})
    return 0


def _stack(args) -> int:
    from paths import RunFile

    from .render import render
    from .stacks import StacksMon

    if not 1 <= args.depth <= 1000:
        raise ValueError(f"--depth {args.depth}: give a number of frames from 1 to 1000")
    # Not check_live: a node whose GIL a C call holds does not answer, and is to be named, not refused.
    run_file = RunFile.find(args.run)
    if run_file.starting:
        raise ValueError(f"run {run_file.name} is still starting; try again in a moment")
    with StacksMon(run_file, args.view, depth=args.depth, timeout=args.timeout) as mon:
        report = mon.read()
    if args.json:
        print(json.dumps(report.as_dict()))
    else:
        from pastset.terminal import console

        console(highlight=False).print(render(report))
    return 0


def _default_demo_pathmap():
    return Path(__file__).resolve().parents[1] / "pathmaps" / "windtunnel-4node.yaml"
