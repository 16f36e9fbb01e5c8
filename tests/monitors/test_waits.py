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


def test_a_windows_calls_wait_on_their_target_the_group_they_name_or_a_fences_missing_members():
    from eventspace.catalogue import Catalogue
    from eventspace.mpi import encoding as e
    from eventspace.mpi.generate import Communicator, collector_ids, run_pathmap
    from eventspace.space import Mark
    from monitors.waits import waits

    # Window 1 over world ranks 3, 2, 1, 0 (its rank k is world rank 3 - k).
    comms = [Communicator(0, (0, 1, 2, 3), "COMM_WORLD"), Communicator(1, (3, 2, 1, 0), "Win.Create of comm 0")]
    cat = Catalogue(run_pathmap("win", ["h"] * 4, {"h": "c"}, comms))
    p2p, rounds = ({r: collector_ids(cat, 1, r)[kind] for r in range(4)} for kind in (0, 1))
    marks = {p2p[0]: Mark(5, e.WIN_WAIT, 0, 2, 0b0110, 0),    # the group of its Post: window ranks 1 and 2
             p2p[1]: Mark(5, e.WIN_UNLOCK, 0, 0, 0, 0),       # on world rank 0
             rounds[2]: Mark(5, e.WIN_FENCE, 0, e.PEER_NONE, 4, 0),
             rounds[3]: Mark(5, e.WIN_FENCE, 0, e.PEER_NONE, 4, 0)}
    found = waits(marks, cat, {(0, 1): 3, (1, 1): 4})   # rank 1 completed round 4 already: rank 0 has not
    assert found[0].text == "Win_wait for window ranks 1, 2 on win 1, waiting for r2, r1"
    assert found[0].on == (2, 1)
    assert (found[1].text, found[1].on) == ("Win_unlock target r0 on win 1", (0,))
    assert (found[2].text, found[2].on) == ("Win_fence on win 1, round 4, waiting for r0", (0,))
    # r0 waits on r2 and r1, r1, r2 and r3 on r0: nobody can release them.
    assert deadlock(found, range(4)).lines == ["r0 waits Win_wait for window ranks 1, 2 on win 1, waiting for r2, r1",
                                               "r2 waits Win_fence on win 1, round 4, waiting for r0"]
    # A group beyond what a record holds names nobody: never a deadlock of its own.
    beyond = waits({p2p[0]: Mark(5, e.WIN_COMPLETE, 0, 40, 0b1, 0)}, cat, {})
    assert beyond[0].on == () and beyond[0].text == "Win_complete for 40 window ranks on win 1"
