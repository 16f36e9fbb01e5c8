"""How monitor results look in a terminal: `render(report)`, rich renderables built from the monitors' reports."""

from __future__ import annotations

import time
from functools import singledispatch

from rich.console import Group, RenderableType
from rich.layout import Layout
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from eventspace import trace
from eventspace.system import NodeSample
from pastset.terminal import counted

from .classes import ClassesReport, describe
from .colop import ColOpReport
from .dashboard import DashboardState
from .getevent import GetEventReport
from .heartbeat import (ALIVE, COMPUTING, FAILED, GONE, IDLE, NOT_ANSWERING, OFF, QUIET, SLOW, STALLED, UNSEEN,
                        WAITING, HeartbeatReport)
from .matrix import HOPS, Matrix, MatrixReport
from .replay import Frame
from .stacks import StacksReport, group_title
from .system import SystemReport
from .waitstates import PATTERNS, WaitReport


@singledispatch
def render(report, **options) -> RenderableType:
    """A monitor's report (monitors.monitor.Report) as a rich renderable, for a console to print or
    a Live display to show; what each kind of report takes as `options` is said where it is drawn
    below. TypeError for an object that is not a report of a monitor."""
    raise TypeError(f"no monitor reports {type(report).__name__}: nothing renders it")


def _clock(at: float) -> str:
    """`14:02:17`: a report's time (seconds since the epoch), local."""
    return time.strftime("%H:%M:%S", time.localtime(at))


@render.register
def _(report: HeartbeatReport, *, every_thread: bool = False) -> Group:
    """A beat: its counts per status and a row for each thread that is not alive (every thread's row
    with `every_thread`), then the whole stacks the report holds (heartbeat --stacks)."""
    at = _clock(report.at)
    beat = heartbeat_table(report, f"heartbeat {at}") if every_thread else heartbeat_summary(report, at)
    return Group(beat, heartbeat_stacks(report))


@render.register
def _(report: ColOpReport, *, open_for: float = 0.0) -> Group:
    """The tables of a tree's operations and joins; then the round open at the read, if it has been
    open for `open_for` seconds or more (not at all with an infinite `open_for`)."""
    shown = open_for <= report.open.open_for_s if report.open is not None else False
    return Group(colop_tables(report), open_round(report)) if shown else colop_tables(report)


@render.register
def _(report: ClassesReport) -> Text:
    """One line: the read's time, then `describe` (the classes, the quiet members, the nodes not answering)."""
    return Text(f"{_clock(report.at)}  {describe(report)}")


@render.register
def _(report: GetEventReport) -> Group:
    """The newest events of the read, then the stream's figures so far."""
    return Group(events_table(report.records, report.catalogue),
                 Text(f"{report.total:,} events, {report.rate:,.0f} events/s of pulling, "
                      f"{report.discarded:,} discarded before read", style="dim"))


@render.register
def _(report: MatrixReport) -> Group:
    return matrix_tables(report.matrix)


@render.register
def _(report: SystemReport) -> Table:
    return system_bars(list(report.nodes))


@render.register
def _(frame: Frame) -> Layout:
    """A replay's frame, as the live dashboard drew its state."""
    return render(frame.state)


@render.register
def _(report: StacksReport) -> Group:
    return stacks_view(report, report.order)


STATUS_STYLE = {ALIVE: "green", WAITING: "yellow", STALLED: "bold red", QUIET: "dim", GONE: "magenta", IDLE: "blue",
                SLOW: "orange3", NOT_ANSWERING: "bold magenta", UNSEEN: "grey50", OFF: "dim cyan", COMPUTING: "cyan",
                FAILED: "bold white on red"}


HEARTBEAT_COLUMNS = ("thread", "node", "status", "still (s)", "waiting in", "where")


def heartbeat_table(report: HeartbeatReport, title: str = "heartbeat") -> Table:
    """One row per thread: node, status (coloured), seconds without progress, what it waits in, and
    where in the program it is (for a thread that does not progress)."""
    table = Table(title=title, title_justify="left")
    _heartbeat_rows(table, report.threads)
    table.caption = "; ".join(filter(None, (_lost_nodes(report), deadlock_line(report)))) or None
    return table


def _heartbeat_rows(table: Table, beats) -> None:
    for column in HEARTBEAT_COLUMNS:
        table.add_column(column, justify="right" if column == "still (s)" else "left")
    for beat in beats:
        table.add_row(beat.thread, beat.node, Text(beat.status, style=STATUS_STYLE[beat.status]),
                      f"{beat.still_for:.1f}" if beat.still_for else "", Text(beat.waiting_in), Text(beat.where))


def heartbeat_stacks(report: HeartbeatReport) -> Group:
    """The whole stack of every thread that has one in the report (heartbeat --stacks), identical stacks
    once, with the threads that share them."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for beat in report.threads:
        if beat.stack:
            groups.setdefault(beat.stack, []).append(beat.thread)
    shown = []
    for frames, threads in groups.items():
        shown.append(Text(f"{', '.join(threads)}:", style="bold"))
        shown.extend(Text(f"  {frame}") for frame in frames)
    return Group(*shown)


def deadlock_line(report: HeartbeatReport) -> str:
    """`deadlock: r0 waits Recv from r1 tag 0 on comm 0; r1 waits ...`, or "" without one."""
    return "deadlock: " + "; ".join(report.deadlock) if report.deadlock else ""


def _lost_nodes(report: HeartbeatReport) -> str:
    """"nodes not answering: B; nodes gone: C; nodes not reached: D", or "" when every node answered."""
    return "; ".join(f"nodes {what}: {', '.join(sorted(nodes))}"
                     for what, nodes in (("not answering", report.not_answering), ("gone", report.gone),
                                         ("not reached", report.unreached)) if nodes)


def heartbeat_summary(report: HeartbeatReport, clock: str) -> Group:
    """One line of counts per status, then a row for each thread that is not alive."""
    line = Text(f"{clock}  {len(report.threads)} threads: ")
    for i, (status, n) in enumerate(report.counts()):
        line.append(("" if i == 0 else ", ") + f"{n} {status}", style=STATUS_STYLE[status])
    lost = _lost_nodes(report)
    if lost:
        line.append(f"; {lost}", style=STATUS_STYLE[GONE])
    shown = [line]
    if report.deadlock:
        shown.append(Text(deadlock_line(report), style="bold red"))
    others = [b for b in report.threads if b.status != ALIVE]
    if not others:
        return Group(*shown)
    table = Table(box=None, padding=(0, 2), show_header=True)
    _heartbeat_rows(table, others)
    return Group(*shown, table)


def heartbeat_grid(report: HeartbeatReport) -> Table:
    """A compact grid: one line per node, a coloured block per thread (for the dashboard)."""
    table = Table(show_header=False, box=None, padding=(0, 1))
    table.add_column("node", style="bold")
    table.add_column("threads")
    by_node: dict[str, list] = {}
    for beat in report.threads:
        by_node.setdefault(beat.node, []).append(beat)
    for node, beats in by_node.items():
        cells = Text()
        for beat in beats:
            cells.append(f"{beat.thread:>4}", style=f"reverse {STATUS_STYLE[beat.status]}")
            cells.append(" ")
        table.add_row(node, cells)
    return table


def colop_tables(report: ColOpReport) -> Group:
    ops = Table(title=f"collective operations on tree {report.tree}", title_justify="left")
    for column in ("op", "rounds", "latency median µs", "latency p95 µs", "in call median µs",
                   "slowest contributor", "late by µs", "worst round"):
        ops.add_column(column, justify="left" if column in ("op", "slowest contributor", "worst round") else "right")
    for o in report.ops:
        ops.add_row(o.op, str(o.rounds), f"{o.latency_median_us:,.0f}", f"{o.latency_p95_us:,.0f}",
                    f"{o.in_op_median_us:,.0f}", f"{o.slowest} ({o.slowest_share:.0%} of rounds)",
                    f"{o.lateness_us:,.0f}", worst_round(o))
    joins = Table(title="per tree node", title_justify="left")
    for column in ("join", "node", "fan-in", "rounds", "total median µs", "imbalance median µs", "up median µs"):
        joins.add_column(column, justify="left" if column in ("join", "node") else "right")
    for j in report.joins:
        joins.add_row(j.stage, j.node, str(j.fan_in), str(j.rounds), f"{j.total_median_us:,.0f}",
                      f"{j.imbalance_median_us:,.0f}", f"{j.up_median_us:,.0f}")
    return Group(ops, joins) if report.joins else Group(ops)   # an MPI communicator's tree has no joins


def worst_round(o) -> str:
    """`T5 +10,012,345 µs (round 17)`: the latest last arrival of one op, and its round."""
    return f"{o.worst_member} +{o.worst_lateness_us:,.0f} µs (round {o.worst_round})" if o.worst_member else ""


def open_round(report: ColOpReport) -> Text:
    """`tree ops: round 41 open for 3.2 s, 15 of 16 members in it, waiting for T5`."""
    o = report.open
    if o is None:
        return Text(f"tree {report.tree}: no round open")
    waits = ", ".join(o.waiting_for) if len(o.waiting_for) <= 8 else \
        f"{', '.join(o.waiting_for[:8])} and {len(o.waiting_for) - 8} more"
    return Text.assemble(f"tree {report.tree}: round {o.round} open for {o.open_for_s:.1f} s, "
                         f"{len(o.arrived)} of {len(o.arrived) + len(o.waiting_for)} members in it, ",
                         (f"waiting for {waits}" if o.waiting_for else "every member in it", "bold yellow"))


def events_table(records, catalogue, most: int = 20) -> Table:
    """The newest `most` events, labelled with the catalogue's names."""
    table = Table(title=f"{len(records)} new events", title_justify="left")
    for column in ("t_end (ns)", "thread", "op", "element / tree", "index", "bytes", "µs"):
        table.add_column(column, justify="right" if column in ("index", "bytes", "µs", "t_end (ns)") else "left")
    for event in catalogue.label(records[-most:]):
        flagged = event["flags"] & trace.ERROR
        table.add_row(str(event["t_end"]), event["thread"] or "-", Text(event["op"], style="red" if flagged else ""),
                      event["element"] or event["tree"] or "-", str(event["arg"]), str(event["nbytes"]),
                      f"{(event['t_end'] - event['t_start']) / 1e3:.1f}")
    return table


def system_bars(samples: list[NodeSample], width: int = 20) -> Table:
    """SESAME's display: one row per node, bars of CPU (user, then system, in cores; the scale is
    a core, or the busiest node's cores if more), memory (RSS, against the largest node's) and
    communication (messages in and out per second, against the busiest node's) over the newest
    interval."""
    table = Table(box=None, padding=(0, 1), show_header=True, header_style="bold")
    for column in ("node", "cpu: user, system (cores)", "memory (RSS)", "communication (in + out)"):
        table.add_column(column, no_wrap=True)
    cpu_scale = max([1.0] + [s.cpu_user + s.cpu_system for s in samples])
    rss_scale = max([1.0] + [s.rss_bytes for s in samples])
    msg_scale = max([1.0] + [s.msgs_in + s.msgs_out for s in samples])
    for s in samples:
        cpu = _bar([(s.cpu_user, "green"), (s.cpu_system, "red")], cpu_scale, width)
        cpu.append(f" {s.cpu_user + s.cpu_system:4.2f} ({s.cpu_user:.2f} + {s.cpu_system:.2f})")
        memory = _bar([(s.rss_bytes, "blue")], rss_scale, width // 2)
        memory.append(f" {s.rss_bytes / 2**20:,.0f} MiB")
        comm = _bar([(s.msgs_in, "cyan"), (s.msgs_out, "magenta")], msg_scale, width // 2)
        comm.append(f" {s.msgs_in + s.msgs_out:,.0f} msg/s, {(s.bytes_in + s.bytes_out) / 1024:,.1f} KiB/s")
        table.add_row(s.node, cpu, memory, comm)
    return table


def _bar(parts: list[tuple[float, str]], scale: float, width: int) -> Text:
    """A bar of `width` cells: each part's share of `scale` in its style, the rest dim."""
    bar = Text()
    used = 0
    total = 0.0
    for value, style in parts:
        total += max(0.0, value)
        cells = min(width, round(total / scale * width)) - used
        if cells > 0:
            bar.append("█" * cells, style=style)
            used += cells
    bar.append("·" * (width - used), style="grey42")
    return bar

HOP_STYLE = {"same host": "green", "same cluster": "yellow", "across clusters": "red"}


def matrix_tables(matrix, most: int = 16) -> Group:
    """Traffic by hop class (messages, bytes, share), bytes sent per host by hop class, and, for
    at most `most` ranks, the rank-by-rank matrix (bytes, messages; coloured by hop class); then,
    where the run made one-sided calls, their kind apart (calls and bytes by hop class, origin by target)."""
    hops = _hop_table(f"point-to-point traffic between {counted(matrix.ranks, 'rank')}", "messages",
                      matrix.by_hop(), matrix.messages, matrix.nbytes)
    hosts = Table(title="bytes sent per host", title_justify="left")
    hosts.add_column("host")
    for hop in HOPS:
        hosts.add_column(Text(hop, style=HOP_STYLE[hop]), justify="right")
    for host, row in matrix.per_host().items():
        hosts.add_row(host, *(f"{b:,}" for b in row))
    rma = []
    if matrix.rma_calls.any():
        rma.append(_hop_table("one-sided (RMA) traffic, origin to target", "calls", matrix.by_hop(rma=True),
                              matrix.rma_calls, matrix.rma_bytes))
    if matrix.ranks > most:
        return Group(hops, hosts, *rma, Text(f"({matrix.ranks} ranks: the rank-by-rank matrix is in --json)",
                                             style="dim"))
    grids = [_rank_grid(matrix, matrix.nbytes, matrix.messages, "bytes (messages) from rank (row) to rank (column)",
                        "from \\ to")]
    if rma:
        grids.append(_rank_grid(matrix, matrix.rma_bytes, matrix.rma_calls,
                                "one-sided bytes (calls) from origin (row) on target (column)", "origin \\ target"))
    return Group(hops, hosts, grids[0], *rma, *grids[1:])


def _hop_table(title: str, counting: str, by_hop, counts, nbytes) -> Table:
    total = int(nbytes.sum())
    table = Table(title=title, title_justify="left")
    for column in ("hop class", counting, "bytes", "share of bytes"):
        table.add_column(column, justify="left" if column == "hop class" else "right")
    for hop, n, b in by_hop:
        table.add_row(Text(hop, style=HOP_STYLE[hop]), f"{n:,}", f"{b:,}", f"{b / total:.0%}" if total else "")
    table.add_row("total", f"{int(counts.sum()):,}", f"{total:,}", "", style="bold")
    return table


def _rank_grid(matrix, nbytes, counts, title: str, corner: str) -> Table:
    grid = Table(title=title, title_justify="left")
    grid.add_column(corner)
    for d in range(matrix.ranks):
        grid.add_column(f"r{d}", justify="right")
    classes = matrix.hop_classes()
    for s in range(matrix.ranks):
        grid.add_row(f"r{s}", *(Text(f"{int(nbytes[s, d]):,} ({int(counts[s, d]):,})",
                                     style=HOP_STYLE[HOPS[classes[s, d]]]) if counts[s, d] else Text("·", style="dim")
                                for d in range(matrix.ranks)))
    return grid


def stacks_view(report, order: list[str]) -> Group:
    """`eventspace stack`: each group of threads with one stack (the largest first), what each is in,
    the frames (innermost last); then the threads that failed, and the nodes that did not answer."""
    shown = []
    for group in report.groups:
        shown.append(Text(group_title(group, order), style="bold"))
        ops: dict[str, list[str]] = {}
        for thread, op in group.in_flight.items():
            ops.setdefault(op, []).append(thread)
        for op, threads in ops.items():
            shown.append(Text(f"  in {op}" + ("" if len(group.threads) == 1 else f" ({', '.join(threads)})"),
                              style="yellow"))
        if group.omitted:
            shown.append(Text(f"  ... {group.omitted} outer frames", style="dim"))
        shown.extend(Text(f"  {frame}") for frame in group.frames)
    for thread, failure in report.failed.items():
        shown.append(Text(f"{thread} failed: {failure}", style=STATUS_STYLE[FAILED]))
    for node in report.not_answering:
        shown.append(Text(f"node {node}: not answering (a C call that holds the GIL, or paused)",
                          style=STATUS_STYLE[NOT_ANSWERING]))
    for node in report.gone:
        shown.append(Text(f"node {node}: gone", style=STATUS_STYLE[GONE]))
    if report.ended:
        shown.append(Text(f"not running: {', '.join(report.ended)}", style="dim"))
    return Group(*shown)


def waitstates_tables(report, most: int = 16) -> Group:
    """The wait states (monitors.waitstates.WaitReport): the clock's bound, per pattern its waiting,
    share of the MPI time and uncertain waits; per rank its waiting by pattern and what it caused;
    for at most `most` ranks, who waits for whom; per communicator; the top waits; what is pending."""
    def ms(ns: int) -> str:
        return f"{ns / 1e6:,.1f}"

    shown = [Text(f"wait states of {counted(report.ranks, 'rank')}: {report.waiting_ns / 1e6:,.1f} ms of "
                  f"{report.mpi_ns / 1e6:,.1f} ms in MPI calls, from {counted(report.records, 'record')}",
                  style="bold"),
             Text(report.clock_line, style="dim")]
    patterns = Table(title="per pattern", title_justify="left")
    for column in ("pattern", "waiting ms", "share of MPI time", "instances", "uncertain ms (instances)"):
        patterns.add_column(column, justify="left" if column == "pattern" else "right")
    for p in report.patterns:
        patterns.add_row(p.name, ms(p.waiting_ns), f"{p.share:.1%}", f"{p.instances:,}",
                         f"{ms(p.uncertain_ns)} ({p.uncertain_instances:,})" if p.uncertain_instances else "",
                         style="" if p.waiting_ns or p.uncertain_instances else "dim")
    shown.append(patterns)
    seen = [i for i, p in enumerate(report.patterns) if p.waiting_ns]
    ranks = Table(title="per rank (ms)", title_justify="left")
    for column in ("rank", "in MPI", "waiting", *(PATTERNS[i].name for i in seen), "caused"):
        ranks.add_column(column, justify="left" if column == "rank" else "right")
    for r in range(report.ranks):
        row = report.per_rank[r]
        ranks.add_row(f"r{r}", ms(report.mpi_ns_per_rank[r]), ms(sum(row)), *(ms(row[i]) for i in seen),
                      ms(sum(report.pairs[w][r] for w in range(report.ranks))))
    shown.append(ranks)
    if report.ranks <= most:
        pairs = Table(title="who waits for whom (ms)", title_justify="left", caption="row: who waited; column: for whom",
                      caption_justify="left")
        pairs.add_column("waiter \\ cause")
        for c in range(report.ranks):
            pairs.add_column(f"r{c}", justify="right")
        for w in range(report.ranks):
            pairs.add_row(f"r{w}", *(Text(ms(v), style="bold red" if v else "") if v else Text("·", style="dim")
                                     for v in report.pairs[w]))
        shown.append(pairs)
    else:
        shown.append(Text(f"({report.ranks} ranks: who waits for whom is in --json)", style="dim"))
    if len(report.communicators) > 1:
        comms = Table(title="per communicator (ms)", title_justify="left")
        for column in ("comm", "in MPI", *(PATTERNS[i].name for i in seen)):
            comms.add_column(column, justify="right")
        for comm, figures in report.communicators.items():
            comms.add_row(str(comm), ms(figures["mpi_ns"]),
                          *(ms(figures["waiting_ns"][PATTERNS[i].key]) for i in seen))
        shown.append(comms)
    if report.top:
        names = {p.key: p.name for p in PATTERNS}
        top = Table(title="the largest waits", title_justify="left")
        for column in ("rank", "waited in", "for", "on comm", "pattern", "calls", "ms"):
            top.add_column(column, justify="right" if column in ("on comm", "calls", "ms") else "left")
        for t in report.top:
            top.add_row(f"r{t.rank}", t.op, f"r{t.peer}" if t.peer >= 0 else "-", str(t.comm), names[t.pattern],
                        f"{t.calls:,}", ms(t.waiting_ns))
        shown.append(top)
    waiting = {k: v for k, v in report.pending.items() if v}
    if waiting:
        shown.append(Text("waiting for their other end: " + ", ".join(f"{v:,} {k.replace('_', ' ')}"
                                                                      for k, v in waiting.items()), style="dim"))
    if report.discarded:
        shown.append(Text(f"{report.discarded:,} records were discarded before they were read: the figures are short "
                          "of them (`eventspace mpirun --archive` keeps every record)", style="yellow"))
    return Group(*shown)


def waitstates_summary(report, most: int = 4) -> Group:
    """The dashboard's panel of wait states: each pattern with waiting (ms and share of the MPI
    time), the `most` largest who-waits-for-whom pairs, and the clock's bound."""
    patterns = Table(box=None, padding=(0, 1))
    for column in ("pattern", "ms", "share"):
        patterns.add_column(column, justify="left" if column == "pattern" else "right")
    for p in report.patterns:
        if p.waiting_ns or p.uncertain_ns:
            patterns.add_row(p.name, f"{p.waiting_ns / 1e6:,.1f}", f"{p.share:.0%}")
    pairs = sorted(((ns, w, c) for w, row in enumerate(report.pairs) for c, ns in enumerate(row) if ns), reverse=True)
    lines = [Text(f"r{w} waited {ns / 1e6:,.1f} ms for r{c}") for ns, w, c in pairs[:most]]
    bound = report.clock.get("bound_ns")
    clock = "clock bound: not known between hosts" if bound is None else f"clock bound {bound / 1e3:,.1f} µs"
    return Group(patterns if patterns.row_count else Text("no waits yet", style="dim"), *lines,
                 Text(f"{report.waiting_ns / 1e6:,.1f} of {report.mpi_ns / 1e6:,.1f} ms in MPI; {clock}", style="dim"))


@render.register
def _(state: DashboardState) -> Layout:
    """The frame: heartbeat grid | scopes and cost, a bar row per node (CPU, memory,
    communication), collective operations, notes."""
    layout = Layout()
    layout.split_column(Layout(name="top", ratio=2), Layout(name="nodes", size=max(3, len(state.nodes) + 3)),
                        Layout(name="bottom", ratio=2), Layout(name="notes", size=6))
    layout["top"].split_row(Layout(name="heartbeat", ratio=2), Layout(name="scopes", ratio=3))
    beat = heartbeat_grid(state.heartbeat) if state.heartbeat else Text("no heartbeat yet", style="dim")
    flagged = state.heartbeat.flagged if state.heartbeat else []
    subtitle = f"stalled: {', '.join(flagged)}" if flagged else "no thread stalled"
    layout["heartbeat"].update(Panel(beat, title="heartbeat per node / thread", subtitle=subtitle))
    scopes = Table(box=None, padding=(0, 1))
    for column in ("scope", "monitor", "view", "tree", "Hz", "events/s", "KiB/s", "busy"):
        scopes.add_column(column, justify="left" if column in ("scope", "monitor", "view", "tree") else "right",
                          no_wrap=True, overflow="ellipsis", max_width=24 if column == "view" else None)
    for a in state.scopes:
        e = a.entry
        scopes.add_row(e.name, e.monitor, e.view, f"{e.shape}/{e.placement}", f"{e.observe_rate:,.0f}",
                       f"{a.tuples_per_s:,.0f}", f"{a.bytes_per_s / 1024:,.1f}", f"{a.busy:.0%}")
    if state.events_per_s is None:
        pace = Text.assemble(("application: ", "bold"), f"step {state.steps:,}, {state.steps_per_s:,.1f} steps/s    ",
                             ("monitors' CPU: ", "bold"), f"{state.cpu_seconds:.1f} s in {state.elapsed:.0f} s",
                             # a share of a core over less than a second is mostly the monitor's own start
                             f" ({state.cpu_seconds / state.elapsed:.0%} of a core)" if state.elapsed >= 1 else "")
    else:
        pace = Text.assemble(("recorded: ", "bold"), f"{state.events_per_s:,.0f} events/s at {state.elapsed:.1f} s")
    layout["scopes"].update(Panel(Group(scopes, Text(""), pace), title="scopes and cost"))
    nodes = system_bars(state.nodes) if state.nodes else Text(
        "no system summaries: sampling is off (eventspace space switch on --run RUN --view role:system)", style="dim")
    layout["nodes"].update(Panel(nodes, title="nodes: cpu, memory, communication per interval"))
    ops = Table(box=None)
    for column in ("tree", "op", "rounds", "latency median µs", "p95 µs", "slowest contributor", "worst round"):
        ops.add_column(column, justify="left" if column in ("tree", "op", "slowest contributor", "worst round")
                       else "right")
    open_rounds = []
    for report in state.colops:
        for o in report.ops:
            ops.add_row(report.tree, o.op, str(o.rounds), f"{o.latency_median_us:,.0f}", f"{o.latency_p95_us:,.0f}",
                        f"{o.slowest} (+{o.lateness_us:,.0f} µs)", worst_round(o))
        if report.open is not None and report.open.open_for_s >= 1.0:
            open_rounds.append(open_round(report))
    trees = ", ".join(r.tree for r in state.colops)
    collectives = Panel(Group(ops, *open_rounds), title=f"collective operations{' on ' + trees if trees else ''}")
    if state.waits is None:
        layout["bottom"].update(collectives)
    else:   # an MPI run: its wait states beside its collectives
        layout["bottom"].split_row(Layout(collectives, name="collectives", ratio=3),
                                   Layout(Panel(waitstates_summary(state.waits), title="wait states"), name="waits",
                                          ratio=2))
    layout["notes"].update(Panel(Text("\n".join(state.notes[-4:]) or " "), title=f"{state.title} — {state.elapsed:.0f} s"))
    return layout


# Reports that one view draws as they are (an archive's matrix is a report too: `eventspace archive matrix`).
render.register(Matrix, matrix_tables)
render.register(WaitReport, waitstates_tables)
