"""`eventspace demo`: the wind tunnel under three monitors and the dashboard, reshaped halfway."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

DEFAULT_PATHMAP = Path(__file__).resolve().parents[1] / "pathmaps" / "windtunnel-4node.yaml"


@dataclass
class Phase:
    """The figures of one half of the demo (before and after the getevent scope is reshaped)."""

    tree: str
    seconds: float = 0.0
    steps: int = 0
    pulls: int = 0
    pull_seconds: float = 0.0
    events: int = 0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    @property
    def observe_rate(self) -> float:
        return self.pulls / self.pull_seconds if self.pull_seconds else 0.0


def run_demo(duration: float = 30.0, trace: str | Path = "demo-trace.pftrace", pathmap=DEFAULT_PATHMAP,
             size: str = "small", console: Console | None = None, live: bool = True) -> dict:
    """Launch the wind tunnel, attach heartbeat, getevent (to `trace`) and colop, show the dashboard,
    reshape getevent's scope from flat/monitor to kary:2/near halfway, stop everything; returns
    the summary (also printed)."""
    from paths import Pathmap, launch

    from .dashboard import Dashboard
    from .getevent import GetEventMon
    from .render import render

    console = console or Console()
    pm = Pathmap.load(pathmap)
    trace = Path(trace).resolve()
    phases = [Phase("flat/monitor"), Phase("kary:2/near")]
    with launch(pm) as run:
        pids = run.pids
        # The monitors attach first (clock synchronisation takes a moment), then the run starts.
        getevent = GetEventMon(run, "all | role:system", trace, tree="flat", placement="monitor")
        board = Dashboard(run, progress=run.progress, title=f"EventSpace demo: wind tunnel on {pm.name}")
        run.start("windtunnel", {"size": size, "steps": 10_000_000, "until": time.time() + duration})
        board.note(f"getevent streams every event to {trace.name} through a flat tree in this process")
        started = time.monotonic()
        phase, phase_started, steps_at = 0, started, 0
        last_beat = 0.0
        try:
            with Live(render(board.read()), console=console, refresh_per_second=4, transient=False,
                      auto_refresh=False) as view:
                while time.monotonic() - started < duration + 30 and _running(run):
                    now = time.monotonic()
                    if phase == 0 and now - started >= duration / 2:
                        phases[0] = _close_phase(phases[0], getevent, now - phase_started, board.state.steps - steps_at)
                        before = getevent.stats.pulls, getevent.scope.stats().seconds, getevent.stats.tuples
                        getevent.scope.reconfigure(tree="kary:2", placement="near")
                        board.note(
                            f"{now - started:.0f} s: reshaped getevent's scope from flat/monitor to kary:2/near "
                            f"(joins now run inside the node servers)")
                        phase, phase_started, steps_at = 1, now, board.state.steps
                        phases[1].pulls, phases[1].pull_seconds, phases[1].events = (-before[0], -before[1], -before[2])
                    getevent.read()
                    beat = now - last_beat >= 1.0
                    if beat:
                        last_beat = now
                    view.update(render(board.read(beat=beat)), refresh=True)
                    time.sleep(0.2)
            now = time.monotonic()
            phases[phase] = _close_phase(phases[phase], getevent, now - phase_started, board.state.steps - steps_at)
            results = run.wait(timeout=60)
            getevent.read()
        finally:
            board.close()
            getevent.close()
    steps = min(r["steps"] for r in results.values())
    summary = {
        "pathmap": pm.name, "threads": len(pm.threads), "nodes": len(pm.nodes), "steps": steps,
        "events": getevent.stats.tuples, "discarded": getevent.stats.discarded, "trace": str(trace),
        "phases": [{"tree": p.tree, "seconds": p.seconds, "steps_per_s": p.steps_per_s,
                    "observe_rate": p.observe_rate, "events": p.events} for p in phases],
        "stalled": board.state.heartbeat.flagged if board.state.heartbeat else [],
        "node_pids": pids,
    }
    table = Table(title="demo summary")
    for column in ("getevent scope", "seconds", "app steps/s", "observe rate Hz", "events streamed"):
        table.add_column(column, justify="left" if column == "getevent scope" else "right")
    for p in phases:
        table.add_row(p.tree, f"{p.seconds:.1f}", f"{p.steps_per_s:.1f}", f"{p.observe_rate:,.0f}", f"{p.events:,}")
    console.print(table)
    console.print(f"{steps} steps of {len(pm.threads)} threads on {len(pm.nodes)} nodes; "
                  f"{summary['events']:,} events streamed, {summary['discarded']:,} discarded before they were read.")
    viewers = "https://ui.perfetto.dev" + (" or chrome://tracing" if trace.suffix == ".json" else "")
    console.print(f"trace: {trace} (open it in {viewers})")
    return summary


def _close_phase(phase: Phase, getevent, seconds: float, steps: int) -> Phase:
    stats = getevent.scope.stats()
    return Phase(phase.tree, seconds, steps, phase.pulls + stats.pulls, phase.pull_seconds + stats.seconds,
                 phase.events + getevent.stats.tuples)


def _running(run) -> bool:
    from paths.node import INFO

    return any(run.client(n.name).call(INFO, timeout=5)["running"] for n in run.pathmap.nodes
               if run.pathmap.threads_on(n.name))
