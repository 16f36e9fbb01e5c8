"""What an MPI run's nodes host for the run's own ranks (issue #31, item 8): declaring and adopting
communicators. Any client of a node can reach them; only the run's ranks, which share a token
exchanged over MPI at start, are answered. (No rank takes another's records any more: each records its
own into its file, and what a recording answers, RECORD_WINDOW and RECORD_FLUSH, copies or writes
out, never removes.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pastset
from eventspace.archive import Archive
from eventspace.mpi import encoding as e
from eventspace.mpi.rank import ADOPT, DECLARE
from jobs import PROGRAMS, mpirun, ours, requires_mpi, stop, until_live
from runs import memory_kb

pytestmark = requires_mpi


def test_only_the_runs_own_ranks_declare_and_adopt_communicators(tmp_path):
    """Attack: 40 DECLAREs to rank 0 (each took longer than the last: 100 s in all, and 61 MB of rank
    0's memory), a rogue ADOPT on rank 1 alone (the ranks then disagreed on their collectors). Each is
    refused at once; then the program declares its own communicator, and the archive holds it and its
    calls from both ranks."""
    stop_file, archive = tmp_path / "stop", tmp_path / "declares.sqlite"
    job = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "mpirun", "-n", "2", "--name", "declares",
                            "--archive", str(archive), str(PROGRAMS / "declares.py"), str(stop_file)], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        run_file = until_live("declares", job)
        rss = memory_kb(run_file.pids["r0"])["VmRSS"]
        started = time.monotonic()
        with pastset.connect(run_file.endpoints["r0"]) as r0, pastset.connect(run_file.endpoints["r1"]) as r1:
            for i in range(40):
                for forged in ([[0, 1], f"rogue {i}"], ["0" * 32, [0, 1], f"rogue {i}"], [[0] * 100_000, "x" * 10**6]):
                    try:
                        got = r0.call(DECLARE, *forged, timeout=30)
                    except pastset.PastSetError as exc:
                        got = exc
                    assert isinstance(got, pastset.PastSetError), f"DECLARE{forged!r:.80} was answered {got!r}"
            for forged in ([[1, [0, 1], "rogue"]], ["0" * 32, [1, [0, 1], "rogue"]]):
                try:
                    got = r1.call(ADOPT, *forged, timeout=30)
                except pastset.PastSetError as exc:
                    got = exc
                assert isinstance(got, pastset.PastSetError), f"ADOPT{forged!r} was answered {got!r}"
        assert time.monotonic() - started < 30
        assert memory_kb(run_file.pids["r0"])["VmRSS"] - rss < 20_000
        stop_file.touch()
        out, err = job.communicate(timeout=120)
    finally:
        stop(job)
    assert job.returncode == 0, err
    assert sorted(out.split("\n")[:2]) == ["0 total 1", "1 total 1"]
    with Archive.open(archive) as db:
        communicators = json.loads(db.info.extra["communicators"])
        _, calls = db.query("SELECT thread, op FROM events WHERE tree = 'comm1'")
    assert [(c["id"], c["how"]) for c in communicators] == [(0, "COMM_WORLD"), (1, "Dup of comm 0")]
    assert sorted(calls) == [("r0", e.BARRIER), ("r0", e.ALLREDUCE), ("r1", e.BARRIER), ("r1", e.ALLREDUCE)]


def test_a_run_traces_as_many_communicators_as_it_is_told_and_runs_the_rest_untraced(tmp_path):
    """Each communicator declared makes the next one dearer (the run's pathmap grows on every rank):
    past --max-communicators (COMM_WORLD counts) a communicator runs untraced, said once."""
    archive = tmp_path / "communicators.sqlite"
    result = mpirun("-n", 2, "--archive", archive, "--max-communicators", 3, "communicators.py", 5, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    warned = [line for line in ours(result.stderr) if "could not be declared" in line]
    assert len(warned) == 1 and "traces 3 communicators at most (--max-communicators)" in warned[0], result.stderr
    with Archive.open(archive) as db:
        communicators = json.loads(db.info.extra["communicators"])
        _, calls = db.query("SELECT tree, count(*) FROM events WHERE op = ? GROUP BY tree", (e.BARRIER,))
    assert [c["id"] for c in communicators] == [0, 1, 2]
    assert sorted(calls) == [("comm1", 2), ("comm2", 2)]
