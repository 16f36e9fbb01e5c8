"""`eventspace demo` end to end, as `make demo` runs it (shortened), leaving nothing behind."""

import json
import os
import subprocess
import sys

import pytest

from pftrace_decode import decode
from runs import gone


@pytest.mark.slow
@pytest.mark.timeout(300)   # its own wait: 240 s for the demo
def test_the_demo_runs_end_to_end_and_writes_a_native_perfetto_trace(tmp_path):
    trace = tmp_path / "demo-trace.pftrace"   # the default, as `make demo` writes it
    runs = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "eventspace.cli", "demo", "--duration", "5", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "COLUMNS": "120", "EVENTSPACE_RUN_DIR": str(runs)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    (summary,) = [json.loads(line) for line in proc.stdout.splitlines()]   # --json: stdout is the summary alone
    assert summary["threads"] == 16 and summary["nodes"] == 4 and summary["steps"] > 0
    assert [p["tree"] for p in summary["phases"]] == ["flat/monitor", "kary:2/near"]
    assert all(p["observe_rate"] > 0 and p["steps_per_s"] > 0 for p in summary["phases"])
    assert summary["events"] > 0 and summary["stalled"] == []
    assert summary["trace"] == str(trace)
    decoded = decode(trace)
    # Every event streamed is a slice, or a value on a counter track (a node's system summary).
    assert decoded.counters and decoded.counter_tracks
    assert len([s for s in decoded.slices if s.name != "read"]) + len(decoded.counters) == summary["events"]
    assert len({name for _, _, name, _ in decoded.threads.values()} & {f"T{i}" for i in range(16)}) == 16
    assert decoded.flow_starts and set(decoded.flow_starts) == set(decoded.flow_ends)
    assert "demo summary" in proc.stderr and "ui.perfetto.dev" in proc.stderr
    # The run file was announced; nothing left running, no run file left behind.
    assert f"run windtunnel-4node: run file {runs / 'windtunnel-4node.json'}" in proc.stderr
    assert not list(runs.glob("*.json")) and not list(runs.glob("*.yaml"))
    assert len(summary["node_pids"]) == 4 and all(gone(pid) for pid in summary["node_pids"].values())
