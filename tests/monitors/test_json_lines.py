"""Every command that takes --json prints JSON only on stdout, one object (or array) per line, so that
`jq` reads it; the lines meant for people go to stderr."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from paths import Instrument, Selector, launch
from runs import ENV, REPO, THREE_NODES, pathmap_for, ring_app


def eventspace(*args, cwd, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eventspace.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def json_lines(proc: subprocess.CompletedProcess) -> list:
    """Every line of the command's stdout, each read as JSON (one that is not fails the test)."""
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines, proc.stderr[-2000:]
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from live_ring(tmp_path_factory, "jsonlines")


def live_ring(tmp_path_factory, name: str):
    """A live run of six threads passing a token, every source and tree point collected: (run, a folder)."""
    tmp_path = tmp_path_factory.mktemp(name)
    pm = pathmap_for(ring_app(6), THREE_NODES, rule="block", shape="kary:2", name=name)
    pm = dataclasses.replace(pm, instrument=Instrument(keep=500, collectors=(
        Selector(at=("source",)), Selector(trees=("count", "step"))))).validate()
    with launch(pm, env=ENV) as run:
        run.start("programs:ring_forever", {"stop_after": 600, "pause": 0.01})
        yield run, tmp_path


MONITORS = [["monitor", "heartbeat"], ["monitor", "colop", "--tree", "count"], ["monitor", "classes"],
            ["monitor", "getevent"], ["dashboard"], ["monitor", "dashboard"]]


@pytest.mark.parametrize("command", MONITORS, ids=" ".join)
def test_a_monitor_prints_json_lines_and_a_last_one_that_says_how_it_ended(ring, command):
    run, tmp_path = ring
    done = eventspace(*command, "--run", run.name, "--json", "--interval", "0.3", "--duration", "1.5", cwd=tmp_path)
    # The first thing it says, before its scope is built, is that it found the run (stderr under --json).
    kind = command[1] if command[0] == "monitor" else command[0]
    assert done.stderr.splitlines()[0].startswith(f"{kind}: watching run {run.name} (3 nodes"), done.stderr
    *frames, last = json_lines(done)
    assert frames and all(isinstance(frame, dict) and "ended" not in frame for frame in frames)
    assert last["ended"] is False and last["run"] == run.name and last["why"] is None


@pytest.mark.slow   # 7-12 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_the_other_commands_print_json_only(ring):
    run, tmp_path = ring
    runs = json_lines(eventspace("runs", "--json", cwd=tmp_path))
    assert len(runs) == 1 and run.name in {r["name"] for r in runs[0]}
    (figures,) = json_lines(eventspace("scope", "--run", run.name, "--pulls", "3", "--json", cwd=tmp_path))
    assert figures["pulls"] == 3
    archive = tmp_path / "ring.sqlite"
    json_lines(eventspace("monitor", "getevent", "--run", run.name, "--out", archive, "--duration", "1", "--json",
                          cwd=tmp_path))
    (rows,) = json_lines(eventspace("archive", "query", archive, "SELECT count(*) AS n FROM events", "--json",
                                    cwd=tmp_path))
    assert rows[0]["n"] > 0
    frames = json_lines(eventspace("replay", archive, "--json", cwd=tmp_path))
    assert frames and all("heartbeat" in frame for frame in frames)


def test_a_program_run_with_json_prints_its_summary_alone(tmp_path):
    (summary,) = json_lines(eventspace("run", "windtunnel", "--pathmap", REPO / "pathmaps" / "windtunnel-toy.yaml",
                                       "--steps", "3", "--json", cwd=tmp_path))
    assert summary["steps"] == 3
