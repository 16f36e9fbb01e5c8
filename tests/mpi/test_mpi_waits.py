"""The heartbeat on MPI runs: what each rank waits in, on whom, and deadlocks (real mpiexec jobs)."""

from __future__ import annotations

import pytest

from jobs import PROGRAMS, monitor, requires_mpi, start, stop, until_in_calls, until_live
from polling import until

pytestmark = requires_mpi

INTERVAL = 0.5


def beats(name, tmp_path, count):
    """`count` beats of `eventspace monitor heartbeat --json` on run `name`."""
    return monitor("heartbeat", "--run", name, "--interval", INTERVAL, "--duration", INTERVAL * count - INTERVAL / 2,
                   cwd=tmp_path)


def waiting_in(beat) -> dict[str, str]:
    return {t["thread"]: t["waiting_in"] for t in beat["threads"] if t["status"] == "waiting"}


def at(call: str) -> str:
    """` at waits.py:N in <module>`: where in tests/mpi/programs/waits.py the first line holding `call` is."""
    return at_line("waits.py", call)


def at_line(program: str, call: str, nth: int = 1) -> str:
    """` at PROGRAM:N in <module>`: where in tests/mpi/programs/PROGRAM the nth line holding `call` is."""
    lines = (PROGRAMS / program).read_text().splitlines()
    number = [i for i, text in enumerate(lines, 1) if call in text][nth - 1]
    return f" at {program}:{number} in <module>"


@pytest.mark.parametrize("mode", ["p2p", pytest.param("p2p-buffer", marks=pytest.mark.slow),   # 5 s each:
                                  pytest.param("p2p-request", marks=pytest.mark.slow)])   # test-fast in 3 min
def test_two_ranks_receiving_from_each_other_are_a_deadlock_within_three_beats(tmp_path, mode):
    name = f"dead-{mode}"   # a run name of its own: the other case's run file may outlive its kill
    job = start(tmp_path, 2, name, "waits.py", mode)
    try:
        until_live(name, job)
        until_in_calls(name, 2)   # past the Barrier: both ranks are in their receive
        seen = beats(name, tmp_path, 4)
    finally:
        stop(job)
    found = [i for i, beat in enumerate(seen) if beat["deadlock"]]
    assert found and found[0] <= 2, seen   # the third beat at the latest
    call = "Wait for Irecv" if mode == "p2p-request" else "Recv"   # a Wait names the request it waits for
    line = {"p2p": "comm.recv(source=1 - r", "p2p-buffer": "comm.Recv(", "p2p-request": "comm.Irecv("}[mode]
    assert seen[found[0]]["deadlock"] == [f"r0 waits {call} from r1 tag 0 on comm 0{at(line)}",
                                          f"r1 waits {call} from r0 tag 0 on comm 0{at(line)}"]
    assert {t["thread"]: t["where"] for t in seen[-1]["threads"]} == {"r0": at(line)[4:], "r1": at(line)[4:]}
    assert waiting_in(seen[-1]) == {"r0": f"{call} from r1 tag 0 on comm 0", "r1": f"{call} from r0 tag 0 on comm 0"}


@pytest.mark.slow   # 6 s: make test-fast stays within its 3 minutes
def test_a_collective_waiting_on_a_rank_that_waits_on_it_is_a_deadlock(tmp_path):
    job = start(tmp_path, 3, "dead-coll", "waits.py", "collective")
    try:
        until_live("dead-coll", job)
        until_in_calls("dead-coll", 3)   # r0 and r1 in the Allreduce, r2 in its receive
        seen = beats("dead-coll", tmp_path, 4)
    finally:
        stop(job)
    assert seen[-1]["deadlock"] == [f"r0 waits Allreduce on comm 0, round 1, waiting for r2{at('comm.allreduce(r)')}",
                                    f"r2 waits Recv from r0 tag 5 on comm 0{at('comm.recv(source=0, tag=5)')}"]
    assert waiting_in(seen[-1]) == {"r0": "Allreduce on comm 0, round 1, waiting for r2",
                                    "r1": "Allreduce on comm 0, round 1, waiting for r2",
                                    "r2": "Recv from r0 tag 5 on comm 0"}


@pytest.mark.slow   # 6 s: make test-fast stays within its 3 minutes
def test_a_late_rank_is_named_and_is_no_deadlock(tmp_path):
    release = tmp_path / "release"
    job = start(tmp_path, 3, "late", "waits.py", "late", release)
    try:
        until_live("late", job)
        until_in_calls("late", 2)   # r0 and r1 in the Allreduce (r2 waits for the release, outside MPI)
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


def test_a_rank_blocked_in_its_first_call_with_a_tag_nobody_sends_yet_is_waiting_and_says_where(tmp_path):
    release = tmp_path / "release"
    job = start(tmp_path, 2, "first", "waits.py", "first", release)
    seen = []
    try:
        until_live("first", job)
        # until rank 0 is in its receive (its first MPI call: no record of it yet), which a loaded
        # machine may take a while to reach
        def r0_waiting() -> bool:
            seen.extend(beats("first", tmp_path, 2))
            return _thread(seen[-1], "r0")["status"] == "waiting"

        until(r0_waiting, 90, "a beat with r0 waiting")
        release.touch()
        out, err = job.communicate(timeout=60)
    finally:
        stop(job)
    assert job.returncode == 0, err
    r0 = _thread(seen[-1], "r0")
    assert (r0["status"], r0["waiting_in"]) == ("waiting", "Recv from r1 tag 99 on comm 0"), seen[-1]
    assert r0["where"] == at("comm.recv(source=1, tag=99)")[4:]
    assert not any(beat["deadlock"] for beat in seen)   # rank 1 is free: it will send


def _thread(beat, name: str) -> dict:
    return next(t for t in beat["threads"] if t["thread"] == name)


@pytest.mark.slow   # 7-9 s: make test-fast stays within its 3 minutes
def test_eventspace_stack_merges_identical_stacks_and_says_what_each_rank_is_in(tmp_path):
    import json
    import subprocess
    import sys

    job = start(tmp_path, 4, "stacks", "waits.py", "collective")
    try:
        until_live("stacks", job)
        until_in_calls("stacks", 4)   # past the Barrier: r0, r1, r3 in the Allreduce, r2 in its receive
        shown = subprocess.run([sys.executable, "-m", "eventspace.cli", "stack", "--run", "stacks", "--json"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=60)
    finally:
        stop(job)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    groups = {tuple(g["threads"]): g for g in report["groups"]}
    assert set(groups) == {("r0", "r1", "r3"), ("r2",)}   # one group per distinct stack
    allreduce, receive = groups[("r0", "r1", "r3")], groups[("r2",)]
    assert allreduce["where"] == at("comm.allreduce(r)")[4:] and allreduce["stack"][-1] == allreduce["where"]
    assert allreduce["in_flight"] == {r: "MPI_Allreduce on comm 0, round 1" for r in ("r0", "r1", "r3")}
    assert receive["where"] == at("comm.recv(source=0, tag=5)")[4:]
    assert receive["in_flight"] == {"r2": "MPI_Recv from r0 tag 5 on comm 0"}
    assert report["not_answering"] == report["gone"] == []
