"""Attacks on the run registry (issue 31, items 3 and 10d): links planted where a run writes, forged run
files that name other files, run directories that others may write, and one whose parent is missing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runs import ENV, REPO, TWO_NODES, pathmap_for, ring_app

from paths import RunError, RunFile, launch
from paths.runfile import claim, live_runs, prune

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="makes files of another user (chown): needs root")
NOBODY = 65534


def eventspace(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "eventspace.cli", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def dead_launcher() -> dict:
    """The owner of a run file whose launcher is gone from this host: a process that has ended."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True, timeout=60)
    return {"pid": int(proc.stdout), "host": socket.gethostname(), "since": 1}


def forge(directory: Path, name: str, **fields) -> Path:
    """A run file written by someone else than a launcher, with whatever fields they chose."""
    data = {"pathmap_file": str(directory / f"{name}.pathmap.yaml"), "endpoints": {}, "pids": {}, "started": 1.0,
            "owner": dead_launcher(), **fields}
    path = directory / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_links_planted_where_a_run_writes_are_replaced_and_what_they_point_to_is_left_alone(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o700)
    victims = {}
    for planted in ("rt.pathmap.yaml", "rt.pathmap.yaml.checked", "rt.A.log", "rt.B.log"):
        victim = tmp_path / f"victim-{planted}"
        victim.write_text(f"the user's own {planted}\n")
        (runs / planted).symlink_to(victim)
        victims[victim] = victim.read_text()
    pm = pathmap_for(ring_app(2), TWO_NODES, name="rt")
    with launch(pm, run_dir=runs, env=ENV) as run:
        assert run.run("programs:ring", {"steps": 2}, timeout=60)["T0"]["sums"] == [1, 1]
        snapshot = Path(run.run_file.pathmap_file)
        assert snapshot.parent == runs and not snapshot.is_symlink() and "Snapshot of pathmap rt" in snapshot.read_text()
        for victim, text in victims.items():
            assert victim.read_text() == text, f"the launcher wrote through the link into {victim}"
    assert {victim: victim.read_text() for victim in victims if victim.exists()} == victims
    assert not list(runs.glob("rt*"))


def test_a_forged_run_file_makes_eventspace_runs_delete_nothing_outside_the_run_it_names(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    chosen = elsewhere / "thesis.yaml"
    chosen.write_text("the user's own file\n")
    Path(f"{chosen}.checked").write_text("the user's own file too\n")
    empty = elsewhere / "notes.log"            # an empty file, as a node log that tells nothing is
    empty.touch()
    (runs / "forged.x").mkdir()                # where "x/../../elsewhere/notes" leads from "forged.x"
    forged = forge(runs, "forged", pathmap_file=str(chosen), pids={"x/../../elsewhere/notes": 1})
    listing = eventspace("runs", "--run-dir", str(runs))
    assert listing.returncode == 0, listing.stderr
    assert "removed the run file of forged" in listing.stdout
    assert chosen.read_text() == "the user's own file\n"
    assert Path(f"{chosen}.checked").exists() and empty.exists()
    assert not forged.exists()


def test_a_run_directory_that_others_may_write_is_refused_with_one_clear_line(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(RunError, match=rf"run directory {shared} .*others may write in it \(mode 0?777\)"):
        claim("open", shared)
    for argv in (["runs", "--run-dir", str(shared)], ["launch", str(REPO / "pathmaps" / "windtunnel-toy.yaml"),
                                                      "--run-dir", str(shared), "--duration", "1"]):
        refused = eventspace(*argv)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "others may write in it" in refused.stderr and "chmod" in refused.stderr
    assert sorted(p.name for p in shared.iterdir()) == []


def test_a_sticky_run_directory_of_the_users_own_is_used_and_only_the_users_files_in_it_are_touched(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    mine = claim("mine", shared)
    assert [r.name for r in live_runs(shared)] == ["mine"]
    mine.release()
    assert not Path(mine.path).exists()


@AS_ROOT
def test_in_a_shared_run_directory_another_users_files_are_never_read_or_removed(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = forge(shared, "theirs", endpoints={"A": "tcp://127.0.0.1:1"}, pids={"A": 1})
    os.chown(theirs, NOBODY, NOBODY)
    assert prune(shared) == [] and live_runs(shared) == []     # not this user's: neither read nor removed
    assert theirs.exists()
    with pytest.raises(RunError, match="belongs to another user"):
        RunFile.find("theirs", shared)
    run = claim("mine", shared)
    planted = shared / "mine.pathmap.yaml"     # where the run's snapshot goes, taken by another user
    planted.symlink_to(tmp_path / "anything")
    os.lchown(planted, NOBODY, NOBODY)
    run.release()
    assert planted.is_symlink() and not Path(run.path).exists()


@AS_ROOT
def test_a_world_writable_run_directory_of_another_user_is_refused_even_if_sticky(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    os.chown(shared, NOBODY, NOBODY)
    with pytest.raises(RunError, match="belongs to another user"):
        claim("theirs", shared)


def test_a_run_directory_whose_parent_is_missing_is_refused_and_nothing_is_made(tmp_path, monkeypatch):
    home = tmp_path / "nonexistent"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("EVENTSPACE_RUN_DIR", raising=False)
    with pytest.raises(RunError, match=rf"{home} does not exist"):
        claim("homeless")
    assert not home.exists()
    given = tmp_path / "no" / "such" / "runs"
    with pytest.raises(RunError, match=rf"{given.parent} does not exist"):
        claim("nowhere", given)
    assert not (tmp_path / "no").exists()
    refused = eventspace("launch", str(REPO / "pathmaps" / "windtunnel-toy.yaml"), "--duration", "1",
                         env={"HOME": str(home), "EVENTSPACE_RUN_DIR": "", "XDG_RUNTIME_DIR": ""})
    assert refused.returncode == 2 and f"{home} does not exist" in refused.stderr, refused.stderr
    assert not home.exists()
    # Below an existing base, the missing levels are made, for this user alone.
    home.mkdir()
    run = claim("housed")
    assert Path(run.path).parent == home / ".eventspace" / "runs"
    assert {oct((home / p).stat().st_mode & 0o777) for p in (".eventspace", ".eventspace/runs")} == {"0o700"}
    run.release()


def test_a_stale_run_found_by_a_monitor_is_removed_and_said_so(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o700)
    script = f"from paths.runfile import claim; claim('ghost', {str(runs)!r})"
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert (runs / "ghost.json").exists()
    started = time.monotonic()
    watched = eventspace("monitor", "heartbeat", "--run", str(runs / "ghost.json"), "--duration", "1")
    assert watched.returncode == 2, watched
    assert "its launcher (pid" in watched.stderr and "is gone" in watched.stderr
    assert "its run file was removed" in watched.stderr, watched.stderr
    assert not (runs / "ghost.json").exists() and time.monotonic() - started < 60
