"""A recorded PATHS run (`eventspace run ... --archive | --record`): every node records its own trace
elements, the launcher builds the archive once they stop, and a flight recorder is dumped when a thread fails."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from eventspace.archive import Archive
from paths import Instrument, Selector
from runs import PROGRAMS, TWO_NODES, pathmap_for, ring_app

REPO = Path(__file__).parents[2]


def _eventspace(*args, cwd, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eventspace.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def test_a_recorded_run_archives_every_event_and_every_nodes_counts_reconcile(tmp_path):
    runs = tmp_path / "runs"
    done = _eventspace("run", "windtunnel", "--pathmap", REPO / "pathmaps" / "windtunnel-4node.yaml", "--size", "small",
                       "--steps", 40, "--run-dir", runs, "--archive", tmp_path / "wt.sqlite", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    (said,) = [line for line in done.stderr.splitlines() if line.startswith("archive ")]
    assert said.startswith(f"archive {tmp_path / 'wt.sqlite'}: ") and " events from 4 nodes, 0 discarded (A: made " in said
    with Archive.open(tmp_path / "wt.sqlite") as archive:
        info = archive.info
        _, ((sources,),) = archive.query("SELECT count(*) FROM events WHERE role = 'source'")
        accounts = json.loads(info.extra["recording"])
    assert sources == summary["exchanges"]   # a source record per border-row move and observe
    assert info.discarded == 0 and info.extra["ended"] == "the program ended"
    assert all(a["made"] == a["written"] == a["read"] and a["discarded"] == 0 for a in accounts.values()), accounts
    assert sum(a["read"] for a in accounts.values()) == info.tuples
    assert not list(runs.glob("*.recording*")), "the nodes' files stay after the archive was built"


def test_a_flight_recorder_is_dumped_when_a_thread_raises(tmp_path):
    pm = pathmap_for(ring_app(4), TWO_NODES, name="flight")
    pm = dataclasses.replace(pm, instrument=Instrument(keep=200, collectors=(Selector(at=("contribute",)),)))
    pm.validate().dump(tmp_path / "flight.yaml")
    done = _eventspace("run", "programs:fails_in_round", "--pathmap", tmp_path / "flight.yaml", "--path", PROGRAMS,
                       "--run-dir", tmp_path / "runs", "--arg", "thread=T1", "--arg", "round=3", "--record", "last:30s",
                       cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (dump,) = tmp_path.glob("flight.dump-*.sqlite")
    assert f"flight recorder (last:30s) dumped to {dump.name}: " in done.stderr, done.stderr
    with Archive.open(dump) as archive:
        _, rows = archive.query("SELECT thread, sum((flags & 1) = 0), sum(flags & 1) FROM events "
                                "WHERE role = 'contribute' GROUP BY thread")
        ended = archive.info.extra["ended"]
    # Rounds 0..2 on every thread; round 3, which T1 never entered, ended under the others (flag 1: it raised).
    assert {t: (ok, raised) for t, ok, raised in rows} == {"T0": (3, 1), "T1": (3, 0), "T2": (3, 1), "T3": (3, 1)}
    assert ended.startswith("ProgramFailed: thread T1 on node A raised ZeroDivisionError"), ended
