"""CURVE over a run: the pathmap's security section, EVENTSPACE_KEYS, node processes, scopes and clocks, the bind policy."""

import dataclasses
import os

import pytest

import pastset
from eventspace import clock
from eventspace.scope import EventScope
from pastset import Refused, Security, security
from paths import Instrument, NodeServer, Pathmap, PathmapError, PathsError, SecuritySpec, Selector, launch
from runs import ENV, TWO_NODES, gone, node_children, pathmap_for, ring_app


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    base = tmp_path_factory.mktemp("keys") / "run"
    security.generate(base)
    return base


@pytest.fixture(autouse=True)
def no_process_keys(monkeypatch):
    monkeypatch.delenv(security.KEYS_ENV, raising=False)
    security.use(None)
    yield
    security.use(None)


def secured(keys, name="sec"):
    pm = pathmap_for(ring_app(4), TWO_NODES, name=name)
    return dataclasses.replace(pm, security=SecuritySpec(str(keys)), instrument=Instrument(
        keep=50, collectors=(Selector(at=("source", "sink")),))).validate()


def test_a_secured_two_node_run_works_for_those_with_its_keys(tmp_path, keys, monkeypatch):
    pm = secured(keys)
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        pids = run.pids
        results = run.run("programs:ring", {"steps": 3}, timeout=60)
        assert {r["node"] for r in results.values()} == {"A", "B"}  # remote paths and trees, over CURVE
        assert all(r["sums"] == [6, 6, 6] for r in results.values())
        for endpoint in run.endpoints.values():
            with pytest.raises(Refused, match="EVENTSPACE_KEYS"):
                pastset.connect(endpoint, timeout=2)
        with pytest.raises(pastset.PastSetError, match="does not answer"):
            clock.estimate(run.endpoints, samples=1, timeout=0.3)

        monkeypatch.setenv("EVENTSPACE_KEYS", str(keys))
        offsets = clock.estimate(run.endpoints, samples=2)
        assert set(offsets) == {"A", "B"} and all(abs(o.offset_ns) < 1e9 for o in offsets.values())
        # Joins placed near the data run in the node processes and reach the other node from there.
        for placement in ("monitor", "near"):
            with EventScope(run, "all", mode="backlog", placement=placement, tree="kary:2",
                            lease=0.6) as scope:
                pulled = scope.pull()
                assert pulled.missing == set()
                assert len(pulled.records) > 0
    assert all(gone(pid) for pid in pids.values())
    assert node_children() == []


def test_eventspace_keys_alone_secures_a_launched_run(tmp_path, keys, monkeypatch):
    """The node processes inherit the launcher's environment, and with it its keys."""
    monkeypatch.setenv("EVENTSPACE_KEYS", str(keys))
    pm = pathmap_for(ring_app(2), "clusters: {c1: {nodes: {A: {host: 127.0.0.1}}}}", name="env")
    assert pm.security.keys is None
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        assert run.run("programs:ring", {"steps": 2}, timeout=60)["T0"]["sums"] == [1, 1]
        with pytest.raises(Refused):
            pastset.connect(run.endpoints["A"], timeout=2, security=Security())


def test_a_node_on_every_address_needs_keys_or_insecure(tmp_path, keys, capsys):
    pm = pathmap_for(ring_app(2), TWO_NODES, name="open")
    pm = dataclasses.replace(pm, nodes=tuple(dataclasses.replace(n, host="0.0.0.0") for n in pm.nodes))
    with pytest.raises(PathsError, match=r"node A: refusing to bind tcp://0.0.0.0:0.*insecure"):
        with launch(pm, run_dir=tmp_path, env=ENV):
            pass
    assert node_children() == []
    node = NodeServer(pm, "A")
    try:
        with pytest.raises(pastset.PastSetError, match="refusing to bind"):
            node.serve()
        assert node.serve(insecure=True).startswith("tcp://0.0.0.0:")
        assert "warning: serving tcp://0.0.0.0:0 without authentication" in capsys.readouterr().err
    finally:
        node.close()
    node = NodeServer(pm, "A", security=Security.load(keys))
    try:
        assert node.serve().startswith("tcp://0.0.0.0:")
        assert capsys.readouterr().err == ""
    finally:
        node.close()


def test_the_security_section_is_validated_and_round_trips(tmp_path, keys):
    text = pathmap_for(ring_app(2), TWO_NODES, name="rt").dumps()
    assert "security" not in text
    file = tmp_path / "p.yaml"
    os.symlink(keys, tmp_path / "keys")
    file.write_text("security: {keys: keys}\n" + text)
    pm = Pathmap.load(file)
    assert pm.security.keys == str(tmp_path / "keys")  # relative to the pathmap's folder
    assert Pathmap.loads(pm.dumps()) == pm
    assert pm.security.load() == Security.load(tmp_path / "keys")

    file.write_text("name: rt\nsecurity: {keys: nowhere}\n" + text.split("\n", 1)[1])
    with pytest.raises(PathmapError) as err:
        Pathmap.load(file)
    assert f"{file}:2: security.keys: key directory {tmp_path / 'nowhere'} does not exist" in str(err.value)
    partial = tmp_path / "partial"
    security.generate(partial)
    (partial / "server.key_secret").unlink()
    file.write_text(f"security:\n  keys: {partial}\n" + text)
    with pytest.raises(PathmapError, match=rf"p.yaml:2: security.keys: {partial / 'server.key_secret'} is missing"):
        Pathmap.load(file)
    file.write_text("security: {key: x}\n" + text)
    with pytest.raises(PathmapError, match="unknown key 'key'"):
        Pathmap.load(file)
