"""Monitors end when their run ends (its launcher removed the run file, or every node is gone),
exit 0 and say so in one line, whatever their scope's shape or placement; a paused run has not ended."""

import dataclasses
import json
import os
import signal
import subprocess
import sys

import pytest

from paths import Instrument, Selector, launch
from paths.runfile import run_ended
from polling import until
from runs import ENDS_WITHIN, ENV, THREE_NODES, finish, in_roster, pathmap_for, read_until, ring_app, start_monitor


def ring(name, keep=100):
    """Six threads on nodes A, B, C passing a token and running an allreduce (`count`) and a
    barrier (`step`) every step; every source and every tree point collected."""
    pm = pathmap_for(ring_app(6), THREE_NODES, rule="block", shape="kary:2", name=name)
    return dataclasses.replace(pm, instrument=Instrument(keep=keep, collectors=(
        Selector(at=("source",)), Selector(trees=("count", "step"))))).validate()


def end_run(run, how):
    """End a run: `stop` as its launcher does (nodes stopped, run file removed), or `kill`
    every node with SIGKILL while the launcher lives on (the run file stays)."""
    if how == "stop":
        run.stop()
    else:
        for node in run.endpoints:
            run.kill(node)
        for proc in run._processes.values():
            proc.wait(10)


# A launcher that stops its run waits, its nodes still serving, for the final read of every monitor
# attached: the monitor sees the program's end. Nodes killed under it end the run all the same.
REASONS = {"stop": ("its program ended",), "kill": ("every node is gone",)}

SLOW = pytest.mark.slow
CASES = [
    (["monitor", "heartbeat"], "stop", "threads:"),
    (["monitor", "heartbeat", "--placement", "near", "--tree", "per-node"], "kill", "threads:"),
    pytest.param(["monitor", "heartbeat", "--placement", "monitor", "--tree", "kary:2"], "kill", "threads:",
                 marks=SLOW),
    pytest.param(["monitor", "heartbeat", "--placement", "near", "--tree", "flat"], "stop", "threads:", marks=SLOW),
    (["monitor", "colop", "--tree", "count"], "stop", "collective operations on tree count"),
    pytest.param(["monitor", "colop", "--tree", "step"], "kill", "collective operations on tree step", marks=SLOW),
    pytest.param(["monitor", "getevent", "--json"], "stop", '"events"', marks=SLOW),
    (["dashboard"], "stop", None),
    pytest.param(["dashboard", "--tree", "count"], "kill", None, marks=SLOW),
]


@pytest.mark.parametrize("command, how, shown", CASES, ids=lambda c: " ".join(c) if isinstance(c, list) else c)
def test_a_monitor_ends_with_one_line_when_its_run_ends(tmp_path, command, how, shown):
    name = "ends"
    with launch(ring(name), run_dir=tmp_path, env=ENV) as run:
        run.start("programs:ring_forever", {"stop_after": 300, "pause": 0.01})
        proc = start_monitor(command, run)
        try:
            if shown is not None:
                read_until(proc, shown)
            else:
                # The dashboard draws its frames where only a terminal sees them: its scope says it pulls.
                until(lambda: in_roster(run, proc.pid) or proc.poll() is not None, 60, "the dashboard pulling")
                assert proc.poll() is None, proc.stdout.read()
            end_run(run, how)
            code, lines = finish(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 0, "\n".join(line[-300:] for line in lines[-30:])
    if "--json" in command:   # stdout: JSON lines, the last saying how the run ended; the line for people apart
        last = json.loads(lines[-1])
        assert last["ended"] and last["why"] in REASONS[how], last
        lines = proc.people
    assert any(lines[-1].startswith(f"run {name} ended: {why}; ") for why in REASONS[how]), lines[-5:]


def test_a_paused_run_has_not_ended_one_dead_node_neither_every_dead_node_has(tmp_path):
    with launch(ring("paused"), run_dir=tmp_path, env=ENV) as run:
        run_file = run.run_file
        assert run_ended(run_file) is None
        for pid in run.pids.values():
            os.kill(pid, signal.SIGSTOP)
        try:
            assert run_ended(run_file) is None  # stopped processes still accept connections
        finally:
            for pid in run.pids.values():
                os.kill(pid, signal.SIGCONT)
        run.kill("A")
        run._processes["A"].wait(10)
        assert run_ended(run_file) is None
        for node in ("B", "C"):
            run.kill(node)
            run._processes[node].wait(10)
        assert run_ended(run_file) == "every node is gone"
    assert run_ended(run_file) == "its launcher removed the run file"


def test_eventspace_scope_stops_pulling_a_run_that_ended(tmp_path):
    with launch(ring("pulled"), run_dir=tmp_path, env=ENV) as run:
        run.start("programs:ring_forever", {"stop_after": 300, "pause": 0.01})
        proc = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "scope", "--run", run.run_file.path,
                                 "--pulls", "100000", "--max-rate", "20", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            until(lambda: in_roster(run, proc.pid) or proc.poll() is not None, 60, "eventspace scope pulling")
            assert proc.poll() is None
            end_run(run, "kill")
            code, lines = finish(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    figures = json.loads(lines[-1])
    assert code == 0 and figures["ended"] == "every node is gone" and 0 < figures["pulls"] < 100000


@pytest.mark.slow   # 7-9 s: make test-fast stays within its 3 minutes
def test_monitors_read_what_a_run_made_last_before_its_nodes_stop(tmp_path):
    """The launcher waits for the final read of every monitor attached: colop counts every round the
    program made, and the dashboard shows the step it ended at, though both pull only every 5 s."""
    def attach(command, run):
        return subprocess.Popen([sys.executable, "-m", "eventspace.cli", *command, "--run", run.run_file.path,
                                 "--json", "--interval", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    with launch(ring("last", keep=20_000), run_dir=tmp_path, env=ENV) as run:   # nothing discarded
        monitors = [attach(["monitor", "colop", "--tree", "count"], run), attach(["dashboard"], run)]
        try:
            for proc in monitors:
                json.loads(proc.stdout.readline())   # attached, and pulled once
            steps = set(run.run("programs:ring_forever", {"stop_after": 1.5, "pause": 0.002}).values())
            run.stop()
            ended = [finish_json(proc) for proc in monitors]
        finally:
            for proc in monitors:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    (steps,) = steps
    colop, board = (lines[-1] for lines in ended)
    assert colop["ended"] and board["ended"] and colop["why"] == board["why"] == "its program ended"
    assert colop["rounds"] == steps + 1      # an allreduce per step, and the one that said stop
    assert board["steps"] == steps and board["trees"]["count"] == steps + 1


def finish_json(proc) -> list[dict]:
    """The JSON lines a monitor printed on stdout (nothing else is there), once it ended by itself."""
    out, err = proc.communicate(timeout=ENDS_WITHIN)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()]
