"""The live dashboard: heartbeat, observe rates, collective latencies, wait states, the monitors' own cost, the application's pace."""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field

from eventspace.catalogue import Catalogue
from eventspace.roster import ActiveScope, Roster, roster_node
from eventspace.scope import resolve
from eventspace.system import NodeSample
from eventspace.view import ViewError
from pastset import PastSetError

from .colop import ColOpMon, ColOpReport, instrumented_trees
from .heartbeat import Heartbeat, HeartbeatReport
from .system import SystemMon
from .waitstates import WaitReport, WaitStatesMon, has_mpi


class RunEnded(PastSetError):
    """The run a dashboard watches ended during a read (the message says why)."""


@dataclass(frozen=True)
class DashboardState:
    """Everything one frame shows, as plain data (the dashboard's Report; `monitors.render.render`
    draws it): the reports of the monitors it runs, and its own figures."""

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
    live run, reads the run's roster of scopes (every monitor's, wherever it runs), and composes
    their reports into a DashboardState at every `read()`. `progress` is a callable giving {thread:
    {"step": n}} (e.g. a paths.Run's `progress`). `ended` is a callable giving why the run ended
    (None while it has not, as `paths.runfile.run_ended`): asked between panels, so that a read
    of a run that ends under it raises RunEnded at once instead of waiting for each panel's nodes."""

    def __init__(self, run, *, progress=None, title: str | None = None, heartbeat: bool = True,
                 colop: bool = True, trees: list[str] | None = None, system: bool = True, waitstates: bool = True,
                 ended=None):
        self.started = time.monotonic()
        self.ended = ended
        pathmap, endpoints = resolve(run)
        self.roster = Roster(endpoints[roster_node(pathmap)])
        self.title = title or "EventSpace"
        self.notes: list[str] = []    # what the notes panel shows, the newest last (`note`)
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
        self.state = DashboardState(self.title, 0.0, notes=list(self.notes))

    def _panel(self, make, nothing: str):
        """The monitor `make()` builds, or None with the note `nothing` when the run has nothing for it
        (its view selects no collector)."""
        try:
            return make()
        except ViewError:
            self.notes.append(nothing)
            return None

    def note(self, text: str) -> None:
        """Add a line to the notes panel, shown from the next read on."""
        self.notes.append(text)

    def read(self, beat: bool = True) -> DashboardState:
        """Read every monitor once (with `beat`; else only the figures that cost nothing) and
        return the new state, composed of their reports. Never raises for a node that does not
        answer: the heartbeat says so, and the other panels keep their last figures."""
        now = time.monotonic()
        last = self.state
        heartbeat, colops, waits, nodes = last.heartbeat, last.colops, last.waits, last.nodes
        if beat and self.heartbeat:
            heartbeat = self.heartbeat.read()
            self._check_ended()
        if beat and self.colops:
            colops = [mon.read() for mon in self.colops]
            self._check_ended()
        if beat and self.waitstates:
            waits = self.waitstates.read()
            self._check_ended()
        if beat and self.system:
            nodes = list(self.system.read().nodes)
            self._check_ended()
        scopes = last.scopes
        try:
            scopes = self.roster.active()
            self._scopes_seen.update(a.entry.scope for a in scopes)
        except PastSetError:
            pass
        usage = resource.getrusage(resource.RUSAGE_SELF)
        steps, steps_per_s = last.steps, last.steps_per_s
        if self.progress is not None:
            self._check_ended()
            try:
                progress = self.progress()
            except PastSetError:
                progress = None
            if progress:
                self.reported = True
                steps = min((p.get("step", 0) for p in progress.values()), default=0)
                if self._last_step is not None and now > self._last_step[0]:
                    steps_per_s = (steps - self._last_step[1]) / (now - self._last_step[0])
                self._last_step = (now, steps)
        self.state = DashboardState(self.title, now - self.started, heartbeat, colops, scopes, nodes,
                                    usage.ru_utime + usage.ru_stime, steps, steps_per_s, list(self.notes),
                                    waits=waits)
        return self.state

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
            counts = ", ".join(f"{n} {status}" for status, n in state.heartbeat.counts())
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
                "heartbeat": dict(state.heartbeat.counts()) if state.heartbeat else None,
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
