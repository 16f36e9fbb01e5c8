"""The collective-operation monitor on the collectives application with one thread delayed."""

import dataclasses

import pytest

from monitors.colop import ColOpMon, wait_for
from paths import Pathmap, launch
from runs import REPO

DELAY = 0.05


@pytest.mark.parametrize("name", ["collectives-kary.yaml", "collectives-flat.yaml"])
def test_a_delayed_thread_is_the_slowest_contributor_by_its_delay(tmp_path, name):
    pm = Pathmap.load(REPO / "pathmaps" / name)
    pm = dataclasses.replace(pm, clock=dataclasses.replace(pm.clock, samples=4))
    rounds = 6
    with launch(pm, run_dir=tmp_path) as run:
        with ColOpMon(run) as mon:
            run.start("collectives", {"rounds": rounds, "ops": "allreduce,barrier,broadcast",
                                      "delay": {"thread": "T5", "seconds": DELAY, "every": 1}})
            report = wait_for(mon, rounds * 3)  # pulling while it runs: the trace rings keep 200 events
            run.wait(timeout=120)
    assert {o.op for o in report.ops} == {"allreduce", "barrier", "broadcast"}
    for op in report.ops:
        assert op.rounds == rounds
        assert op.slowest == "T5" and op.slowest_share >= 0.6
        assert abs(op.lateness_us / 1e6 - DELAY) <= 0.2 * DELAY, op
        assert op.latency_median_us > 0 and op.latency_p95_us >= op.latency_median_us
    assert max(report.lateness_us, key=report.lateness_us.get) == "T5"
    tree = pm.tree("ops")
    joins = {j.stage: j for j in report.joins}
    assert set(joins) == {s for s in tree.stage_ids if pm.stage(s).type == "reduce"}
    for stage, j in joins.items():
        assert j.rounds == rounds * 3 and j.fan_in == pm.fan_in("ops", stage)
        assert (j.up_median_us > 0) == (stage != tree.root)
    # The join that T5 enters waits for it: its children arrive spread by about the delay.
    t5_join = next(s for s in tree.route("T5") if pm.stage(s).type == "reduce")
    assert joins[t5_join].imbalance_median_us / 1e6 >= 0.8 * DELAY


def test_colop_needs_an_instrumented_tree(tmp_path):
    pm = Pathmap.load(REPO / "pathmaps" / "windtunnel-2node.yaml")
    with launch(pm, run_dir=tmp_path) as run:
        with pytest.raises(Exception, match="no collectors"):
            ColOpMon(run)
