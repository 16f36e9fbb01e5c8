"""MPI calls from several threads of a rank at once, with our node's threads at work, and a program
below MPI_THREAD_MULTIPLE: exact records per thread (tests/mpi/programs/threads.py)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections import Counter

import pytest

from eventspace.archive import Archive
from eventspace.mpi import encoding as e
from eventspace.scope import EventScope
from jobs import PROGRAMS, mpirun, requires_mpi, stop, until_live

pytestmark = requires_mpi

ROUNDS = 60


def size(rank: int, thread: int, round_: int) -> int:
    """As threads.py sizes what thread `thread` of rank `rank` sends in a round."""
    return 1000 * (thread + 1) + 7 * rank + round_


def pickled(rank, thread, round_, letter=b"p") -> int:
    return len(pickle.dumps(letter * size(rank, thread, round_), pickle.HIGHEST_PROTOCOL))


def records(path) -> Counter:
    """(rank, op name, request record?, peer, tag, bytes) of every record in archive `path`, counted."""
    with Archive.open(path) as archive:
        assert archive.info.discarded == 0
        _, rows = archive.query("SELECT thread, op, flags, element, arg, nbytes FROM events")
    return Counter((int(thread[1:]), e.NAMES[op], bool(flags & e.REQUEST), peer, tag, n)
                   for thread, op, flags, peer, tag, n in rows)


def blocking_pickles(thread: int, rounds: int = ROUNDS) -> Counter:
    """The records of ssend_recv in threads.py's thread `thread`, on both ranks."""
    expected = Counter()
    for rank in (0, 1):
        peer, tag = 1 - rank, 10 + thread
        for k in range(rounds):
            expected[rank, "MPI_Ssend", False, peer, tag, pickled(rank, thread, k)] += 1
            expected[rank, "MPI_Recv", False, peer, tag, pickled(peer, thread, k)] += 1
    return expected


def with_barriers(expected: Counter) -> Counter:
    """`expected` and the program's two Barriers on COMM_WORLD (rounds 0 and 1) on each rank."""
    for rank in (0, 1):
        for round_ in (0, 1):
            expected[rank, "MPI_Barrier", False, e.PEER_NONE, round_, 0] += 1
    return expected


def both_ranks_ended(stdout: str) -> None:
    assert sorted(line for line in stdout.splitlines() if line.startswith("rank ")) == ["rank 0: done", "rank 1: done"]


def test_two_threads_sending_pickles_at_once_each_get_exact_bytes(tmp_path):
    """Issue 35: the pickle byte count was one for the process, so a pickle-form call made while
    another thread pickled counted that thread's bytes too; and the Status a receive reads what came
    with was one per collector, filled by two threads' receives at once. Two threads per rank, each
    with its own tag and sizes, ssend and recv pickles at once under MPI_THREAD_MULTIPLE: every
    record holds its own message's bytes."""
    (tmp_path / "go").touch()
    archive = tmp_path / "threads.sqlite"
    result = mpirun("-n", 2, "--archive", archive, "threads.py", "pickles", ROUNDS, tmp_path / "go", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    both_ranks_ended(result.stdout)
    assert records(archive) == with_barriers(blocking_pickles(0) + blocking_pickles(1))


@pytest.mark.slow
def test_four_threads_per_rank_calling_mpi_while_a_monitor_pulls_get_exact_records(tmp_path):
    """Four threads per rank on COMM_WORLD at once (buffers and pickles, blocking and posted, no
    Status named), while a monitor pulls the rank's node server (its threads busy answering) and the
    collectors spill into the recording every few records: every call is one exact record, none
    lost, and the monitor saw them as they came."""
    name, go, archive = "threads-mixed", tmp_path / "go", tmp_path / "mixed.sqlite"
    # --keep 16: the collectors spill into the recording every few records, from whichever thread appended
    job = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "mpirun", "-n", "2", "--name", name, "--archive",
                            str(archive), "--keep", "16", str(PROGRAMS / "threads.py"), "mixed", str(ROUNDS), str(go)],
                           cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        run_file = until_live(name, job, 90)
        pulled = 0
        with EventScope(run_file, "all", mode="stream", timeout=2.0) as scope:
            scope.pull()
            go.touch()
            while job.poll() is None:
                pull = scope.pull()
                pulled += len(pull.records)
                if pull.missing:   # the run has ended under the pull
                    break
        out, err = job.communicate(timeout=120)
        assert job.returncode == 0, err
    finally:
        stop(job)
    both_ranks_ended(out)
    expected = blocking_pickles(1)
    for rank in (0, 1):
        peer = 1 - rank
        for k in range(ROUNDS):
            mine, theirs = size(rank, 0, k), size(peer, 0, k)
            expected[rank, "MPI_Send", False, peer, 10, mine] += 1
            expected[rank, "MPI_Recv", False, peer, 10, theirs] += 1
            mine, theirs = size(rank, 2, k), size(peer, 2, k)   # posts, their requests' records, the Waitall
            expected[rank, "MPI_Isend", False, peer, 12, mine] += 1
            expected[rank, "MPI_Isend", True, peer, 12, mine] += 1
            expected[rank, "MPI_Irecv", False, peer, 12, 0] += 1
            expected[rank, "MPI_Irecv", True, peer, 12, theirs] += 1
            expected[rank, "MPI_Waitall", False, 2, 2, 0] += 1
            mine, theirs = pickled(rank, 3, k, b"q"), pickled(peer, 3, k, b"q")   # the same, pickled, two waits
            expected[rank, "MPI_Isend", False, peer, 13, mine] += 1
            expected[rank, "MPI_Isend", True, peer, 13, mine] += 1
            expected[rank, "MPI_Irecv", False, peer, 13, 0] += 1
            expected[rank, "MPI_Irecv", True, peer, 13, theirs] += 1
            expected[rank, "MPI_Wait", False, 1, 1, 0] += 2
    got = records(archive)
    assert got == with_barriers(expected), (got - expected, expected - got)
    assert pulled > 0


@pytest.mark.slow
def test_four_threads_receiving_at_once_each_read_their_own_message(tmp_path):
    """A receive that names no Status read what came from one Status of its collector, which
    another thread's receive could fill between the first's return and its reading (seen under
    Open MPI: a few records in ten thousand held another thread's bytes). Rank 1's four threads
    receive rank 0's four threads' messages at once: every receive record holds its own."""
    rounds = 500
    (tmp_path / "go").touch()
    archive = tmp_path / "receives.sqlite"
    result = mpirun("-n", 2, "--archive", archive, "threads.py", "receives", rounds, tmp_path / "go", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    both_ranks_ended(result.stdout)
    expected = Counter()
    for t in range(4):
        for k in range(rounds):
            expected[0, "MPI_Send", False, 1, 10 + t, size(0, t, k)] += 1
            expected[1, "MPI_Recv", False, 0, 10 + t, size(0, t, k)] += 1
    got = records(archive)
    assert got == with_barriers(expected), (got - expected, expected - got)


def test_a_program_below_thread_multiple_runs_as_it_asked_and_is_collected_exactly(tmp_path):
    """A program that asks for MPI_THREAD_FUNNELED gets it (the monitoring asks for nothing more: our
    node server's threads never call MPI, see eventspace.mpi.rank.Rank), and its calls are collected
    exactly."""
    (tmp_path / "go").touch()
    archive = tmp_path / "funneled.sqlite"
    result = mpirun("-n", 2, "--archive", archive, "threads.py", "funneled", ROUNDS, tmp_path / "go", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    both_ranks_ended(result.stdout)
    expected = blocking_pickles(1)
    for rank in (0, 1):
        peer = 1 - rank
        for k in range(ROUNDS):
            expected[rank, "MPI_Send", False, peer, 10, size(rank, 0, k)] += 1
            expected[rank, "MPI_Recv", False, peer, 10, size(peer, 0, k)] += 1
    assert records(archive) == with_barriers(expected)
