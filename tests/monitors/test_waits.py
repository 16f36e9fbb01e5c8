"""The wait-for analysis of MPI ranks: who can release whom, and which waits are a deadlock."""

from __future__ import annotations

from monitors.waits import Wait, deadlock


def recv(rank, source, any_of=False, on=None):
    on = tuple(on) if on is not None else (source,)
    what = "any source" if any_of else f"r{source}"
    return Wait(rank, 0, f"Recv from {what} tag 0 on comm 0", on, any_of, False, rank + 1, 100)


def allreduce(rank, missing):
    return Wait(rank, 0, "Allreduce on comm 0, round 3", tuple(missing), False, True, rank + 10, 100)


def test_a_cycle_of_receives_is_a_deadlock_named_from_its_lowest_rank():
    found = {2: recv(2, 1), 1: recv(1, 2), 0: recv(0, 1)}
    dead = deadlock(found, range(4))
    assert dead.text == "deadlock: r1 waits Recv from r2 tag 0 on comm 0; r2 waits Recv from r1 tag 0 on comm 0"


def test_a_rank_that_is_not_waiting_can_release_every_chain_that_ends_at_it():
    assert deadlock({0: recv(0, 1), 1: recv(1, 2)}, range(3)) is None


def test_a_collective_waits_on_the_members_that_have_not_entered_its_round():
    found = {0: allreduce(0, [2]), 1: allreduce(1, [2]), 2: recv(2, 0)}
    assert deadlock(found, range(3)).lines == ["r0 waits Allreduce on comm 0, round 3, waiting for r2",
                                               "r2 waits Recv from r0 tag 0 on comm 0"]
    # Every member inside its round: it completes, nothing waits on anyone.
    assert deadlock({0: allreduce(0, []), 1: allreduce(1, [])}, range(2)) is None


def test_any_source_receives_deadlock_only_when_every_candidate_is_stuck():
    everyone = {r: recv(r, None, any_of=True, on=[o for o in range(3) if o != r]) for r in range(3)}
    assert deadlock(everyone, range(3)).ranks == (0, 1, 2)
    assert deadlock({0: everyone[0], 1: everyone[1]}, range(3)) is None   # rank 2 is free


def test_a_rank_whose_node_did_not_answer_is_not_blamed():
    assert deadlock({0: recv(0, 1)}, range(2), unknown={1}) is None
    assert deadlock({0: recv(0, 1), 1: recv(1, 0)}, range(2), unknown={1}) is None


def test_the_heartbeat_prints_a_deadlock_as_one_line():
    from rich.console import Console

    from monitors.heartbeat import WAITING, HeartbeatReport, ThreadBeat
    from monitors.render import heartbeat_summary

    dead = deadlock({0: recv(0, 1), 1: recv(1, 0)}, range(2))
    report = HeartbeatReport(0.0, [ThreadBeat(f"r{r}", f"r{r}", WAITING, 5, 1.5, recv(r, 1 - r).text) for r in (0, 1)],
                             deadlock=dead.lines)
    console = Console(width=200, record=True)
    console.print(heartbeat_summary(report, "12:00:00"))
    text = console.export_text()
    assert "deadlock: r0 waits Recv from r1 tag 0 on comm 0; r1 waits Recv from r0 tag 0 on comm 0" in text
    assert report.as_dict()["deadlock"] == dead.lines
