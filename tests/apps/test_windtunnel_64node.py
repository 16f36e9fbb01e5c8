"""The scale layout: the wind tunnel on 64 node processes, 1,024 threads and 19,601 trace
elements (pathmaps/windtunnel-64node.yaml), watched by a heartbeat, all on this one machine."""

import json
import os
import subprocess
import sys

import pytest

from apps.windtunnel.lattice import grid_sha256, reference_run
from monitors.heartbeat import ALIVE, STALLED
from paths import Pathmap
from runs import REPO, until_live

N, STEPS, SEED = 1024, 40, 7           # N = 1,024: one row of the grid per thread
STALL = ("T700", 25, 10.0)             # thread, step, seconds: late enough for the heartbeat to be watching
LAYOUT = REPO / "pathmaps" / "windtunnel-64node.yaml"


@pytest.mark.slow   # 6-7 s: make test-fast stays within its 3 minutes
def test_the_scale_layout_is_64_nodes_1024_threads_and_over_16000_trace_elements():
    pm = Pathmap.load(LAYOUT)
    assert (len(pm.nodes), len(pm.clusters), len(pm.threads)) == (64, 8, 1024)
    assert len(pm.collector_points()) >= 16_000  # a trace element each
    assert {len(pm.threads_on(n.name)) for n in pm.nodes} == {16}


@pytest.mark.slow
@pytest.mark.timeout(720)   # its own waits: 180 s up, 120 s for the stacks, 300 s to run, 60 s to end
def test_the_wind_tunnel_on_64_nodes_ends_with_the_reference_grid_and_its_stalled_thread_is_flagged(tmp_path):
    thread, at_step, seconds = STALL
    runner = subprocess.Popen(
        [sys.executable, "-m", "eventspace.cli", "run", "windtunnel", "--pathmap", str(LAYOUT), "--size", str(N),
         "--steps", str(STEPS), "--seed", str(SEED), "--stall", f"{thread}:{at_step}:{seconds}",
         "--run-dir", str(tmp_path), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    heartbeat = None
    beats_file = tmp_path / "heartbeat.jsonl"   # a beat of 1,024 threads fills a pipe: the heartbeat writes a file
    try:
        run_file = until_live(tmp_path / "windtunnel-64node.json", runner, 180)
        with open(beats_file, "w") as beats_out:
            heartbeat = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "monitor", "heartbeat", "--run",
                                          run_file.path, "--interval", "1", "--json"],
                                         stdout=beats_out, stderr=subprocess.STDOUT, text=True,
                                         env={**os.environ, "COLUMNS": "400"})  # its last line unwrapped
        # Every thread's stack, on 64 nodes: identical ones merged, none deeper than asked.
        shown = subprocess.run([sys.executable, "-m", "eventspace.cli", "stack", "--run", run_file.path, "--json",
                                "--depth", "6"], capture_output=True, text=True, timeout=120)
        out, err = runner.communicate(timeout=300)
        assert runner.returncode == 0, err[-3000:]
        heartbeat.wait(timeout=60)
    finally:
        for proc in (runner, heartbeat):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert shown.returncode == 0, shown.stderr
    stacks = json.loads(shown.stdout)
    seen = sum(len(g["threads"]) for g in stacks["groups"]) + len(stacks["ended"])
    assert seen == 1024 - sum(16 for _ in stacks["not_answering"] + stacks["gone"])
    assert len(stacks["groups"]) < 64 and all(len(g["stack"]) <= 6 for g in stacks["groups"])
    watched = beats_file.read_text()
    summary = json.loads(out)
    assert (summary["threads"], summary["nodes"], summary["steps"]) == (1024, 64, STEPS)
    assert summary["grid_sha256"] == grid_sha256(reference_run(N, STEPS, SEED))
    lines = [json.loads(line) for line in watched.splitlines() if line.startswith("{")]
    assert lines, f"the heartbeat printed no beat (exit {heartbeat.returncode}): {watched[-3000:]}"
    assert lines[-1]["ended"] and lines[-1]["why"] == "its program ended"   # its last JSON line: how it ended
    beats = lines[:-1]
    statuses = [{b["thread"]: b["status"] for b in beat["threads"]} for beat in beats]
    assert statuses and all(len(s) == 1024 for s in statuses), watched[-2000:]
    flagged_at = [i for i, s in enumerate(statuses) if s[thread] == STALLED]
    assert flagged_at, f"{thread} was never flagged: {[s[thread] for s in statuses]}"
    last_alive = max(i for i, s in enumerate(statuses[:flagged_at[0]]) if s[thread] == ALIVE)
    assert flagged_at[0] - last_alive <= 3, [s[thread] for s in statuses]
    others = {t for s in statuses for t, status in s.items() if status == STALLED and t != thread}
    assert not others, f"healthy threads flagged: {sorted(others)[:10]}"
    assert "run windtunnel-64node ended" in watched.splitlines()[-1]
