"""The heartbeat monitor on a live wind-tunnel run with one thread made to stall."""

import time

import pytest

from monitors.heartbeat import ALIVE, IDLE, STALLED, WAITING, Heartbeat
from paths import Pathmap, launch
from runs import REPO

INTERVAL = 0.25


def test_a_stalled_thread_is_flagged_within_three_intervals_and_no_healthy_one_ever(tmp_path):
    pm = Pathmap.load(REPO / "pathmaps" / "windtunnel-4node.yaml")
    with launch(pm, run_dir=tmp_path) as run:
        run.start("windtunnel", {"size": 64, "steps": 100_000, "until": time.time() + 5,
                                 "stall": {"thread": "T6", "at_step": 60, "seconds": 2.0}})
        reports = []
        with Heartbeat(run) as heartbeat:
            while len(reports) < 28:
                started = time.monotonic()
                reports.append(heartbeat.beat())
                time.sleep(max(0.0, INTERVAL - (time.monotonic() - started)))
        run.wait(timeout=60)
    statuses = [{b.thread: b.status for b in r.threads} for r in reports]
    assert all(set(s) == {f"T{i}" for i in range(16)} for s in statuses)
    flagged_at = [i for i, s in enumerate(statuses) if s["T6"] == STALLED]
    assert flagged_at, "T6 was never flagged"
    last_alive = max(i for i, s in enumerate(statuses[:flagged_at[0]]) if s["T6"] == ALIVE)
    assert flagged_at[0] - last_alive <= 3
    # While T6 is stalled, the others wait on it, and say in which operation.
    during = reports[flagged_at[0]]
    waiting = [b for b in during.threads if b.status == WAITING]
    assert len(waiting) >= 2 and all(b.waiting_in for b in waiting)
    # No other thread is ever flagged, and after the run everyone is idle, not stalled.
    assert all(status != STALLED for s in statuses for t, status in s.items() if t != "T6")
    assert any(s["T6"] == ALIVE for s in statuses[flagged_at[-1]:]), "T6 never recovered"
    assert set(statuses[-1].values()) == {IDLE}


def test_a_pathmap_without_collectors_cannot_be_watched(tmp_path):
    pm = Pathmap.load(REPO / "pathmaps" / "windtunnel-2node.yaml")
    with launch(pm, run_dir=tmp_path) as run:
        with pytest.raises(ValueError, match="no collectors: instrument it"):
            Heartbeat(run)
