"""Node servers started by mpiexec: node i of the pathmap as MPI rank i (paths.mpiexec), real mpiexec."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from polling import until
from runs import REPO, gone

from apps.windtunnel.cli import run_windtunnel
from apps.windtunnel.lattice import grid_sha256, reference_run
from eventspace.scope import EventScope
from monitors.heartbeat import Heartbeat
from paths import RunError, RunFile, launch
from paths.launch import _await_ranks
from paths.mpiexec import my_rank, reclaim_sessions

MPIEXEC = Path(sys.executable).parent / "mpiexec"
PATHMAP = REPO / "pathmaps" / "windtunnel-4node.yaml"
requires_mpiexec = pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK),
                                      reason="needs the mpi extra's mpiexec (pip install 'eventspace[mpi]')")


def environment_of(pid: int) -> dict[str, str]:
    """The environment process `pid` was started with (where its launcher put its rank)."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {os.fsdecode(k): os.fsdecode(v) for k, v in pairs}


def _alive(pids) -> list[int]:
    return [pid for pid in pids if not gone(pid)]


def _start_launcher(run_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "EVENTSPACE_RUN_DIR": str(run_dir)}
    return subprocess.Popen([sys.executable, "-m", "eventspace.cli", "launch", str(PATHMAP), "--mpiexec"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _kill_launcher_and_wait_for(launcher: subprocess.Popen, pids: list[int]) -> None:
    """SIGKILL the launcher (no chance to stop anything); AssertionError if its ranks do not end within 20 s."""
    launcher.kill()
    launcher.wait(10)
    until(lambda: not _alive(pids), 20, "the ranks ending after their launcher was killed")


def _clean_up(launcher: subprocess.Popen, run_dir: Path) -> None:
    if launcher.poll() is None:
        os.killpg(launcher.pid, signal.SIGKILL)
    # mpiexec and any rank left: their command lines name this test's pathmap copy ("--" first:
    # pkill takes a pattern that starts with "--" for an option, and then kills nothing).
    subprocess.run(["pkill", "-KILL", "-f", "--", f"--pathmap {run_dir}"], check=False)


@requires_mpiexec
def test_node_i_runs_as_rank_i_and_the_run_is_as_with_local_processes(tmp_path):
    with launch(PATHMAP, run_dir=tmp_path, mpiexec=[]) as run:
        pids = run.pids
        assert sorted(pids) == ["A", "B", "C", "D"]
        ranks = {node: my_rank(environment_of(pid)) for node, pid in pids.items()}
        assert ranks == {"A": 0, "B": 1, "C": 2, "D": 3}
        # Monitors find it by its run file as any run.
        with EventScope(RunFile.find(run.name, tmp_path), "all", mode="latest") as scope:
            assert not scope.pull().missing
        with Heartbeat(RunFile.find(run.name, tmp_path)) as heartbeat:
            assert not heartbeat.read().gone
    assert not _alive(pids.values()), "a rank outlived the run"


@requires_mpiexec
def test_the_wind_tunnel_under_mpiexec_ends_with_the_reference_grid(tmp_path):
    summary = run_windtunnel(PATHMAP, "small", 10, 7, 5, tmp_path, mpiexec=[])
    n = summary.n
    assert summary.grid_sha256 == grid_sha256(reference_run(n, 10, 7))


@requires_mpiexec
def test_ranks_end_when_their_launcher_is_killed(tmp_path):
    launcher = _start_launcher(tmp_path)
    try:
        run = until(lambda: RunFile.find("windtunnel-4node", tmp_path), 60, "the run file naming the 4 ranks",
                    ignoring=RunError, holds=lambda found: len(found.pids) == 4)
        pids = list(run.pids.values())
        assert len(pids) == 4 and launcher.poll() is None
        _kill_launcher_and_wait_for(launcher, pids)
        assert not _alive(pids), "ranks outlived their launcher"
    finally:
        _clean_up(launcher, tmp_path)


# A launcher cut short: it starts the ranks as paths.launch does, reads the line each prints
# once it serves, and dies before it tells rank 0 where the others listen.
_DIES_BEFORE_LINKING = """
import subprocess, sys
from paths import mpiexec
ranks = subprocess.Popen(mpiexec.command(4, [], [sys.executable, "-m", "paths", "--pathmap", sys.argv[1],
                                                 "--launched", "--by-rank"]),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
for _ in range(4):
    sys.stdout.write(ranks.stdout.readline().decode())
sys.stdout.flush()
ranks.wait()
"""


@requires_mpiexec
def test_ranks_end_when_their_launcher_dies_before_linking_them(tmp_path):
    # Rank 0 cannot stop nodes it was never told of, and mpiexec (Hydra) ends the other ranks
    # neither on rank 0's exit (they never call MPI_Init) nor, at times, forwards its closed
    # stdin at all: the launcher's death itself must end the job.
    launcher = subprocess.Popen([sys.executable, "-c", _DIES_BEFORE_LINKING, str(PATHMAP)], cwd=REPO,
                                stdout=subprocess.PIPE, start_new_session=True)
    try:
        pids = [json.loads(launcher.stdout.readline())["pid"] for _ in range(4)]
        _kill_launcher_and_wait_for(launcher, pids)
        assert not _alive(pids), "ranks outlived their launcher"
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        subprocess.run(["pkill", "-KILL", "-f", "--", f"--pathmap {PATHMAP} --launched --by-rank"], check=False)


@requires_mpiexec
def test_the_launch_command_starts_and_stops_the_ranks(tmp_path):
    env = {**os.environ, "EVENTSPACE_RUN_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "eventspace.cli", "launch", str(PATHMAP), "--mpiexec",
                           "--duration", "1"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "4 nodes up as MPI ranks" in done.stderr and "stopped its 4 nodes" in done.stderr
    assert not list(tmp_path.glob("*.json")), "the run file outlived the run"


def test_a_rank_without_a_node_is_one_line(tmp_path):
    env = {**os.environ, "PMI_RANK": "9"}
    done = subprocess.run([sys.executable, "-m", "paths", "--pathmap", str(PATHMAP), "--by-rank"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "node of this rank: rank 9 has no node: the pathmap has 4 nodes; start 4 ranks (mpiexec -n 4)"]


def test_by_rank_outside_mpiexec_says_how_to_start_it(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")}
    done = subprocess.run([sys.executable, "-m", "paths", "--pathmap", str(PATHMAP), "--by-rank"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "start this command with mpiexec or srun" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_launcher_that_is_not_there_is_named(tmp_path):
    env = {**os.environ, "EVENTSPACE_MPIEXEC": "no-such-mpiexec -x", "EVENTSPACE_RUN_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "eventspace.cli", "launch", str(PATHMAP), "--mpiexec"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "$EVENTSPACE_MPIEXEC names 'no-such-mpiexec', which is not on PATH" in done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.glob("*.json"))


def test_mpiexec_args_alone_are_refused(tmp_path):
    env = {**os.environ, "EVENTSPACE_RUN_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "eventspace.cli", "launch", str(PATHMAP), "--mpiexec-args", "-f h"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--mpiexec-args without --mpiexec" in done.stderr


MERGED = ('{"node": "A", "endpoint": "tcp://127.0.0.1:5001", "pid": 11}'
          '{"node": "D", "endpoint": "tcp://127.0.0.1:5004", "pid": 14}\n\n')


def test_two_ranks_lines_run_together_by_the_launcher_are_both_read(tmp_path):
    """Ranks share mpiexec's output: a rank that wrote its newline apart (PYTHONUNBUFFERED) had its
    line run into the next rank's, and the launch waited a minute for two nodes that were serving."""
    ranks = subprocess.Popen([sys.executable, "-c", f"import sys, time; sys.stdout.write({MERGED!r}); "
                              "sys.stdout.flush(); time.sleep(30)"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        endpoints, pids = _await_ranks(ranks, ["A", "D"], tmp_path / "ranks.log", 10)
    finally:
        ranks.kill()
        ranks.communicate()
    assert endpoints == {"A": "tcp://127.0.0.1:5001", "D": "tcp://127.0.0.1:5004"} and pids == {"A": 11, "D": 14}


def test_reclaim_sessions_removes_what_killed_open_mpi_launchers_left_and_nothing_else(tmp_path, monkeypatch):
    """Open MPI's launcher keeps its session in ompi.<its pid> under the temporary directory and removes it
    at its end, unless it was killed. Reclaimed: the directory of a pid that no longer runs, and of one that
    runs something else now. Kept: a running launcher's, another user's, and what is not a session's."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc")
    sessions = tmp_path / "tmp"
    sessions.mkdir()
    monkeypatch.setenv("TMPDIR", str(sessions))
    ended = subprocess.Popen(["true"])
    ended.wait()
    shutil.copy(shutil.which("sleep"), tmp_path / "prterun")   # a process named as Open MPI's launcher is
    launcher = subprocess.Popen([str(tmp_path / "prterun"), "60"])
    other = subprocess.Popen(["sleep", "60"])
    try:
        for pid in (ended.pid, launcher.pid, other.pid):
            (sessions / f"ompi.{pid}" / "1").mkdir(parents=True)
            (sessions / f"ompi.{pid}" / f"pmix.host.tool.{pid}").write_text(f"uri\nversion\n{pid}\n")
        (sessions / "ompi.host.0").mkdir()            # Open MPI's, but no launcher's session
        (sessions / "ompi.1").write_text("a file")      # not a directory
        kept = [f"ompi.{launcher.pid}", "ompi.host.0", "ompi.1"]
        if os.geteuid() == 0:   # another user's (a pid that never ran)
            theirs = sessions / f"ompi.{ended.pid + 1_000_000}"
            theirs.mkdir()
            os.chown(theirs, 4321, 4321)
            kept.append(theirs.name)
        removed = reclaim_sessions()
        assert sorted(removed) == sorted(str(sessions / f"ompi.{p}") for p in (ended.pid, other.pid))
        assert sorted(p.name for p in sessions.iterdir()) == sorted(kept)
    finally:
        for process in (launcher, other):
            process.kill()
            process.wait()
