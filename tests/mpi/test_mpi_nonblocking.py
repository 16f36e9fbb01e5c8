"""Nonblocking and persistent calls: exact records of posts and completions, rounds that stay aligned,
colop and the heartbeat on a nonblocking collective, and every untraced call named at the end."""

from __future__ import annotations

import json
import os
import pickle
from collections import Counter

import pytest

from eventspace.archive import Archive
from eventspace.mpi import encoding as e
from jobs import monitor, mpirun, ours, requires_mpi, start, stop, until_in_calls, until_live
from monitors.waitstates import archive_waits
from polling import until

pytestmark = requires_mpi

FIELDS = ("thread", "op", "flags", "element", "arg", "nbytes", "coalesce(element_name, tree)", "t_start", "t_end")
NONE = e.PEER_NONE


def run_rows(tmp_path, name: str, env=None):
    """Run nonblocking.py on 3 ranks: (its records as tuples of FIELDS in order of t_start, the
    communicators {id: how}, our lines)."""
    archive = tmp_path / f"{name}.sqlite"
    result = mpirun("-n", 3, "--archive", archive, "nonblocking.py", cwd=tmp_path,
                    env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})})
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == ["0", "1", "2", "done", "done", "done"]
    with Archive.open(archive) as db:
        _, rows = db.query(f"SELECT {', '.join(FIELDS)} FROM events ORDER BY t_start, seq")
        assert db.info.discarded == 0
        comms = {c["id"]: c["how"] for c in json.loads(db.info.extra["communicators"])}
    return rows, comms, ours(result.stderr)


def test_nonblocking_and_persistent_calls_are_exact_posts_and_requests(tmp_path):
    rows, comms, said = run_rows(tmp_path, "nonblocking")
    assert comms == {0: "COMM_WORLD", 1: "Idup of comm 0", 2: "Create_cart of comm 0"}
    counts = Counter((t, op, flags, peer, arg, n, where) for t, op, flags, peer, arg, n, where, _, _ in rows)
    posted = e.REQUEST

    def both(thread, op, peer, arg, n, flags=0, where="comm0", times=1, done_flags=None):
        """The post record and the request record of `times` operations."""
        assert counts[thread, op, flags, peer, arg, n, where] == times, (thread, e.NAMES[op], arg)
        done = flags | posted if done_flags is None else done_flags
        assert counts[thread, op, done, peer, arg, n, where] == times, (thread, e.NAMES[op], arg, "request")

    for rank in range(3):
        t, right, left = f"r{rank}", (rank + 1) % 3, (rank - 1) % 3
        # Nonblocking collectives: post and request record, the round as arg, the root as element,
        # the bytes this rank sends; a blocking Allreduce (round 3) between a post and its Wait.
        both(t, e.IBARRIER, NONE, 0, 0)
        both(t, e.IBCAST, 1, 1, 128 if rank == 1 else 0)
        both(t, e.IALLREDUCE, NONE, 2, 128)
        assert counts[t, e.ALLREDUCE, 0, NONE, 3, 128, "comm0"] == 1
        both(t, e.IGATHER, 2, 4, 128)
        both(t, e.ISCATTER, 0, 5, 384 if rank == 0 else 0)
        both(t, e.IALLGATHER, NONE, 6, 128)
        both(t, e.IALLTOALL, NONE, 7, 96)
        both(t, e.IALLTOALLV, NONE, 8, 48)
        both(t, e.IREDUCE, 0, 9, 128)
        both(t, e.IREDUCE_SCATTER_BLOCK, NONE, 10, 96)
        both(t, e.ISCAN, NONE, 11, 128)
        both(t, e.IEXSCAN, NONE, 12, 128)
        # Persistent collectives: each Start a round; the init call writes nothing.
        for round_ in (13, 14, 15):
            both(t, e.ALLREDUCE_INIT, NONE, round_, 128)
        both(t, e.BCAST_INIT, 0, 16, 128 if rank == 0 else 0)
        # Completion calls: of the collectives (13 Waits, 2 Waitalls: of 2 and of 1), of the
        # persistent point-to-point requests (2 Waits, 3 Waitalls of 2), of r1's matched Irecv.
        assert counts[t, e.WAIT, 0, 1, 1, 0, "comm0"] == 13 + 2 + (rank == 1)
        assert counts[t, e.WAITALL, 0, 2, 2, 0, "comm0"] == 1 + 3
        assert counts[t, e.WAITALL, 0, 1, 1, 0, "comm0"] == 1
        # Persistent point-to-point: three Startalls of the ring, each a post and a request record.
        both(t, e.SEND_INIT, right, 21, 64, times=3)
        assert counts[t, e.RECV_INIT, e.ANY_SOURCE, e.PEER_ANY, 21, 0, "comm0"] == 3
        assert counts[t, e.RECV_INIT, e.ANY_SOURCE | e.REQUEST, left, 21, 64, "comm0"] == 3
        both(t, e.SSEND_INIT, right, 22, 16)
        assert counts[t, e.RECV_INIT, 0, left, 22, 0, "comm0"] == 1
        assert counts[t, e.RECV_INIT, e.REQUEST, left, 22, 16, "comm0"] == 1
        both(t, e.BSEND_INIT, right, 23, 8)
        both(t, e.RSEND_INIT, right, 24, 8)
        for tag in (23, 24):
            assert counts[t, e.RECV_INIT, 0, left, tag, 0, "comm0"] == 1
            assert counts[t, e.RECV_INIT, e.REQUEST, left, tag, 8, "comm0"] == 1
        assert counts[t, e.WAITALL, 0, 4, 4, 0, "comm0"] == 1
        assert counts[t, e.SENDRECV_SEND, 0, left, 25, 0, "comm0"] == 1
        assert counts[t, e.SENDRECV_RECV, 0, right, 25, 0, "comm0"] == 1
        assert counts[t, e.SENDRECV_REPLACE_SEND, 0, right, 31, 32, "comm0"] == 1
        assert counts[t, e.SENDRECV_REPLACE_RECV, 0, left, 31, 32, "comm0"] == 1
        # The Idup's communicator: its own round 0.
        assert counts[t, e.ALLREDUCE, 0, NONE, 0, 128, "comm1"] == 1
        # Neighbourhood collectives on the ring, its rounds 0..4: blocking, posted, pickled, persistent, vector.
        assert counts[t, e.NEIGHBOR_ALLGATHER, 0, NONE, 0, 128, "comm2"] == 1
        both(t, e.NEIGHBOR_ALLTOALL + 0x40, NONE, 1, 32, where="comm2")
        assert [k for k in counts if k[:5] == (t, e.NEIGHBOR_ALLGATHER, e.PICKLED, NONE, 2) and k[5] > 0]
        both(t, e.NEIGHBOR_ALLGATHER + 0x60, NONE, 3, 128, where="comm2")
        assert counts[t, e.NEIGHBOR_ALLTOALLV, 0, NONE, 4, 32, "comm2"] == 1
        assert counts[t, e.WAIT, 0, 1, 1, 0, "comm2"] == 2
    # Matched probes: by the communicator and by MPI.Message.Probe (an Mprobe), received by Recv, Irecv, recv.
    assert counts["r1", e.MPROBE, 0, 0, 41, 40, "comm0"] == counts["r1", e.MRECV, 0, 0, 41, 40, "comm0"] == 1
    assert counts["r1", e.MPROBE, 0, 0, 42, 48, "comm0"] == 1
    assert counts["r1", e.IMRECV, 0, 0, 42, 48, "comm0"] == counts["r1", e.IMRECV, e.REQUEST, 0, 42, 48, "comm0"] == 1
    pickled = len(pickle.dumps("matched", 5))
    assert counts["r1", e.PROBE, 0, 0, 43, pickled, "comm0"] == 1
    assert counts["r1", e.IMPROBE, e.PICKLED, 0, 43, pickled, "comm0"] == 1
    assert counts["r1", e.MRECV, e.PICKLED, 0, 43, pickled, "comm0"] == 1
    # Nothing else: every record is one of those above (r0's sends and the Idup's are counted here).
    collectives = 2 * 12 + 1 + 2 * 4 + 13 + 2      # posts and requests, the Allreduce, starts, completions
    p2p = 2 * 6 + 3 + 2 * 2 + 2 + 2                # the ring's, its Waitalls, the pair's, their Waits, Sendrecv_replace
    p2p += 2 * 4 + 2 + 1                           # buffered and ready: 4 posts and requests, the Sendrecv, a Waitall
    expected_per_rank = collectives + p2p + 1 + 9   # + the Idup's communicator's Allreduce, + the ring's
    extra = {"r0": 3, "r1": 9, "r2": 0}
    assert Counter(t for t, *_ in rows) == {f"r{k}": expected_per_rank + extra[f"r{k}"] for k in range(3)}
    # A request record spans its post to its completion: it starts with its post.
    starts = {(t, op, arg, where): t0 for t, op, flags, _, arg, _, where, t0, _ in rows if not flags & e.REQUEST
              and op in e.POSTED_COLLECTIVES}
    for t, op, flags, _, arg, _, where, t0, t1 in rows:
        if flags & e.REQUEST and op in e.POSTED_COLLECTIVES:
            assert t0 == starts[t, op, arg, where] and t1 > t0
    # Every untraced call, summed over the ranks, named once at the end.
    assert said[-1] == ("eventspace.mpi: not traced: 6 calls of MPI_Comm_free, 6 calls of MPI_Comm_set_name, "
                        "3 calls of MPI_Comm_create_keyval, 3 calls of MPI_Comm_free_keyval")


@pytest.mark.slow
def test_compiled_nonblocking_collectives_write_what_the_pure_ones_write(tmp_path):
    seen = {}
    for how, env in (("compiled", {}), ("pure", {"EVENTSPACE_PURE": "1"})):
        rows, _, _ = run_rows(tmp_path, how, env)
        seen[how] = Counter(row[:7] for row in rows)
    assert seen["compiled"] == seen["pure"]


def test_a_program_that_calls_only_untraced_methods_is_told_what_it_called(tmp_path):
    result = mpirun("-n", 2, "untraced_only.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert ours(result.stderr)[-1] == ("eventspace.mpi: no MPI calls were collected; not traced: 2 calls of "
                                       "MPI_Comm_create_keyval, 2 calls of MPI_Comm_free_keyval, 2 calls of "
                                       "MPI_Comm_set_name")


@pytest.mark.slow
def test_colop_the_heartbeat_and_the_wait_states_see_a_nonblocking_collective_as_a_round(tmp_path):
    release, archive = tmp_path / "release", tmp_path / "posted.sqlite"
    job = start(tmp_path, 3, "posted", "posted_rounds.py", release, options=("--archive", archive))
    try:
        until_live("posted", job)
        until_in_calls("posted", 2)   # r0 and r1 wait for round 5 (r2 waits for the release, outside MPI)

        def colop():
            frames = monitor("colop", "--run", "posted", "--interval", 0.5, "--duration", 0.7, cwd=tmp_path)
            return frames[-1] if frames else None

        report = until(colop, 60, "colop's report of the 5 rounds and the open one",
                       holds=lambda got: got is not None and got["open"] is not None and got["ops"]
                       and got["ops"][0]["rounds"] == 5)
        beats = monitor("heartbeat", "--run", "posted", "--interval", 0.5, "--duration", 0.7, cwd=tmp_path)
        release.touch()
        out, err = job.communicate(timeout=60)
    finally:
        stop(job)
    assert job.returncode == 0, err
    (iallreduce,) = report["ops"]
    assert iallreduce["op"] == "MPI_Iallreduce"
    assert report["open"]["round"] == 5
    assert (report["open"]["arrived"], report["open"]["waiting_for"]) == (["r0", "r1"], ["r2"])
    waiting = {t["thread"]: t["waiting_in"] for t in beats[-1]["threads"] if t["status"] == "waiting"}
    assert waiting == {"r0": "Wait for Iallreduce on comm 0, round 5, waiting for r2",
                       "r1": "Wait for Iallreduce on comm 0, round 5, waiting for r2"}
    assert not beats[-1]["deadlock"]
    # r0 and r1 waited in their Wait for r2's post of round 5 all the while the monitors above ran
    with Archive.open(archive) as db:
        states = archive_waits(db)
    assert states.pairs[0][2] >= 0.5e9 and states.pairs[1][2] >= 0.5e9
    assert [(t.pattern, t.op, t.peer) for t in states.top[:2]] == [("wait_nxn", "MPI_Iallreduce", 2)] * 2
