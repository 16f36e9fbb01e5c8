"""The collectives micro-benchmark: right results over every tree shape on real nodes, its command, its hook."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import pytest
from runs import THREE_NODES, node_children

from apps.collectives import OPS, run_collectives
from apps.collectives.appmap import app_map
from apps.collectives.program import WrongResult, check_ops, check_result, pattern, sum_with_payload
from eventspace.cli import main
from paths import ClusterMap, Pathmap, Placement, generate

PATHMAPS = Path(__file__).resolve().parents[2] / "pathmaps"
THREADS = 6
ROUNDS = 4


def pathmap_for(shape: str, name: str = "coll") -> Pathmap:
    """6 threads on 3 nodes (2 per node), the `ops` tree in `shape`."""
    return generate(app_map(THREADS), ClusterMap.loads(THREE_NODES), Placement(rule="block"), shape, name=name)


@pytest.fixture
def no_leftovers():
    """Fails the test if it leaves a node process of its own behind."""
    before = set(node_children())
    yield
    assert set(node_children()) <= before


@pytest.mark.parametrize("shape, payload", [("flat", 0), ("kary:2", 48), ("per-node", 0)])
def test_every_op_gives_the_right_result_over_every_shape(tmp_path, no_leftovers, shape, payload):
    pm = pathmap_for(shape, name=f"coll-{shape.replace(':', '')}")
    summary = run_collectives(pm, rounds=ROUNDS, payload=payload, run_dir=tmp_path)
    # Each thread checks every result itself and fails the run otherwise; here, that all finished.
    assert (summary.shape, summary.threads, summary.nodes) == (shape, THREADS, 3)
    assert [s.op for s in summary.ops] == list(OPS)
    assert all(s.samples == THREADS * ROUNDS for s in summary.ops)
    assert all(0 < s.min_us <= s.median_us <= s.p95_us <= s.max_us for s in summary.ops)
    assert list(summary.latencies) == [f"T{i}" for i in range(THREADS)]
    assert all(len(times) == ROUNDS for lat in summary.latencies.values() for times in lat.values())
    assert summary.delayed == {}
    assert not (tmp_path / f"{pm.name}.json").exists()


def test_a_wrong_result_is_named():
    check_result("allreduce", 15, 0, 6, 0)                    # 0+1+...+5
    check_result("allreduce", [21, pattern(6, 8)], 1, 6, 8)   # (0+1)+...+(5+1); the greatest payload is 6's
    check_result("broadcast", [2, pattern(2, 8)], 2, 6, 8)
    with pytest.raises(WrongResult, match=r"round 1: allreduce gave 15, expected 21"):
        check_result("allreduce", 15, 1, 6, 0)
    with pytest.raises(WrongResult, match=r"broadcast gave \[2, 7 bytes"):
        check_result("broadcast", [2, pattern(2, 7)], 2, 6, 8)
    assert sum_with_payload([[1, b"a"], [2, b"c"], [3, b"b"]]) == [6, b"c"]


def test_the_command_prints_a_table_and_json(tmp_path, capsys, no_leftovers):
    file = tmp_path / "coll.yaml"
    pathmap_for("kary:2").dump(file)
    base = ["run", "collectives", "--pathmap", str(file), "--rounds", "3", "--run-dir", str(tmp_path)]
    assert main(base + ["--ops", "barrier,allreduce", "--payload", "16"]) == 0
    out = capsys.readouterr().out
    assert "collectives on coll: kary:2 tree" in out
    assert "median µs" in out and "p95 µs" in out
    assert "barrier" in out and "allreduce" in out and "broadcast" not in out
    assert main(base + ["--json"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert out.count("\n") == 1
    assert (data["shape"], data["threads"], data["rounds"]) == ("kary:2", THREADS, 3)
    assert [s["op"] for s in data["ops"]] == list(OPS)
    assert all(s["samples"] == THREADS * 3 for s in data["ops"])
    assert "latencies" not in data


@pytest.mark.parametrize("argv, message", [
    (["--ops", "allreduce,gather"], "unknown op 'gather'"),
    (["--rounds", "0"], "--rounds must be at least 1, got 0"),
    (["--payload", "-1"], "--payload must be 0 or more bytes"),
    (["--delay", "T3"], "write THREAD:SECONDS[:EVERY]"),
])
def test_a_bad_argument_is_one_clear_line(tmp_path, capsys, argv, message):
    file = tmp_path / "coll.yaml"
    pathmap_for("flat").dump(file)
    before = set(node_children())
    assert main(["run", "collectives", "--pathmap", str(file), "--run-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert set(node_children()) == before  # refused before launching anything


def test_check_ops():
    assert check_ops("broadcast, barrier") == ("broadcast", "barrier")
    with pytest.raises(ValueError, match="twice"):
        check_ops("barrier,barrier")
    with pytest.raises(ValueError, match="no ops"):
        check_ops("")


def test_the_delay_hook_makes_one_thread_arrive_late(tmp_path, no_leftovers):
    pm = pathmap_for("kary:2", name="coll-delay")
    delay = {"thread": "T3", "seconds": 0.05, "every": 1}
    summary = run_collectives(pm, rounds=3, ops=("allreduce", "barrier"), run_dir=tmp_path, delay=delay)
    assert summary.delayed == {"T3": pytest.approx(0.05 * 3 * 2)}
    # T3 comes last to every collective, so it waits least; everyone else waits for it.
    for op in ("allreduce", "barrier"):
        median = {t: statistics.median(lat[op]) for t, lat in summary.latencies.items()}
        late = median.pop("T3")
        assert late < min(median.values()), (op, late, median)


def test_generated_and_shipped_pathmaps(tmp_path, capsys):
    assert main(["pathmap", "generate", "collectives", "--threads", "5", "--cluster", str(tmp_path / "c.yaml"),
                 "--mapping", "block", "-o", str(tmp_path / "x.yaml")]) == 2  # no such cluster file
    (tmp_path / "c.yaml").write_text(THREE_NODES)
    assert main(["pathmap", "generate", "collectives", "--threads", "5", "--cluster", str(tmp_path / "c.yaml"),
                 "--mapping", "round-robin", "--tree-shape", "kary:4", "--instrument", "all",
                 "-o", str(tmp_path / "x.yaml")]) == 0
    pm = Pathmap.load(tmp_path / "x.yaml")
    assert [t.name for t in pm.threads] == [f"T{i}" for i in range(5)] and not pm.elements
    assert (pm.tree("ops").kind, pm.tree("ops").shape) == ("allreduce", "kary:4")
    for name, shape, roles in (("collectives-flat.yaml", "flat", {"contribute": 16, "arrival": 1}),
                               ("collectives-kary.yaml", "kary:4",
                                {"contribute": 16, "arrival": 5, "departure": 4})):
        shipped = Pathmap.load(PATHMAPS / name)
        assert len(shipped.threads) == 16 and len(shipped.nodes) == 4
        assert shipped.tree("ops").shape == shape
        assert Counter(p.role for p in shipped.collector_points()) == roles


def test_app_map_needs_a_thread():
    with pytest.raises(ValueError, match="at least one thread"):
        app_map(0)
