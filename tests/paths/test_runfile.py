"""Run files: one per-user place, atomic names, each run removes only its own, `eventspace runs`."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from paths import RunError, RunFile, launch
from paths.runfile import claim, live_runs, prune, run_dir, run_ended
from polling import until
from runs import ENV, REPO, TWO_NODES, gone, pathmap_for, ring_app

def eventspace(*argv, cwd, timeout=60, **kwargs):
    return subprocess.run([sys.executable, "-m", "eventspace.cli", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def test_run_files_live_in_one_per_user_place(monkeypatch, tmp_path):
    monkeypatch.setenv("EVENTSPACE_RUN_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert run_dir() == tmp_path / "mine"
    assert run_dir(tmp_path / "given") == tmp_path / "given"
    monkeypatch.delenv("EVENTSPACE_RUN_DIR")
    assert run_dir() == tmp_path / "xdg" / "eventspace" / "runs"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert run_dir() == tmp_path / "home" / ".eventspace" / "runs"
    monkeypatch.chdir(tmp_path)
    assert run_dir().is_absolute()   # never relative to where a command happens to start


def test_two_launches_of_one_pathmap_at_once_get_two_names_and_each_removes_only_its_own(tmp_path):
    pm = pathmap_for(ring_app(2), TWO_NODES, name="twin")
    both_up = threading.Barrier(3, timeout=120)
    first_ended = threading.Event()
    runs, failures = {}, []

    def launcher(i):
        try:
            with launch(pm, run_dir=tmp_path, env=ENV) as run:
                runs[i] = (run.run_file, run.pids)
                both_up.wait()
                if i == 1:
                    first_ended.wait(120)
                    # The first run has ended: this one's files are all still here, and it still runs.
                    assert RunFile.find(run.run_file.path).check_live() == run.run_file
                    assert run.run("programs:ring", {"steps": 2}, timeout=60)["T0"]["sums"] == [1, 1]
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)
            both_up.abort()

    threads = [threading.Thread(target=launcher, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    try:
        both_up.wait()
    except threading.BrokenBarrierError:
        pass
    try:
        assert not failures, failures
        (first, first_pids), (second, second_pids) = runs[0], runs[1]
        assert {first.name, second.name} == {"twin", "twin-2"}
        assert first.path != second.path and first.pathmap_file != second.pathmap_file
        assert set(first_pids.values()).isdisjoint(second_pids.values())
        assert {r.name for r in live_runs(tmp_path)} == {"twin", "twin-2"}
        threads[0].join(60)
        assert not Path(first.path).exists() and not Path(first.pathmap_file).exists()
        assert Path(second.path).exists() and Path(second.pathmap_file).exists()
        assert RunFile.read(second.path).pids == second_pids
    finally:
        first_ended.set()
        for t in threads:
            t.join(120)
    assert not failures, failures
    assert not Path(second.path).exists() and live_runs(tmp_path) == []


def test_a_name_is_claimed_once_and_a_file_whose_launcher_is_gone_is_taken_over(tmp_path):
    claimed = claim("solo", tmp_path, source="solo.yaml")
    assert claimed.name == "solo" and claimed.starting and claimed.owner.alive()
    with pytest.raises(RunError, match="still starting"):
        RunFile.find("solo", tmp_path).check_live()
    assert claim("solo", tmp_path).name == "solo-2"
    # A launcher that registered and died (no release): its name is free again, its file removed.
    script = f"from paths.runfile import claim; claim('ghost', {str(tmp_path)!r})"
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    ghost = RunFile.find("ghost", tmp_path)
    assert ghost.owner.alive() is False
    with pytest.raises(RunError, match="launcher .* is gone"):
        ghost.check_live()
    taken = claim("ghost", tmp_path)
    assert taken.name == "ghost" and taken.owner == claimed.owner
    # release removes only a file that is still its own.
    stale = RunFile(ghost.pathmap_file, {}, {}, 0.0, ghost.path, owner=ghost.owner)
    stale.release()
    assert Path(taken.path).exists()
    taken.release()
    assert not Path(taken.path).exists()


def test_monitors_attached_to_a_run_are_counted_and_the_gone_ones_pruned(tmp_path):
    run = claim("watched", tmp_path)
    with run.attach_monitor("heartbeat"), run.attach_monitor("getevent"):
        assert sorted(m.kind for m in run.monitors()) == ["getevent", "heartbeat"]
    assert run.monitors() == []
    script = (f"from paths.runfile import RunFile; RunFile.read({run.path!r}).attach_monitor('colop')")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert len(list(run.monitor_dir.glob("*.json"))) == 1
    assert run.monitors() == [] and not list(run.monitor_dir.glob("*.json"))
    run.release()
    assert not run.monitor_dir.exists()


@pytest.mark.slow
def test_eventspace_runs_lists_live_runs_with_their_monitors_from_anywhere(tmp_path, monkeypatch):
    """A run launched in one directory, a monitor started in another, `eventspace runs` in a third."""
    runs_dir = tmp_path / "runs"
    monkeypatch.setenv("EVENTSPACE_RUN_DIR", str(runs_dir))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "eventspace.cli", "run", "windtunnel", "--pathmap", "pathmaps/windtunnel-toy.yaml",
         "--size", "64", "--steps", "1000000", "--json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    monitor = None
    try:
        announced = launcher.stderr.readline()
        assert announced.startswith("run windtunnel-toy: run file "), announced
        run_path = announced.rstrip("\n").removeprefix("run windtunnel-toy: run file ")
        assert Path(run_path).parent == runs_dir and Path(run_path).exists()
        monitor = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "monitor", "heartbeat", "--run",
                                    "windtunnel-toy", "--interval", "0.5", "--json"], cwd=elsewhere,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert json.loads(monitor.stdout.readline())["threads"]   # it found the run, from elsewhere

        def listed():
            out = eventspace("runs", "--json", cwd=tmp_path / "elsewhere")
            assert out.returncode == 0, out.stderr
            rows = json.loads(out.stdout)
            return rows if rows and rows[0]["monitors"] else None

        (row,) = until(listed, what="the monitor being listed")
        assert row["name"] == "windtunnel-toy" and row["pathmap"] == "windtunnel-toy" and row["state"] == "live"
        assert row["source"] == str(REPO / "pathmaps" / "windtunnel-toy.yaml") and set(row["nodes"]) == {"A"}
        assert row["launcher"]["pid"] == launcher.pid and [m["kind"] for m in row["monitors"]] == ["heartbeat"]
        table = eventspace("runs", cwd=elsewhere, env={**os.environ, "COLUMNS": "200"})
        assert "windtunnel-toy" in table.stdout and "heartbeat" in table.stdout, table.stdout
        monitor.kill()
        monitor.wait(10)
        until(lambda: json.loads(eventspace("runs", "--json", cwd=elsewhere).stdout)[0]["monitors"] == [],
              what="the killed monitor being pruned")
        # A launcher killed outright leaves its run file; `eventspace runs` removes it and says so.
        node_pids = RunFile.read(run_path).pids
        launcher.kill()
        launcher.wait(10)
        until(lambda: all(gone(pid) for pid in node_pids.values()), what="the nodes ending")
        listing = eventspace("runs", cwd=elsewhere)
        assert "removed the run file of windtunnel-toy: its launcher" in listing.stdout, listing.stdout
        assert "no live runs" in listing.stdout and not Path(run_path).exists()
    finally:
        for proc in (launcher, monitor):
            if proc is not None:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                    try:
                        proc.wait(20)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(10)
                proc.stdout.close()
                proc.stderr.close()


def test_prune_keeps_runs_of_other_hosts_and_of_live_launchers(tmp_path):
    mine = claim("here", tmp_path)
    other = RunFile(str(tmp_path / "far.pathmap.yaml"), {"A": "tcp://10.0.0.1:5000"}, {"A": 1}, time.time(),
                    owner=mine.owner.__class__(12345, "another-host")).write(tmp_path / "far.json")
    assert prune(tmp_path) == []
    assert {r.name for r in live_runs(tmp_path)} == {"here", "far"}
    assert other.owner.alive() is None


def test_eventspace_runs_keeps_every_name_whole_when_piped(tmp_path):
    """Written to a pipe (as to grep or a file), a table is as wide as its cells: rich would give it 80
    columns and cut a run's name ("wor") or fold its pathmap's path."""
    runs = tmp_path / "runs"
    name = "workers-of-a-pipeline-whose-name-does-not-fit-in-eighty-columns-at-all"
    source = str(tmp_path.joinpath(*["deeper"] * 12, "pipeline.yaml"))
    run = claim(name, runs, source=source)
    run.ready({"A": "tcp://127.0.0.1:1"}, {"A": os.getpid()})
    try:
        for env in ({**os.environ, "COLUMNS": "80"}, {k: v for k, v in os.environ.items() if k != "COLUMNS"}):
            out = eventspace("runs", "--run-dir", str(runs), cwd=tmp_path, env=env)
            assert out.returncode == 0, out.stderr
            assert name in out.stdout and os.path.relpath(source, tmp_path) in out.stdout, out.stdout
    finally:
        run.release()


def test_a_run_whose_nodes_and_launcher_are_gone_is_removed_by_the_monitor_that_sees_it_end(tmp_path):
    """As an MPI run killed with `kill -9` (rank 0 is its launcher) leaves it under mpiexec."""
    script = (f"import os; from paths.runfile import claim; "
              f"claim('killed', {str(tmp_path)!r}).ready({{'r0': 'tcp://127.0.0.1:1'}}, {{'r0': os.getpid()}})")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    run = RunFile.find("killed", tmp_path)
    assert run.owner.alive() is False and gone(run.pids["r0"])
    assert run_ended(run) == "every node is gone, and its launcher: its run file was removed"
    assert not Path(run.path).exists() and not Path(run.pathmap_file).exists()
