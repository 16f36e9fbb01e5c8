"""What the monitors draw, captured from rich: one test per view, on plain report data."""

from rich.console import Console

from eventspace.roster import ActiveScope, ScopeEntry
from monitors.colop import ColOpReport, JoinStats, OpenRound, OpStats
from monitors.dashboard import DashboardState
from monitors.heartbeat import ALIVE, STALLED, WAITING, HeartbeatReport, ThreadBeat
from monitors.render import colop_tables, events_table, heartbeat_summary, heartbeat_table, open_round, render


def text(renderable, width=120) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def report() -> HeartbeatReport:
    return HeartbeatReport(0.0, [
        ThreadBeat("T0", "A", ALIVE, 10, 0.0),
        ThreadBeat("T1", "A", WAITING, 9, 2.5, "source T1/down0_0 (T1 -> down0_0) on A"),
        ThreadBeat("T2", "B", STALLED, 8, 3.0),
    ], gone={"C"}, not_answering={"D"})


def colop(tree="ops") -> ColOpReport:
    return ColOpReport(tree, [OpStats("allreduce", 12, 850.0, 1200.0, 5000.0, "T5", 0.9, 49_800.0,
                                      7, "T2", 10_012_345.0)],
                       [JoinStats(f"{tree}/root", "A", 4, 12, 900.0, 300.0, 0.0)], {"T5": 49_000.0}, 400,
                       OpenRound(12, ["T0", "T1", "T2"], ["T5"], 3.2))


def test_heartbeat_summary_names_only_the_threads_that_are_not_alive():
    out = text(heartbeat_summary(report(), "12:00:00"))
    assert "3 threads: " in out and "1 stalled" in out and "1 waiting" in out
    assert "nodes not answering: D; nodes gone: C" in out
    assert "T2" in out and "T1/down0_0" in out and "T0 " not in out


def test_heartbeat_table_has_a_row_per_thread():
    out = text(heartbeat_table(report()))
    assert all(t in out for t in ("T0", "T1", "T2")) and "stalled" in out and "2.5" in out


def test_colop_tables_show_ops_slowest_contributor_worst_round_and_joins():
    out = text(colop_tables(colop()), width=160)
    assert "allreduce" in out and "T5 (90% of rounds)" in out and "49,800" in out and "ops/root" in out
    assert "T2 +10,012,345 µs (round 7)" in out


def test_the_open_round_says_whom_it_waits_for():
    out = text(open_round(colop()))
    assert "tree ops: round 12 open for 3.2 s, 3 of 4 members in it, waiting for T5" in out


def test_events_table_labels_records_with_catalogue_names(catalogue):
    import numpy as np

    from eventspace import trace

    records = np.zeros(2, dtype=trace.DTYPE)
    records["collector"] = [1, 25]
    records["op"] = [trace.OP_CODES["move"], trace.OP_CODES["allreduce"]]
    records["t_start"], records["t_end"] = [100, 200], [1100, 3200]
    out = text(events_table(records, catalogue))
    assert "2 new events" in out and "move" in out and "row_0_1" in out and "allreduce" in out


def test_the_dashboard_frame_shows_every_panel():
    scope = ScopeEntry("0123456789ab", "getevent", "host:42", "all", "flat", "monitor", "stream", 64, 0.0,
                       1140, 10.0, 185_000, 6_500_000, 40_000, 1.0e9)
    state = DashboardState("EventSpace demo", 12.0, report(), [colop("ops"), colop("count")],
                           [ActiveScope(scope, 18_500.0, 650_000.0, 0.25)],
                           cpu_seconds=3.0, steps=1076, steps_per_s=89.4, notes=["6 s: reshaped getevent's scope"])
    out = text(render(state), width=200)
    for words in ("heartbeat per node / thread", "stalled: T2", "getevent", "host:42", "flat/monitor", "114",
                  "18,500", "25%", "step 1,076", "89.4 steps/s", "collective operations on ops, count",
                  "T5 (+49,800 µs)", "round 12 open for 3.2 s",
                  "reshaped getevent's scope", "EventSpace demo"):
        assert words in out, words
