"""The dashboard on a live run: every instrumented tree, and every scope of every monitor of the run."""

import dataclasses

import pytest

from eventspace.roster import STALE_AFTER, monitor_name
from eventspace.scope import EventScope
from monitors.dashboard import Dashboard
from paths import Instrument, Selector, launch
from polling import until
from runs import ENV, THREE_NODES, pathmap_for, ring_app, start_monitor


def ring(name):
    """Six threads on three nodes; an allreduce (`count`) and a barrier (`step`) every step."""
    pm = pathmap_for(ring_app(6), THREE_NODES, rule="block", shape="kary:2", name=name)
    pm = dataclasses.replace(pm, clock=dataclasses.replace(pm.clock, samples=4))
    return dataclasses.replace(pm, instrument=Instrument(keep=200, collectors=(
        Selector(at=("source",)), Selector(trees=("count", "step"))))).validate()


def update_until(board, done, timeout=60.0, what="the dashboard to show it"):
    """The dashboard's state once `done(state)` holds (its state is read afresh at each look)."""
    return until(board.read, timeout, what, holds=done)


def names(state) -> set[str]:
    return {a.entry.name for a in state.scopes}


@pytest.mark.slow   # 7-12 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_the_dashboard_shows_every_tree_and_every_scope_of_every_monitor(tmp_path):
    with launch(ring("board"), run_dir=tmp_path, env=ENV) as run:
        run.start("programs:ring_forever", {"stop_after": 120, "pause": 0.01})
        other = start_monitor(["monitor", "getevent", "--view", "thread:T0"], run)   # another process
        board = Dashboard(run, progress=run.progress)
        try:
            state = update_until(board, lambda s: {"heartbeat", "colop count", "colop step", "getevent"} <= names(s)
                                 and len(s.colops) == 2 and all(r.rounds for r in s.colops) and len(s.nodes) == 3)
            assert [n.node for n in state.nodes] == ["A", "B", "C"]   # a bar row per node
            assert all(n.rss_bytes > 0 and n.msgs_in > 0 for n in state.nodes)
            assert [r.tree for r in state.colops] == ["count", "step"]
            assert all({o.op for o in r.ops} == {"allreduce" if r.tree == "count" else "barrier"}
                       for r in state.colops)
            getevent = next(a.entry for a in state.scopes if a.entry.name == "getevent")
            assert getevent.monitor != monitor_name() and getevent.monitor.endswith(f":{other.pid}")
            assert (getevent.view, getevent.shape, getevent.placement, getevent.mode) == \
                ("thread:T0", "flat", "monitor", "stream")
            assert getevent.pulls > 0 and getevent.observe_rate > 0 and getevent.open
            heartbeat = next(a.entry for a in state.scopes if a.entry.name == "heartbeat")
            assert heartbeat.monitor == monitor_name() and (heartbeat.shape, heartbeat.placement) == ("per-node", "near")

            # A scope that closes leaves the roster at once; one whose monitor died, once it goes stale.
            briefly = EventScope(run, "thread:T1", name="briefly")
            update_until(board, lambda s: "briefly" in names(s))
            briefly.close()
            assert "briefly" not in names(board.read(beat=False))
            other.kill()
            other.wait()
            update_until(board, lambda s: "getevent" not in names(s), timeout=STALE_AFTER + 10,
                         what="a dead monitor's scope stayed")
        finally:
            board.close()
            if other.poll() is None:
                other.kill()
                other.wait()
            other.stdout.close()

        picked = Dashboard(run, trees=["step"], heartbeat=False)
        try:
            state = update_until(picked, lambda s: s.colops and s.colops[0].rounds)
            assert [r.tree for r in state.colops] == ["step"]
        finally:
            picked.close()
