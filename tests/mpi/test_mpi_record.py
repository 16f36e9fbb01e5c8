"""Recording an MPI run: each rank into a file of its own while it runs, an archive built from the files
however the run ends, and a flight recorder's window dumped on demand, at a crash, at a deadlock."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time

import pytest

from eventspace.archive import Archive
from jobs import MPIEXEC, PROGRAMS, mpirun, ours, requires_mpi, still_running, stop, until_live
from paths.mpiexec import OPEN_MPI, family_of
from paths.runfile import run_dir
from polling import until

pytestmark = [requires_mpi, pytest.mark.slow]


def _start(tmp_path, name: str, *args) -> subprocess.Popen:
    """`eventspace mpirun -n 2 --name NAME ARGS` (program paths given whole), left running."""
    return subprocess.Popen([sys.executable, "-m", "eventspace.cli", "mpirun", "-n", "2", "--name", name,
                             *map(str, args)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


ENDINGS = {   # how the test ends the run, and what the archive must say of it
    "sigint": "Ctrl-C (SIGINT)", "sigterm": "SIGTERM", "raise": "rank 1 raised RuntimeError: rank 1 gives up",
    "abort": "rank 1 called MPI_Abort (error code 3)", "kill-9": "ranks did not close their recording",
}


@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.timeout(240)
def test_every_ending_leaves_a_readable_archive_of_what_reached_the_disk(tmp_path, ending):
    name, archive = f"recorded-{ending}", tmp_path / "run.sqlite"
    mode = ending if ending in ("raise", "abort") else "none"
    job = _start(tmp_path, name, "--archive", archive, PROGRAMS / "recorded.py", tmp_path / "go",
                 tmp_path / "running", mode)
    try:
        run_file = until_live(name, job)
        until(lambda: still_running(job) and (tmp_path / "running").exists(), 120, "the program running")
        if ending == "sigint":
            os.killpg(job.pid, signal.SIGINT)          # the terminal's Ctrl-C reaches the whole job
        elif ending == "sigterm":
            job.send_signal(signal.SIGTERM)            # what `timeout` or Slurm sends eventspace mpirun
        elif ending == "kill-9":   # once r1's recorder has written blocks (it writes every second)
            (directory,) = run_dir().glob(f"{name}.recording*")
            until(lambda: still_running(job) and (directory / "r1.rec").stat().st_size > 4096, 120,
                  "r1's recording growing past 4096 bytes", ignoring=FileNotFoundError)
            os.kill(run_file.pids["r1"], signal.SIGKILL)
        else:
            (tmp_path / "go").touch()
        out, err = job.communicate(timeout=120)
    finally:
        stop(job)
    assert job.returncode != 0, err
    with Archive.open(archive) as db:
        records, info = db.records(), db.info
    accounts = json.loads(info.extra["recording"])
    on_disk = sum(a["read"] - a["left_out"] for a in accounts.values())
    assert len(records) == info.tuples == on_disk > 20_000, (accounts, err)
    ended = info.extra["ended"]
    if ending == "sigint" and family_of(str(MPIEXEC)) == OPEN_MPI:
        # Open MPI's launcher takes the terminal's Ctrl-C for the ranks, and ends them with SIGTERM
        assert "after Ctrl-C" in ended and "SIGTERM" in ended, ended
    else:
        assert ENDINGS[ending] in ended, ended
    closed = {node: a for node, a in accounts.items() if a["made"] is not None}
    assert all(a["written"] == a["read"] and a["made"] == a["written"] + a["discarded"] for a in closed.values())
    if ending in ("sigint", "sigterm", "raise", "abort"):
        # The rank that ended the run first closed its recording and had the others write theirs out before
        # MPI's abort ended them: nothing it made was lost.
        assert closed and all(a["discarded"] == 0 for a in closed.values()), accounts
    # (in the line, not at its start: Open MPI's abort notice ends without one, and with a NUL)
    built = [line for line in err.splitlines() if "eventspace mpirun: archive" in line]
    assert len(built) == 1 and f"{info.tuples:,} events from 2 ranks" in built[0], err
    assert not list(run_dir().glob(f"{name}*")), "the run's files and its recording stay"


@pytest.mark.timeout(240)
def test_the_flight_recorder_keeps_the_last_window_and_dumps_it_on_demand(tmp_path):
    name = "flight"
    job = _start(tmp_path, name, "--record", "last:1s", PROGRAMS / "recorded.py", tmp_path / "go",
                 tmp_path / "running", "end")
    try:
        until_live(name, job)
        until(lambda: still_running(job) and (tmp_path / "running").exists(), 120, "the program running")
        time.sleep(1.5)   # more than the window's worth of events
        dumped = subprocess.run([sys.executable, "-m", "eventspace.cli", "dump", "--run", name, "-o",
                                 tmp_path / "now.sqlite"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        (tmp_path / "go").touch()
        out, err = job.communicate(timeout=120)
    finally:
        stop(job)
    assert dumped.returncode == 0, dumped.stderr
    assert job.returncode == 0, err
    with Archive.open(tmp_path / "now.sqlite") as db:
        records = db.records()
        threads = {t for (t,) in db.query("SELECT DISTINCT thread FROM events")[1]}
    assert threads == {"r0", "r1"} and len(records) > 1000
    newest = int(records["t_end"].max())
    assert int(records["t_end"].min()) >= newest - 1_000_000_000, "the dump holds events older than its window"
    assert dumped.stdout.startswith(f"dumped run {name}'s recording to {tmp_path / 'now.sqlite'}: "), dumped.stdout
    assert not list(tmp_path.glob("flight.dump-*")), "a run that ends normally dumps nothing"


@pytest.mark.timeout(240)
def test_a_flight_recorder_is_dumped_when_a_rank_raises(tmp_path):
    job = _start(tmp_path, "crash", "--record", "last:30s", PROGRAMS / "recorded.py", tmp_path / "go",
                 tmp_path / "running", "raise")
    try:
        until_live("crash", job)
        until(lambda: still_running(job) and (tmp_path / "running").exists(), 120, "the program running")
        (tmp_path / "go").touch()
        out, err = job.communicate(timeout=120)
    finally:
        stop(job)
    said = [line for line in ours(err) if "flight recorder" in line]
    (dump,) = tmp_path.glob("crash.dump-*.sqlite")
    assert said and said[0].startswith(f"eventspace.mpi: flight recorder (last:30s) dumped to {dump.name}: "), err
    assert "(rank 1 raised RuntimeError: rank 1 gives up" in said[0]
    with Archive.open(dump) as db:
        _, rows = db.query("SELECT thread, count(*) FROM events GROUP BY thread ORDER BY thread")
        ended = db.info.extra["ended"]
    assert [t for t, _ in rows] == ["r0", "r1"] and all(n > 20_000 for _, n in rows), rows
    assert ended.startswith("rank 1 raised RuntimeError")


@pytest.mark.timeout(240)
def test_a_deadlock_the_heartbeat_finds_dumps_the_flight_recorder(tmp_path):
    job = _start(tmp_path, "stuck", "--record", "last:30s", PROGRAMS / "waits.py", "p2p")
    try:
        until_live("stuck", job)
        beat = subprocess.run([sys.executable, "-m", "eventspace.cli", "monitor", "heartbeat", "--run", "stuck",
                               "--interval", "0.5", "--duration", "4"], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
    finally:
        stop(job)
    assert beat.returncode == 0, beat.stderr
    (dump,) = tmp_path.glob("stuck.dump-*.sqlite")
    assert f"deadlock: flight recorder dumped to {dump.name}: " in beat.stdout + beat.stderr, beat.stdout + beat.stderr
    with Archive.open(dump) as db:
        assert db.info.extra["ended"].startswith("deadlock: r0 waits Recv from r1")
        assert len(db.records()) > 0


@pytest.mark.timeout(240)
def test_under_another_launcher_an_aborted_runs_recording_stays_and_builds_by_hand(tmp_path):
    """Without eventspace mpirun to outlive the job, an abort leaves the ranks' files in the run directory
    (named in one line), and `eventspace archive build` makes the archive from them alone."""
    from jobs import MPIEXEC

    go, running = tmp_path / "go", tmp_path / "running"
    job = subprocess.Popen([str(MPIEXEC), "-n", "2", sys.executable, "-m", "eventspace.mpi", "--name", "elsewhere",
                            "--archive", str(tmp_path / "run.sqlite"), str(PROGRAMS / "recorded.py"), str(go),
                            str(running), "raise"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        until(lambda: still_running(job) and running.exists(), 120, "the program running")
        go.touch()
        out, err = job.communicate(timeout=120)
    finally:
        stop(job)
    assert job.returncode != 0 and not (tmp_path / "run.sqlite").exists()
    (directory,) = run_dir().glob("elsewhere.recording*")
    assert f"eventspace.mpi: the recording stays in {directory} (`eventspace archive build {directory} " in err, err
    built = subprocess.run([sys.executable, "-m", "eventspace.cli", "archive", "build", directory,
                            tmp_path / "run.sqlite"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert built.stdout.startswith(f"archive {tmp_path / 'run.sqlite'}: ") and " from 2 nodes" in built.stdout
    with Archive.open(tmp_path / "run.sqlite") as db:
        assert db.info.extra["ended"].startswith("rank 1 raised RuntimeError: rank 1 gives up")
        assert len(db.records()) == db.info.tuples > 20_000
    assert not directory.exists()


@pytest.mark.timeout(240)
def test_a_full_disk_stops_one_ranks_recording_with_one_line_and_every_count_reconciles(tmp_path):
    """Rank 1 may write files of 192 KiB at most (RLIMIT_FSIZE, as a full disk would refuse it: EFBIG for
    ENOSPC; a million events take more, however well they compress): its recording stops with one line
    naming its file and what it wrote, the run goes on to its end, and the archive holds what both ranks
    wrote, the rest counted as discarded."""
    archive = tmp_path / "run.sqlite"
    result = mpirun("-n", 2, "--name", "full", "--archive", archive, "disk_full.py", 1_000_000, cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr
    stopped = [line for line in ours(result.stderr) if line.startswith("eventspace.mpi: recording stopped")]
    assert len(stopped) == 1 and re.fullmatch(
        r"eventspace\.mpi: recording stopped: \S+/full\.recording/r1\.rec: File too large; [\d,]+ events written",
        stopped[0]), result.stderr
    written = int(stopped[0].rsplit("; ", 1)[1].split()[0].replace(",", ""))
    with Archive.open(archive) as db:
        info, accounts = db.info, json.loads(db.info.extra["recording"])
        _, rows = db.query("SELECT thread, count(*) FROM events GROUP BY thread ORDER BY thread")
    assert dict(rows) == {"r0": 1_000_000, "r1": written} and 0 < written < 1_000_000
    assert accounts["r1"]["made"] == 1_000_000 and accounts["r1"]["discarded"] == 1_000_000 - written
    assert accounts["r1"]["stopped"] == "File too large" and info.discarded == 1_000_000 - written
    assert f"r1: made 1,000,000, written {written:,}, discarded {1_000_000 - written:,} (its recording stopped: " \
           "File too large)" in result.stderr
