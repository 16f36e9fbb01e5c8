"""Monitors on a live MPI run: the catalogue, a scope, switching collectors, getevent, in-flight marks, faults."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from eventspace.mpi import encoding as e
from eventspace.scope import EventScope
from jobs import PROGRAMS, mpirun, ours, requires_mpi, run, until_live
from paths.runfile import run_dir
from polling import until

pytestmark = requires_mpi


def start(tmp_path, ranks, *args):
    return subprocess.Popen([sys.executable, "-m", "eventspace.cli", "mpirun", "-n", str(ranks),
                             str(PROGRAMS / "live.py"), *map(str, args)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def eventspace(*args, cwd):
    return run([sys.executable, "-m", "eventspace.cli", *map(str, args)], cwd, timeout=60)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """One live run for the tests of this module (the last of them ends it)."""
    tmp_path = tmp_path_factory.mktemp("live")
    stop, release = tmp_path / "stop", tmp_path / "release"
    process = start(tmp_path, 2, stop, release)
    yield tmp_path, process, stop, release
    stop.touch()
    release.touch()
    try:
        process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


def test_a_second_run_of_the_same_name_gets_another_that_it_prints(job):
    tmp_path, process, stop, release = job
    until_live("live", process, 90)
    for args in (["--name", "live", "output.py"], [tmp_path / "other" / "live.py"]):
        (tmp_path / "other").mkdir(exist_ok=True)
        (tmp_path / "other" / "live.py").write_text("from mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\n")
        second = mpirun("-n", 2, *args, cwd=tmp_path)
        assert second.returncode == 0, second.stderr
        assert f"run live-2: 2 ranks on 1 host; run file {run_dir() / 'live-2.json'}" in second.stderr
        assert not (run_dir() / "live-2.json").exists()


def test_monitors_work_on_a_live_mpi_run(job):
    tmp_path, process, stop, release = job
    run_file = until_live("live", process, 90)
    assert set(run_file.endpoints) == {"r0", "r1"}

    listing = eventspace("space", "ls", "live", "--view", "thread:r1", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "collectors of live: 2 of 4" in listing.stdout and "comm0" in listing.stdout

    # A scope pulls rank 1's records as they come.
    with EventScope(run_file, "thread:r1", mode="stream") as scope:
        got = until(lambda: [r for r in scope.pull().records if r["op"] == e.SENDRECV_RECV], 20)
        assert all(scope.catalogue[int(r["collector"])].thread == "r1" for r in got)
        assert {int(r["element"]) for r in got} == {0} and {int(r["arg"]) for r in got} == {3}

    # Switched off on r0, its collectors stop writing; r1's go on.
    switched = eventspace("space", "switch", "off", "--run", "live", "--view", "node:r0", cwd=tmp_path)
    assert switched.returncode == 0, switched.stderr
    with EventScope(run_file, "all", mode="stream") as scope:
        scope.pull()
        time.sleep(0.5)   # a window in which r0, switched off, must write nothing while r1 writes on
        by_thread = {scope.catalogue[int(c)].thread for c in scope.pull().records["collector"]}
    assert by_thread == {"r1"}

    exported = eventspace("monitor", "getevent", "--run", "live", "--out", tmp_path / "t.json", "--duration", "1",
                          cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    slices = [ev for ev in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if ev.get("ph") == "X"]
    assert slices and {ev["name"] for ev in slices} <= set(e.NAMES.values()), (exported.stdout, exported.stderr, json.loads((tmp_path / "t.json").read_text())["traceEvents"][:5])

    # Once the loop stops, rank 1 blocks in recv(source=0, tag=7): its in-flight mark says so.
    stop.touch()
    with EventScope(run_file, "thread:r1", mode="latest") as scope:
        marks = until(lambda: [m for m in scope.in_flight_marks()[0].values() if m.op == e.RECV], 20)
    mark = marks[0]
    assert (mark.element, mark.arg, mark.flags) == (0, 7, e.PICKLED)
    assert e.describe(mark.op, mark.flags, mark.element, mark.arg, 0) == "MPI_Recv from r0 tag 7 on comm 0"
    release.touch()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert not (run_dir() / "live.json").exists()


@pytest.mark.slow
def test_a_rank_killed_ends_the_job_as_mpi_ends_it(tmp_path):
    process = start(tmp_path, 3, tmp_path / "stop")
    try:
        run_file = until_live("live", process, 90)
        os.kill(run_file.pids["r1"], signal.SIGKILL)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode != 0
    until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in run_file.pids.values()), 30, "every rank ended")
    for pid in run_file.pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
