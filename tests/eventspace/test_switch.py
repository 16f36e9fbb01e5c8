"""Switching collectors of a live run off and on from the command line."""

import dataclasses

import pytest

from eventspace import trace
from eventspace.catalogue import Catalogue
from eventspace.view import View
from eventspace.cli import main
from paths import Instrument, Selector, launch
from runs import ENV, TWO_NODES, pathmap_for, ring_app


def counts(run, catalogue):
    return {e.id: run.client(e.trace_node).element(e.trace).last() for e in catalogue}


def test_collectors_of_a_view_switch_off_and_on_while_the_run_lives(tmp_path, capsys):
    pm = pathmap_for(ring_app(4), TWO_NODES, name="switch")
    pm = dataclasses.replace(pm, instrument=Instrument(collectors=(Selector(at=("source",)),))).validate()
    catalogue = Catalogue(pm)
    mine = {e.id for e in catalogue if e.thread == "T0"}
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        run.run("programs:ring", {"steps": 3}, timeout=60)
        before = counts(run, catalogue)
        assert main(["space", "switch", "off", "--run", run.run_file.path, "--view", "thread:T0"]) == 0
        assert f"switched off {len(mine)} collectors on 1 nodes (A)" in capsys.readouterr().out
        run.run("programs:ring", {"steps": 3}, timeout=60)
        during = counts(run, catalogue)
        assert all(during[c] == before[c] for c in mine)
        assert all(during[c] > before[c] for c in set(during) - mine)
        assert main(["space", "switch", "on", "--run", run.run_file.path]) == 0
        run.run("programs:ring", {"steps": 3}, timeout=60)
        after = counts(run, catalogue)
        assert all(after[c] > during[c] for c in after)


def test_space_ls_lists_the_catalogue_of_a_pathmap(capsys):
    from runs import REPO

    assert main(["space", "ls", str(REPO / "pathmaps" / "example-toy.yaml"), "--view", "tree:count"]) == 0
    out = capsys.readouterr().out
    assert "collectors of example-toy: 3 of 7" in out and "contribute" in out and "arrival" in out


def test_the_scope_command_pulls_and_reports_its_figures(tmp_path, capsys):
    import json

    pm = pathmap_for(ring_app(4), TWO_NODES, name="scopecli")
    pm = dataclasses.replace(pm, instrument=Instrument(collectors=(Selector(at=("source",)),))).validate()
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        run.run("programs:ring", {"steps": 3}, timeout=60)
        assert main(["scope", "--run", run.run_file.path, "--view", "node:B", "--tree", "per-node", "--placement",
                     "near", "--pulls", "5", "--json"]) == 0
        figures = json.loads(capsys.readouterr().out)
        assert figures["pulls"] == 5 and figures["trace_elements"] == 4 and figures["tuples"] == 20
        assert figures["observe_rate"] > 0 and figures["missing"] == []
        assert main(["scope", "--run", run.run_file.path, "--view", "node:B", "--pipeline", "3", "--pulls", "5",
                     "--json"]) == 0
        figures = json.loads(capsys.readouterr().out)
        assert figures["pulls"] == 5 and figures["tuples"] == 20 and figures["missing"] == []
        assert main(["scope", "--run", run.run_file.path, "--stage", "filter:op ==", "--pulls", "1"]) == 2
        assert "does not parse" in capsys.readouterr().err
        assert main(["scope", "--run", run.run_file.path, "--mode", "stream", "--pipeline", "2", "--pulls", "1"]) == 2
        assert "needs latest or backlog mode" in capsys.readouterr().err


@pytest.mark.parametrize("implementation", ["compiled", "pure"])
def test_rounds_are_counted_while_a_collector_is_switched_off(tmp_path, implementation):
    """A contribute collector numbers its tree's rounds; switched off for a while, it must go on counting,
    or its member's rounds no longer line up with the others' (colop would blame it for rounds it never
    delayed)."""
    pm = pathmap_for(ring_app(4), TWO_NODES, name=f"rounds-{implementation}")
    pm = dataclasses.replace(pm, instrument=Instrument(collectors=(Selector(trees=("count",)),))).validate()
    catalogue = Catalogue(pm)
    contribute = {e.thread: e for e in catalogue if e.role == "contribute" and e.tree == "count"}
    env = {**ENV, "EVENTSPACE_PURE": "1"} if implementation == "pure" else ENV
    with launch(pm, run_dir=tmp_path, env=env) as run:
        run.run("programs:ring", {"steps": 3}, timeout=60)
        assert main(["space", "switch", "off", "--run", run.run_file.path, "--view", "thread:T0"]) == 0
        run.run("programs:ring", {"steps": 2}, timeout=60)
        assert main(["space", "switch", "on", "--run", run.run_file.path, "--view", "thread:T0"]) == 0
        run.run("programs:ring", {"steps": 3}, timeout=60)
        rounds = {}
        for thread, entry in contribute.items():
            _, data = run.client(entry.trace_node).element(entry.trace).read_range(0, 1 << 62)
            rounds[thread] = trace.decode(data)["arg"].tolist()
    assert rounds["T1"] == rounds["T2"] == rounds["T3"] == list(range(8))
    assert rounds["T0"] == [0, 1, 2, 5, 6, 7]   # the two rounds it was off for are missing, not renumbered


def test_a_thread_whose_collectors_are_off_is_off_not_stalled_and_space_ls_says_which(tmp_path, capsys):
    from monitors.heartbeat import OFF, Heartbeat

    pm = pathmap_for(ring_app(4), TWO_NODES, name="offbeat")
    pm = dataclasses.replace(pm, instrument=Instrument(collectors=(Selector(at=("source",)),))).validate()
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        run.start("programs:ring_forever", {"stop_after": 60, "pause": 0.01})
        assert main(["space", "switch", "off", "--run", run.run_file.path, "--view", "thread:T2"]) == 0
        with Heartbeat(run.run_file) as hb:
            statuses = [{b.thread: b.status for b in hb.read().threads} for _ in range(3)]
        assert all(s["T2"] == OFF for s in statuses[1:]), statuses
        assert all(s["T0"] != OFF for s in statuses), statuses
        capsys.readouterr()
        assert main(["space", "ls", run.run_file.path]) == 0
        rows = [[cell.strip() for cell in line.split("│")] for line in capsys.readouterr().out.splitlines()
                if line.startswith("│")]
        switched = {row[1]: row[-2] for row in rows}   # id -> its last cell: on or off
        t2 = {str(e.id) for e in Catalogue(pm) if e.thread == "T2"}
        assert {switched[i] for i in t2} == {"off"} and {v for i, v in switched.items() if i not in t2} == {"on"}


def test_space_ls_written_to_a_pipe_keeps_every_stage_and_trace_element_whole(capsys):
    from paths import Pathmap
    from runs import REPO

    pathmap = REPO / "pathmaps" / "windtunnel-4node.yaml"
    assert main(["space", "ls", str(pathmap), "--view", "thread:T5"]) == 0
    out = capsys.readouterr().out
    entries = View.parse("thread:T5").select(Catalogue(Pathmap.load(pathmap)))
    assert all(e.stage in out and f"{e.trace} @ {e.trace_node}" in out for e in entries), out
