"""The live dashboard: heartbeat, observe rates, collective latencies, wait states, the monitors' own cost, the application's pace."""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field

from rich.console import Group
from rich.layout import Layout
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from eventspace.catalogue import Catalogue
from eventspace.roster import ActiveScope, Roster, roster_node
from eventspace.scope import resolve
from eventspace.system import NodeSample
from eventspace.view import ViewError
from pastset import PastSetError

from .colop import ColOpMon, ColOpReport, instrumented_trees
from .heartbeat import Heartbeat, HeartbeatReport
from .render import heartbeat_grid, open_round, status_counts, system_bars, waitstates_summary, worst_round
from .system import SystemMon
from .waitstates import WaitReport, WaitStatesMon, has_mpi


class RunEnded(PastSetError):
    """The run a dashboard watches ended during an update (the message says why)."""


@dataclass
class DashboardState:
    """Everything one frame shows, as plain data (rendering is `render`)."""

    title: str
    elapsed: float
    heartbeat: HeartbeatReport | None = None
    colops: list[ColOpReport] = field(default_factory=list)   # one per tree shown
    scopes: list[ActiveScope] = field(default_factory=list)   # every active scope of the run
    nodes: list[NodeSample] = field(default_factory=list)     # each node's newest system summary
    cpu_seconds: float = 0.0            # this monitoring process, user + system
    steps: int = 0                      # the application's slowest thread
    steps_per_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    events_per_s: float | None = None   # a replay's: events recorded per second in the interval (None live)
    waits: WaitReport | None = None     # an MPI run's wait states so far

    def as_dict(self) -> dict:
        """The frame as plain data (a line of `eventspace dashboard --json`)."""
        return {"title": self.title, "elapsed": self.elapsed,
                "heartbeat": self.heartbeat.as_dict() if self.heartbeat else None,
                "colops": [report.as_dict() for report in self.colops],
                "scopes": [scope.as_dict() for scope in self.scopes],
                "nodes": [node.as_dict() for node in self.nodes],
                "cpu_seconds": self.cpu_seconds, "steps": self.steps, "steps_per_s": self.steps_per_s,
                "notes": list(self.notes), "events_per_s": self.events_per_s,
                "waits": self.waits.as_dict() if self.waits else None}


class Dashboard:
    """Runs a heartbeat, a collective-operation monitor per instrumented tree (or the `trees`
    named), on an MPI run (with `waitstates`) a WaitStatesMon (who waits for whom, by pattern)
    and, with `system`, a SystemMon (each node's CPU, memory and communication) against a
    live run, reads the run's roster of scopes (every monitor's, wherever it runs), and turns
    them into a DashboardState every `update()`. `progress` is a callable giving {thread:
    {"step": n}} (e.g. a paths.Run's `progress`). `ended` is a callable giving why the run ended
    (None while it has not, as `paths.runfile.run_ended`): asked between panels, so that an update
    of a run that ends under it raises RunEnded at once instead of waiting for each panel's nodes."""

    def __init__(self, run, *, progress=None, title: str | None = None, heartbeat: bool = True,
                 colop: bool = True, trees: list[str] | None = None, system: bool = True, waitstates: bool = True,
                 ended=None):
        self.started = time.monotonic()
        self.ended = ended
        pathmap, endpoints = resolve(run)
        self.roster = Roster(endpoints[roster_node(pathmap)])
        self.title = title or "EventSpace"
        self.state = DashboardState(self.title, 0.0)
        # A panel whose view selects nothing in this run (an MPI run samples no system summaries; a
        # run may have no collectors on its threads) says so, and the others go on.
        self.heartbeat = self._panel(lambda: Heartbeat(run), "no heartbeat: no thread of this run has a collector "
                                     "(`eventspace pathmap instrument` adds them)") if heartbeat else None
        if not colop:
            trees = []
        elif trees is None:
            trees = instrumented_trees(run)  # none instrumented: nothing to show there
        self.colops = [ColOpMon(run, tree) for tree in trees]
        # Only an MPI run's records have wait states; any other run's dashboard shows no such panel.
        self.waitstates = WaitStatesMon(run) if waitstates and has_mpi(Catalogue(pathmap)) else None
        self.system = self._panel(lambda: SystemMon(run), "no system summaries: the run's nodes sample none (its "
                                  "pathmap says `system: false`, as an MPI run's does)") if system else None
        self.progress = progress
        self.reported = False   # whether any thread has reported its progress (an MPI rank never does)
        self._last_step: tuple[float, int] | None = None
        self._scopes_seen: set[str] = set()

    def _panel(self, make, nothing: str):
        """The monitor `make()` builds, or None with the note `nothing` when the run has nothing for it
        (its view selects no collector)."""
        try:
            return make()
        except ViewError:
            self.state.notes.append(nothing)
            return None

    def update(self, beat: bool = True) -> DashboardState:
        """Pull every monitor once (with `beat`; else only the figures that cost nothing) and
        return the new state. Never raises for a node that does not answer: the heartbeat says so,
        and the other panels keep their last figures."""
        now = time.monotonic()
        state = DashboardState(self.title, now - self.started, self.state.heartbeat, self.state.colops,
                               self.state.scopes, self.state.nodes, steps=self.state.steps,
                               steps_per_s=self.state.steps_per_s, waits=self.state.waits)
        if beat and self.heartbeat:
            state.heartbeat = self.heartbeat.beat()
            self._check_ended()
        if beat and self.colops:
            for mon in self.colops:
                mon.poll()
            state.colops = [mon.report() for mon in self.colops]
            self._check_ended()
        if beat and self.waitstates:
            state.waits = self.waitstates.poll()
            self._check_ended()
        if beat and self.system:
            state.nodes = self.system.poll()
            self._check_ended()
        try:
            state.scopes = self.roster.active()
            self._scopes_seen.update(a.entry.scope for a in state.scopes)
        except PastSetError:
            pass
        usage = resource.getrusage(resource.RUSAGE_SELF)
        state.cpu_seconds = usage.ru_utime + usage.ru_stime
        if self.progress is not None:
            self._check_ended()
            try:
                progress = self.progress()
            except PastSetError:
                progress = None
            if progress:
                self.reported = True
                step = min((p.get("step", 0) for p in progress.values()), default=0)
                state.steps = step
                if self._last_step is not None and now > self._last_step[0]:
                    state.steps_per_s = (step - self._last_step[1]) / (now - self._last_step[0])
                self._last_step = (now, step)
        state.notes = list(self.state.notes)
        self.state = state
        return state

    def _check_ended(self) -> None:
        why = self.ended() if self.ended is not None else None
        if why:
            raise RunEnded(why)

    def summary(self) -> str:
        """One line of what the dashboard saw."""
        state = self.state
        parts = [f"watched {state.elapsed:.0f} s"]
        if self.reported:
            parts.append(f"the application reached step {state.steps:,}")
        if state.heartbeat:
            counts = ", ".join(f"{n} {status}" for status, n in status_counts(state.heartbeat))
            parts.append(f"last heartbeat: {counts}")
        for report in state.colops:
            parts.append(f"tree {report.tree}: {report.rounds:,} rounds")
        if state.waits:
            parts.append(f"wait states: {state.waits.waiting_ns / 1e6:,.1f} ms waiting of "
                         f"{state.waits.mpi_ns / 1e6:,.1f} ms in MPI")
        parts.append(f"{len(self._scopes_seen)} scopes seen; monitors' CPU {state.cpu_seconds:.1f} s")
        return "; ".join(parts)

    def figures(self) -> dict:
        """What `summary` says, as plain data (the last JSON object of `eventspace dashboard --json`)."""
        state = self.state
        return {"watched_s": round(state.elapsed, 3), "steps": state.steps if self.reported else None,
                "heartbeat": dict(status_counts(state.heartbeat)) if state.heartbeat else None,
                "trees": {report.tree: report.rounds for report in state.colops},
                "waits": {p.key: p.waiting_ns for p in state.waits.patterns} if state.waits else None,
                "scopes_seen": len(self._scopes_seen), "cpu_seconds": round(state.cpu_seconds, 3)}

    def close(self) -> None:
        if self.heartbeat:
            self.heartbeat.close()
        for mon in self.colops:
            mon.close()
        if self.waitstates:
            self.waitstates.close()
        if self.system:
            self.system.close()
        self.roster.close()


def render(state: DashboardState) -> Layout:
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
