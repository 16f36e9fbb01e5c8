"""The runtime: node processes launched from a pathmap, threads on them, paths and collectives across them."""

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import pastset
from paths import AppMap, NodeDied, PathsError, ProgramFailed, RunError, RunFile, attach, launch
from polling import until
from runs import ENV, THREE_NODES, TWO_NODES, gone, node_children, pathmap_for, ring_app


def test_a_program_runs_on_every_thread_and_the_nodes_are_gone_after(tmp_path):
    pm = pathmap_for(ring_app(4), TWO_NODES)
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        pids = run.pids
        assert set(pids) == {"A", "B"}
        run_file = RunFile.find(pm.name, tmp_path)
        assert run_file.endpoints == run.endpoints
        results = run.run("programs:ring", {"steps": 5}, timeout=60)
    assert set(results) == {"T0", "T1", "T2", "T3"}
    for thread, result in results.items():
        me = int(thread[1:])
        left = (me - 1) % 4
        assert result["seen"] == [[step * 1000 + left, f"T{left}"] for step in range(5)]
        assert result["sums"] == [0 + 1 + 2 + 3] * 5
        assert result["node"] == pm.thread(thread).node
    assert all(gone(pid) for pid in pids.values())
    assert not (tmp_path / f"{pm.name}.json").exists()


@pytest.mark.slow   # 7-9 s: make test-fast stays within its 3 minutes
def test_moving_threads_and_elements_is_a_pathmap_edit_only(tmp_path):
    results = {}
    for rule in ("block", "round-robin"):
        pm = pathmap_for(ring_app(6), THREE_NODES, rule=rule, name=f"rt-{rule}")
        with launch(pm, run_dir=tmp_path, env=ENV) as run:
            results[rule] = run.run("programs:ring", {"steps": 4}, timeout=60)
    placements = {rule: {t: r.pop("node") for t, r in res.items()} for rule, res in results.items()}
    assert placements["block"] != placements["round-robin"]
    assert results["block"] == results["round-robin"]


@pytest.mark.parametrize("shape", ["flat", "kary:2", "knomial:2", "per-node", "per-cluster"])
def test_collectives_are_correct_for_every_tree_shape(tmp_path, shape):
    app = AppMap.loads("threads: 7\ntrees: [{name: count, kind: allreduce, members: all}]")
    pm = pathmap_for(app, THREE_NODES, rule="round-robin", shape=shape)
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        results = run.run("programs:collectives", timeout=60)
    values = range(1, 8)
    for thread, out in results.items():
        assert out["sum"] == 28 and out["min"] == 1 and out["max"] == 7 and out["count"] == 7
        assert out["product"] == 5040
        assert out["reduce"] == (28 if thread == "T0" else None)  # the root member is the first
        assert out["broadcast"] == "from T0"
        assert out["gather"] == {f"T{i}": i * i for i in range(7)}
    assert len(results) == len(values)


def test_a_collective_outside_the_tree_or_out_of_step_fails_clearly(tmp_path):
    app = AppMap.loads("threads: 4\ntrees: [{name: count, kind: allreduce, members: all}, "
                       "{name: pair, kind: allreduce, members: [T0, T1]}]")
    pm = pathmap_for(app, TWO_NODES)
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        with pytest.raises(ProgramFailed) as failed:
            run.run("programs:not_a_member", {"tree": "pair"}, timeout=60)
        assert set(failed.value.failures) == {"T2", "T3"}
        assert "not a member of tree pair" in str(failed.value)
        with pytest.raises(ProgramFailed, match="disagree"):
            run.run("programs:disagree", timeout=60)


def test_a_node_that_dies_stops_the_run_naming_it(tmp_path):
    pm = pathmap_for(ring_app(4), TWO_NODES)
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        pids = run.pids
        run.start("programs:block_forever")
        until(lambda: all(len(run.client(n.name).call("paths.info")["running"]) == len(pm.threads_on(n.name))
                          for n in pm.nodes), 30, "every thread running")
        run.kill("B")
        started = time.monotonic()
        with pytest.raises(NodeDied, match=r"node B died \(exit code -9\)"):
            run.wait(timeout=30)
        assert time.monotonic() - started < 10
        # A thread on A that was blocked on an element of B learns that B is gone.
        inbound_on_b = [t.name for t in pm.threads_on("A")
                        if pm.element(f"row_{(int(t.name[1:]) - 1) % 4}_{t.name[1:]}").node == "B"]
        assert inbound_on_b
        joined = until(lambda: run.client("A").call("paths.join", 0.5), 15, "an outcome of every thread on A reading B",
                       holds=lambda joined: set(inbound_on_b) <= set(joined["outcomes"]))
        for thread in inbound_on_b:
            assert joined["outcomes"][thread][:2] == ["error", "ServerGone"]
    assert all(gone(pid) for pid in pids.values())


def test_a_node_that_cannot_start_is_named_and_the_others_are_stopped(tmp_path):
    pm = pathmap_for(ring_app(4), TWO_NODES)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        nodes = tuple(dataclasses.replace(n, port=port) if n.name == "B" else n for n in pm.nodes)
        before = set(node_children())
        with pytest.raises(PathsError, match=rf"node B did not start \(exit code 2\): .*{port}"):
            with launch(dataclasses.replace(pm, nodes=nodes), run_dir=tmp_path, env=ENV):
                pass
    assert set(node_children()) <= before


def test_ctrl_c_inside_the_run_stops_every_node(tmp_path):
    pm = pathmap_for(ring_app(4), TWO_NODES)
    with pytest.raises(KeyboardInterrupt):
        with launch(pm, run_dir=tmp_path, env=ENV) as run:
            pids = run.pids
            run.start("programs:sleepy", {"seconds": 60})
            raise KeyboardInterrupt
    assert all(gone(pid) for pid in pids.values())


@pytest.mark.slow   # 7-12 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_attach_finds_a_live_run_and_refuses_a_stale_one(tmp_path):
    pm = pathmap_for(ring_app(4), TWO_NODES)
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        attached = attach(pm.name, run_dir=tmp_path)
        assert attached.endpoints == run.endpoints
        assert attached.run("programs:ring", {"steps": 2}, timeout=60)["T0"]["sums"] == [6, 6]
        attached.close_clients()
        stale = RunFile.read(tmp_path / f"{pm.name}.json")
    stale.write(tmp_path / "old.json")
    with pytest.raises(RunError, match="stale"):
        attach("old", run_dir=tmp_path)
    with pytest.raises(RunError, match="no run file"):
        attach("nothing-here", run_dir=tmp_path)


def test_eventspace_node_serves_in_the_foreground_until_sigterm(tmp_path):
    pm = pathmap_for(ring_app(2), "clusters: {c1: {nodes: {A: {host: 127.0.0.1}}}}")
    file = tmp_path / "one.yaml"
    pm.dump(file)
    proc = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "node", "--pathmap", str(file),
                             "--node", "A", "--bind", "tcp://127.0.0.1:0"],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, **ENV})
    try:
        line = proc.stdout.readline()
        import json
        endpoint = json.loads(line)["endpoint"]
        with pastset.connect(endpoint) as client:
            assert client.call("paths.info")["node"] == "A"
            assert {"row_0_1", "row_1_0"} <= {e.name for e in client.elements()}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_eventspace_node_refuses_an_unknown_node(tmp_path, capsys):
    from eventspace.cli import main

    file = tmp_path / "one.yaml"
    pathmap_for(ring_app(2), "clusters: {c1: {nodes: {A: {host: 127.0.0.1}}}}").dump(file)
    assert main(["node", "--pathmap", str(file), "--node", "Z"]) == 2
    err = capsys.readouterr().err
    assert "no node 'Z'" in err and err.count("\n") == 1
