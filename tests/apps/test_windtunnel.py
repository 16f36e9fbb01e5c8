"""The wind tunnel on PATHS: the same grid on every layout, the command, a node that dies."""

import json
import time

import pytest

from apps.windtunnel.appmap import app_map
from apps.windtunnel.cli import run_windtunnel
from apps.windtunnel.lattice import grid_sha256, reference_run
from eventspace.cli import main
from paths import ClusterMap, NodeDied, Pathmap, Placement, generate, launch
from polling import until
from runs import REPO, gone

N, STEPS, SEED = 48, 12, 7


@pytest.fixture(scope="module")
def reference() -> str:
    return grid_sha256(reference_run(N, STEPS, SEED))


THREE_CLUSTERS = """\
clusters:
  c1: {nodes: {A: {host: 127.0.0.1}}}
  c2: {nodes: {B: {host: 127.0.0.1}, C: {host: 127.0.0.1}}}
  c3: {nodes: {D: {host: 127.0.0.1}, E: {host: 127.0.0.1}, F: {host: 127.0.0.1}}}
"""


@pytest.mark.parametrize("name", ["windtunnel-toy.yaml", "windtunnel-2node.yaml", "windtunnel-4node.yaml"])
def test_every_shipped_layout_ends_with_the_reference_grid(tmp_path, reference, name):
    summary = run_windtunnel(REPO / "pathmaps" / name, size=N, steps=STEPS, seed=SEED, check_every=5,
                             run_dir=tmp_path)
    assert summary.grid_sha256 == reference
    assert summary.steps == STEPS and summary.particles > 0


@pytest.mark.slow
def test_a_layout_of_the_users_own_round_robin_over_three_clusters(tmp_path, reference):
    pm = generate(app_map(24), ClusterMap.loads(THREE_CLUSTERS), Placement(rule="round-robin"), "per-cluster",
                  name="wt-three-clusters")
    assert len(pm.nodes) == 6 and {t.node for t in pm.threads} == set("ABCDEF")
    summary = run_windtunnel(pm, size=N, steps=STEPS, seed=SEED, run_dir=tmp_path)
    assert summary.grid_sha256 == reference and summary.threads == 24 and summary.nodes == 6


def test_the_command_prints_a_summary_and_json(tmp_path, capsys, reference):
    pathmap = str(REPO / "pathmaps" / "windtunnel-toy.yaml")
    assert main(["run", "windtunnel", "--pathmap", pathmap, "--size", str(N), "--steps", str(STEPS),
                 "--seed", str(SEED), "--run-dir", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["grid_sha256"] == reference
    assert (data["steps"], data["threads"], data["nodes"]) == (STEPS, 4, 1) and data["particles"] > 0
    assert main(["run", "windtunnel", "--pathmap", pathmap, "--size", str(N), "--steps", "3",
                 "--run-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "wind tunnel on windtunnel-toy" in out and "(conserved)" in out and "#" in out  # the obstacle


@pytest.mark.parametrize("argv, words", [
    (["--size", "huge"], "unknown size 'huge'"),
    (["--size", "3"], "N must be even, at least 4"),
    (["--stall", "T1"], "write THREAD:STEP:SECONDS"),
])
def test_bad_arguments_are_one_line(tmp_path, capsys, argv, words):
    pathmap = str(REPO / "pathmaps" / "windtunnel-toy.yaml")
    assert main(["run", "windtunnel", "--pathmap", pathmap, "--run-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_a_node_that_dies_stops_the_run_naming_it(tmp_path):
    pm = Pathmap.load(REPO / "pathmaps" / "windtunnel-2node.yaml")
    with launch(pm, run_dir=tmp_path) as run:
        pids = run.pids
        run.start("windtunnel", {"size": 64, "steps": 1_000_000, "until": time.time() + 60})
        until(lambda: len(progress := run.progress()) == len(pm.threads)
              and all(p.get("step", 0) > 0 for p in progress.values()), 60, "every thread past its first step")
        run.kill("B")
        started = time.monotonic()
        with pytest.raises(NodeDied, match="node B died"):
            run.wait(timeout=30)
        assert time.monotonic() - started < 10
    assert all(gone(pid) for pid in pids.values())
