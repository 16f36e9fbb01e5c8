"""Switching collectors of a live run off and on from the command line."""

import dataclasses

from eventspace.catalogue import Catalogue
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
