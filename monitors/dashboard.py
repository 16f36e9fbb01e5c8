"""The live dashboard: heartbeat, observe rates, collective latencies, the monitors' own cost, the application's pace."""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field

from rich.console import Group
from rich.layout import Layout
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .colop import ColOpMon, ColOpReport
from .heartbeat import Heartbeat, HeartbeatReport
from .render import heartbeat_grid


@dataclass
class ScopeFigures:
    """One active scope, as the dashboard shows it."""

    name: str
    settings: str
    observe_rate: float      # pulls per second of pulling
    tuples_per_s: float      # over the dashboard's last period
    bytes_per_s: float


@dataclass
class DashboardState:
    """Everything one frame shows, as plain data (rendering is `render`)."""

    title: str
    elapsed: float
    heartbeat: HeartbeatReport | None = None
    colop: ColOpReport | None = None
    scopes: list[ScopeFigures] = field(default_factory=list)
    cpu_seconds: float = 0.0            # this monitoring process, user + system
    steps: int = 0                      # the application's slowest thread
    steps_per_s: float = 0.0
    notes: list[str] = field(default_factory=list)


class Dashboard:
    """Runs a heartbeat and a collective-operation monitor against a live run (plus any other
    monitors' scopes handed to `watch`), and turns them into a DashboardState every `update()`.
    `progress` is a callable giving {thread: {"step": n}} (e.g. a paths.Run's `progress`)."""

    def __init__(self, run, *, progress=None, title: str | None = None, heartbeat: bool = True,
                 colop: bool = True):
        self.started = time.monotonic()
        self.heartbeat = Heartbeat(run) if heartbeat else None
        self.colop = None
        if colop:
            try:
                self.colop = ColOpMon(run)
            except ValueError:
                self.colop = None  # no instrumented tree: nothing to show there
        self.title = title or "EventSpace"
        self.progress = progress
        self._watched: list[tuple[str, object]] = []
        if self.heartbeat:
            self.watch("heartbeat", self.heartbeat.scope)
        if self.colop:
            self.watch("colop", self.colop.scope)
        self._last_counts: dict[str, tuple[float, int, int]] = {}
        self._last_step: tuple[float, int] | None = None
        self.state = DashboardState(self.title, 0.0)

    def watch(self, name: str, scope) -> None:
        """Show this scope's figures too (several monitors' scopes may share one dashboard)."""
        self._watched.append((name, scope))

    def update(self, beat: bool = True) -> DashboardState:
        now = time.monotonic()
        state = DashboardState(self.title, now - self.started, self.state.heartbeat, self.state.colop)
        if beat and self.heartbeat:
            state.heartbeat = self.heartbeat.beat()
        if beat and self.colop:
            self.colop.poll()
            state.colop = self.colop.report()
        for name, scope in self._watched:
            stats = scope.stats()
            before = self._last_counts.get(name, (self.started, 0, 0))
            period = max(1e-6, now - before[0])
            s = scope.settings
            state.scopes.append(ScopeFigures(
                name, f"{s.shape}/{s.placement}", stats.observe_rate,
                (stats.tuples - before[1]) / period, (stats.bytes_in - before[2]) / period))
            self._last_counts[name] = (now, stats.tuples, stats.bytes_in)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        state.cpu_seconds = usage.ru_utime + usage.ru_stime
        if self.progress is not None:
            progress = self.progress()
            step = min((p.get("step", 0) for p in progress.values()), default=0)
            state.steps = step
            if self._last_step is not None and now > self._last_step[0]:
                state.steps_per_s = (step - self._last_step[1]) / (now - self._last_step[0])
            else:
                state.steps_per_s = self.state.steps_per_s
            self._last_step = (now, step)
        state.notes = list(self.state.notes)
        self.state = state
        return state

    def close(self) -> None:
        if self.heartbeat:
            self.heartbeat.close()
        if self.colop:
            self.colop.close()


def render(state: DashboardState) -> Layout:
    """The frame: heartbeat grid | scopes and cost, collective operations, notes."""
    layout = Layout()
    layout.split_column(Layout(name="top", ratio=2), Layout(name="bottom", ratio=2), Layout(name="notes", size=6))
    layout["top"].split_row(Layout(name="heartbeat", ratio=2), Layout(name="scopes", ratio=3))
    beat = heartbeat_grid(state.heartbeat) if state.heartbeat else Text("no heartbeat yet", style="dim")
    flagged = state.heartbeat.flagged if state.heartbeat else []
    subtitle = f"stalled: {', '.join(flagged)}" if flagged else "no thread stalled"
    layout["heartbeat"].update(Panel(beat, title="heartbeat per node / thread", subtitle=subtitle))
    scopes = Table(box=None, padding=(0, 1))
    for column in ("scope", "tree", "Hz", "events/s", "KiB/s"):
        scopes.add_column(column, justify="left" if column in ("scope", "tree") else "right", no_wrap=True)
    for s in state.scopes:
        scopes.add_row(s.name, s.settings, f"{s.observe_rate:,.0f}", f"{s.tuples_per_s:,.0f}", f"{s.bytes_per_s / 1024:,.1f}")
    pace = Text.assemble(("application: ", "bold"), f"step {state.steps:,}, {state.steps_per_s:,.1f} steps/s    ",
                         ("monitors' CPU: ", "bold"), f"{state.cpu_seconds:.1f} s in {state.elapsed:.0f} s "
                         f"({state.cpu_seconds / max(state.elapsed, 1e-6):.0%} of a core)")
    layout["scopes"].update(Panel(Group(scopes, Text(""), pace), title="scopes and cost"))
    ops = Table(box=None)
    for column in ("op", "rounds", "latency median µs", "p95 µs", "slowest contributor"):
        ops.add_column(column, justify="left" if column in ("op", "slowest contributor") else "right")
    if state.colop:
        for o in state.colop.ops:
            ops.add_row(o.op, str(o.rounds), f"{o.latency_median_us:,.0f}", f"{o.latency_p95_us:,.0f}",
                        f"{o.slowest} (+{o.lateness_us:,.0f} µs)")
    layout["bottom"].update(Panel(ops, title=f"collective operations{' on ' + state.colop.tree if state.colop else ''}"))
    layout["notes"].update(Panel(Text("\n".join(state.notes[-4:]) or " "), title=f"{state.title} — {state.elapsed:.0f} s"))
    return layout
