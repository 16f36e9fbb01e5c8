"""Processes and files left behind (issue 30, item 5): node processes that outlive their launcher or
ignore SIGTERM, `eventspace run` ended by SIGTERM, and MPI runs that end without their rank 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from polling import until
from runs import REPO, TWO_NODES, gone, pathmap_for, ring_app

import pastset
from eventspace.hosted import INFLIGHT
from paths import RunError, RunFile

TESTS = REPO / "tests"


def seconds_until(predicate, timeout: float, what: str) -> float:
    started = time.monotonic()
    until(predicate, timeout, what)
    return time.monotonic() - started


# A launcher of two nodes whose threads wait, each on an element of the other node, through a stage
# call (a collector sits in front of every element stage): a worker thread of each node server waits
# in Element.observe_indexed, with no timeout. It prints the nodes, then waits to be killed.
BLOCKED_RUN = textwrap.dedent("""\
    import dataclasses, json, sys
    sys.path.insert(0, sys.argv[2])
    from runs import ENV, TWO_NODES, pathmap_for, ring_app
    from paths import Instrument, Selector, launch
    pm = pathmap_for(ring_app(4), TWO_NODES, name="blocked")
    pm = dataclasses.replace(pm, instrument=Instrument(keep=50, collectors=(Selector(at=("sink",)),))).validate()
    with launch(pm, run_dir=sys.argv[1], env=ENV) as run:
        run.start("programs:block_forever")
        print(json.dumps({"pids": run.pids, "endpoints": run.endpoints}), flush=True)
        sys.stdin.read()
""")


def test_a_node_ends_within_seconds_of_sigterm_or_of_its_launcher_dying_whatever_its_workers_wait_in(tmp_path):
    launcher = subprocess.Popen([sys.executable, "-c", BLOCKED_RUN, str(tmp_path), str(TESTS)], cwd=REPO,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pids = {}
    try:
        run = json.loads(launcher.stdout.readline())
        pids = run["pids"]

        def waiting(node):   # a stage call of the other node's thread is inside this node's collector
            with pastset.connect(run["endpoints"][node], timeout=10) as client:
                return bool(client.call(INFLIGHT, timeout=10))

        until(lambda: waiting("A") and waiting("B"), 60, "both nodes' workers waiting")
        os.kill(pids["B"], signal.SIGTERM)
        took_term = seconds_until(lambda: gone(pids["B"]), 15, "node B ending after SIGTERM")
        launcher.kill()
        launcher.wait(10)
        took_orphan = seconds_until(lambda: gone(pids["A"]), 15, "node A ending after its launcher died")
        print(f"node B ended {took_term:.1f} s after SIGTERM, node A {took_orphan:.1f} s after its launcher died")
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
        launcher.stdout.close()
        launcher.stdin.close()
        for pid in pids.values():
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow   # 7-12 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_eventspace_run_ended_by_sigterm_stops_its_nodes_and_removes_its_files_as_ctrl_c_does(tmp_path):
    pathmap = tmp_path / "hung.yaml"
    pathmap_for(ring_app(4), TWO_NODES, name="hung").dump(pathmap)
    runs = tmp_path / "runs"
    launcher = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "run", "programs:block_forever",
                                 "--pathmap", str(pathmap), "--path", str(TESTS / "programs"), "--run-dir", str(runs)],
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pids = {}
    try:
        run = until(lambda: RunFile.find("hung", runs).check_live(), 60, "the run being live", ignoring=RunError)
        pids = run.pids
        run.attach_monitor("heartbeat")     # as a monitor that was killed would leave it
        assert sorted(p.name for p in runs.iterdir()) == [".lock", "hung.A.log", "hung.B.log", "hung.json",
                                                           "hung.monitors", "hung.pathmap.yaml",
                                                           "hung.pathmap.yaml.checked"]
        launcher.send_signal(signal.SIGTERM)    # what `timeout` and Slurm send
        _, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 128 + signal.SIGTERM, err
        assert "Traceback" not in err, err
        assert sorted(p.name for p in runs.iterdir()) == [".lock"]
        assert all(gone(pid) for pid in pids.values()), "a node outlived its run"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate()
        for pid in pids.values():
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
