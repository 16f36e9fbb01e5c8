"""The heartbeat on MPI runs: what each rank waits in, on whom, and deadlocks (real mpiexec jobs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from jobs import PROGRAMS, requires_mpi, run
from paths import RunError, RunFile
from paths.runfile import run_dir

pytestmark = requires_mpi

INTERVAL = 0.5


def start(tmp_path, ranks, name, *args):
    return subprocess.Popen([sys.executable, "-m", "eventspace.cli", "mpirun", "-n", str(ranks), "--name", name,
                             str(PROGRAMS / "waits.py"), *map(str, args)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def until_live(name, job, timeout=60.0) -> RunFile:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert job.poll() is None, job.communicate()
        try:
            return RunFile.find(name).check_live()
        except RunError:
            time.sleep(0.1)
    raise AssertionError(f"run {name} did not come up within {timeout} s")


def stop(job) -> None:
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
    job.communicate()


def beats(name, tmp_path, count):
    """`count` beats of `eventspace monitor heartbeat --json` on run `name`."""
    result = run([sys.executable, "-m", "eventspace.cli", "monitor", "heartbeat", "--run", name, "--json",
                  "--interval", str(INTERVAL), "--duration", str(INTERVAL * count - INTERVAL / 2)], tmp_path,
                 timeout=60)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def waiting_in(beat) -> dict[str, str]:
    return {t["thread"]: t["waiting_in"] for t in beat["threads"] if t["status"] == "waiting"}


def test_two_ranks_receiving_from_each_other_are_a_deadlock_within_three_beats(tmp_path):
    job = start(tmp_path, 2, "dead-p2p", "p2p")
    try:
        until_live("dead-p2p", job)
        time.sleep(0.5)   # past the Barrier: both ranks are in their receive
        seen = beats("dead-p2p", tmp_path, 4)
    finally:
        stop(job)
    found = [i for i, beat in enumerate(seen) if beat["deadlock"]]
    assert found and found[0] <= 2, seen   # the third beat at the latest
    assert seen[found[0]]["deadlock"] == ["r0 waits Recv from r1 tag 0 on comm 0",
                                          "r1 waits Recv from r0 tag 0 on comm 0"]
    assert waiting_in(seen[-1]) == {"r0": "Recv from r1 tag 0 on comm 0", "r1": "Recv from r0 tag 0 on comm 0"}


def test_a_collective_waiting_on_a_rank_that_waits_on_it_is_a_deadlock(tmp_path):
    job = start(tmp_path, 3, "dead-coll", "collective")
    try:
        until_live("dead-coll", job)
        time.sleep(0.5)
        seen = beats("dead-coll", tmp_path, 4)
    finally:
        stop(job)
    assert seen[-1]["deadlock"] == ["r0 waits Allreduce on comm 0, round 1, waiting for r2",
                                    "r2 waits Recv from r0 tag 5 on comm 0"]
    assert waiting_in(seen[-1]) == {"r0": "Allreduce on comm 0, round 1, waiting for r2",
                                    "r1": "Allreduce on comm 0, round 1, waiting for r2",
                                    "r2": "Recv from r0 tag 5 on comm 0"}


def test_a_late_rank_is_named_and_is_no_deadlock(tmp_path):
    release = tmp_path / "release"
    job = start(tmp_path, 3, "late", "late", release)
    try:
        until_live("late", job)
        time.sleep(0.5)
        seen = beats("late", tmp_path, 4)
        release.touch()
        out, err = job.communicate(timeout=60)
    finally:
        stop(job)
    assert job.returncode == 0, err
    assert not any(beat["deadlock"] for beat in seen), seen
    assert waiting_in(seen[-1]) == {"r0": "Allreduce on comm 0, round 1, waiting for r2",
                                    "r1": "Allreduce on comm 0, round 1, waiting for r2"}
    assert sorted(out.split("\n")[:-1]) == ["0 done", "1 done", "2 done"]
