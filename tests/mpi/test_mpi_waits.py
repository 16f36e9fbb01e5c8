"""The heartbeat on MPI runs: what each rank waits in, on whom, and deadlocks (real mpiexec jobs)."""

from __future__ import annotations

import time

import pytest

from jobs import monitor, requires_mpi, start, stop, until_live

pytestmark = requires_mpi

INTERVAL = 0.5


def beats(name, tmp_path, count):
    """`count` beats of `eventspace monitor heartbeat --json` on run `name`."""
    return monitor("heartbeat", "--run", name, "--interval", INTERVAL, "--duration", INTERVAL * count - INTERVAL / 2,
                   cwd=tmp_path)


def waiting_in(beat) -> dict[str, str]:
    return {t["thread"]: t["waiting_in"] for t in beat["threads"] if t["status"] == "waiting"}


@pytest.mark.parametrize("mode", ["p2p", "p2p-buffer", "p2p-request"])
def test_two_ranks_receiving_from_each_other_are_a_deadlock_within_three_beats(tmp_path, mode):
    name = f"dead-{mode}"   # a run name of its own: the other case's run file may outlive its kill
    job = start(tmp_path, 2, name, "waits.py", mode)
    try:
        until_live(name, job)
        time.sleep(0.5)   # past the Barrier: both ranks are in their receive
        seen = beats(name, tmp_path, 4)
    finally:
        stop(job)
    found = [i for i, beat in enumerate(seen) if beat["deadlock"]]
    assert found and found[0] <= 2, seen   # the third beat at the latest
    call = "Wait for Irecv" if mode == "p2p-request" else "Recv"   # a Wait names the request it waits for
    assert seen[found[0]]["deadlock"] == [f"r0 waits {call} from r1 tag 0 on comm 0",
                                          f"r1 waits {call} from r0 tag 0 on comm 0"]
    assert waiting_in(seen[-1]) == {"r0": f"{call} from r1 tag 0 on comm 0", "r1": f"{call} from r0 tag 0 on comm 0"}


def test_a_collective_waiting_on_a_rank_that_waits_on_it_is_a_deadlock(tmp_path):
    job = start(tmp_path, 3, "dead-coll", "waits.py", "collective")
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
    job = start(tmp_path, 3, "late", "waits.py", "late", release)
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
