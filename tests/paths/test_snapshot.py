"""The checked pathmap a launcher keeps beside its run's snapshot: nodes and monitors load it instead
of reading and checking the YAML again, but only the file the launcher wrote, and only this user's."""

import os

import pytest

from paths import PathsError, Pathmap, launch
from paths import snapshot
from paths.runfile import RunFile
from runs import REPO


@pytest.fixture
def written(tmp_path):
    pm = Pathmap.load(REPO / "pathmaps" / "windtunnel-4node.yaml")
    target = tmp_path / "wt.pathmap.yaml"
    return pm, target, snapshot.write(pm, target, header="a test's snapshot")


def test_the_checked_pathmap_is_the_pathmap_with_its_collectors_numbered(written):
    pm, target, digest = written
    loaded = snapshot.load(target, digest)
    assert loaded == pm and loaded.collector_points() == pm.collector_points()
    assert Pathmap.load(target) == pm  # the YAML beside it says the same
    assert os.stat(snapshot.checked_file(target)).st_mode & 0o077 == 0


def test_a_checked_pathmap_changed_after_its_launcher_wrote_it_is_refused_not_loaded(written):
    _, target, digest = written
    checked = snapshot.checked_file(target)
    checked.write_bytes(checked.read_bytes() + b"\0")
    with pytest.raises(PathsError, match="not the one its launcher wrote"):
        snapshot.load(target, digest)
    checked.unlink()
    with pytest.raises(PathsError, match="cannot read the checked pathmap"):
        snapshot.load(target, digest)


def test_a_monitor_loads_the_checked_pathmap_only_where_nobody_else_may_write_it(written):
    pm, target, digest = written
    run = RunFile(str(target), {}, {}, 0.0, str(target.parent / "wt.json"), checked=digest)
    checked = snapshot.checked_file(target)
    os.chmod(checked, 0o620)
    with pytest.raises(PathsError, match="not this user's alone"):
        snapshot.load(target, digest, own=True)
    assert run.pathmap() == pm  # read from the YAML instead
    os.chmod(checked, 0o600)
    assert snapshot.load(target, digest, own=True) == pm


def test_a_launched_run_publishes_the_digest_and_removes_both_files(tmp_path):
    with launch(REPO / "pathmaps" / "toy-2node.yaml", run_dir=tmp_path) as run:
        published = RunFile.read(run.run_file.path)
        assert published.checked
        assert snapshot.load(published.pathmap_file, published.checked, own=True) == run.pathmap
    assert not os.path.exists(published.pathmap_file)
    assert not snapshot.checked_file(published.pathmap_file).exists()
