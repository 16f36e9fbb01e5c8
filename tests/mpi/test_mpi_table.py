"""A rank's collector table as its run grows: communicators declared while the run goes on get slots
that switch, and in-flight calls of MPI and PATHS collectors read from the one table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eventspace import compiled
from eventspace.catalogue import Catalogue
from eventspace.mpi import encoding as e
from eventspace.scope import EventScope
from eventspace.table import PAGE
from eventspace.view import View, ViewError
from jobs import requires_mpi, run, start, stop, until_live
from polling import until

pytestmark = requires_mpi
DECLARED = 18   # Dups of COMM_WORLD on 2 ranks: the last one's collectors lie past the first page


def environment(implementation: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE}
    return {**env, compiled.PURE: "1"} if implementation == "pure" else env


@pytest.mark.parametrize("implementation", ["compiled", "pure"])
def test_a_communicator_declared_while_the_run_goes_on_switches_off_and_on(tmp_path, implementation):
    """Issue 34: a communicator the program makes after the run started joins each node's collector
    table on a page the table grew by (its collectors' ids are past the first page), and `eventspace
    space switch` turns its collectors off (its calls are not recorded) and on again (they are)."""
    name = f"switched-{implementation}"
    job = start(tmp_path, 2, name, "switched.py", tmp_path, DECLARED, 3, env=environment(implementation))
    try:
        run_file = until_live(name, job, 90)
        until(lambda: (tmp_path / "declared").exists() or job.poll() is not None, 120, "the communicators declared")
        view = f"element:comm{DECLARED} | tree:comm{DECLARED}"
        until_in_snapshot(run_file, view)

        def phase(k: int) -> list[int]:
            """Run phase k; the collectors of the records it wrote on the declared communicator."""
            return sorted(int(c) for c in run_phase(tmp_path, job, scope, k)["collector"])

        with EventScope(run_file, view, mode="stream") as scope:
            ids = sorted(entry.id for entry in scope.entries)
            assert len(ids) == 4 and ids[0] >= PAGE, ids
            scope.pull()
            on, off, again = on_off_on(tmp_path, name, view, phase)
        (tmp_path / "end").touch()
        # Barriers on both ranks' collective collectors, Sends on rank 0's and Recvs on rank 1's point-to-point ones
        assert on == again == sorted(ids * 5) and off == [], f"{on} {off} {again} {ids}"
        out, err = job.communicate(timeout=60)
        assert job.returncode == 0, err
    finally:
        stop(job)


def until_in_snapshot(run_file, view: str) -> None:
    """Until `view` selects collectors of the run's pathmap snapshot, which monitors read: it is written
    off the path of the declare that adds a communicator, soon after."""
    until(lambda: View.parse(view).select(Catalogue(run_file.pathmap())), 60, f"{view} in the run's pathmap snapshot",
          ignoring=ViewError)


def run_phase(tmp_path, job, scope, k: int):
    """Start phase k of the job's program (the file goK), wait for its end (doneK), and pull what it wrote."""
    (tmp_path / f"go{k}").touch()
    until(lambda: (tmp_path / f"done{k}").exists() or job.poll() is not None, 120, f"phase {k} done")
    assert job.poll() is None, job.communicate()
    return scope.pull().records


def on_off_on(tmp_path, name: str, view: str, phase) -> tuple:
    """phase(0) with the collectors of `view` on, phase(1) with them switched off, phase(2) on again."""
    first = phase(0)
    switch(tmp_path, name, view, "off")
    second = phase(1)
    switch(tmp_path, name, view, "on")
    return first, second, phase(2)


def switch(tmp_path, name: str, view: str, how: str) -> None:
    """`eventspace space switch HOW --run NAME --view VIEW`: the 4 collectors of a communicator on 2 ranks."""
    done = run([sys.executable, "-m", "eventspace.cli", "space", "switch", how, "--run", name, "--view", view],
               tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"switched {how} 4 collectors on 2 nodes" in done.stdout, done.stdout


@pytest.mark.parametrize("implementation", ["compiled", "pure"])
def test_a_persistent_request_completed_while_its_collector_was_off_writes_nothing_later(tmp_path, implementation):
    """A persistent request started while its collector was on and completed while it was off kept
    its post: a Wait on it once inactive, after the collector was switched on again, wrote a request
    record for a message already recorded as gone. Now each rank's records after switching on are
    those of its next Start and Wait alone: the post, the request's record and the Wait's."""
    name = f"persistent-{implementation}"
    job = start(tmp_path, 2, name, "switched_persistent.py", tmp_path, env=environment(implementation))
    try:
        run_file = until_live(name, job, 90)
        view = "element:comm1 | tree:comm1"
        until_in_snapshot(run_file, view)
        with EventScope(run_file, view, mode="stream") as scope:
            catalogue = Catalogue(run_file.pathmap())
            scope.pull()

            def phase(k: int) -> list[tuple]:
                """Run phase k: (rank, op name, a request's record?) of each record it wrote on comm1, sorted."""
                return sorted((int(catalogue[int(r["collector"])].thread[1:]), e.NAMES[int(r["op"])],
                               bool(int(r["flags"]) & e.REQUEST)) for r in run_phase(tmp_path, job, scope, k))

            started, completed_off, after = on_off_on(tmp_path, name, view, phase)
        (tmp_path / "end").touch()
        out, err = job.communicate(timeout=60)
        assert job.returncode == 0, err
    finally:
        stop(job)
    assert started == [(0, "MPI_Send_init", False), (1, "MPI_Recv_init", False)], started
    assert completed_off == []
    assert after == sorted([(0, "MPI_Send_init", False), (0, "MPI_Send_init", True), (0, "MPI_Wait", False),
                            (1, "MPI_Recv_init", False), (1, "MPI_Recv_init", True), (1, "MPI_Wait", False)]), after


@pytest.mark.parametrize("implementation", ["compiled", "pure"])
def test_in_flight_reads_an_mpi_call_and_a_paths_operation_from_the_one_table(implementation):
    """Issue 34: a Recv blocked on a communicator declared after the node started (its slot on a page
    the table grew by) and an observe blocked in a PATHS collector of the same node are both in the
    node's in_flight(), each with its start, the Recv with its mark (what it waits for); once they
    return, nothing is."""
    done = subprocess.run([sys.executable, "one_table.py"], cwd=Path(__file__).parent, capture_output=True, text=True,
                          timeout=300, env=environment(implementation), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["implementation"] == implementation
    first, now = got["pages"]
    assert got["mpi"] >= first * PAGE and now > first
    rows = {row[0]: row for row in got["waiting"]}
    assert set(rows) == {got["mpi"], got["paths"]}
    assert len(rows[got["paths"]]) == 2 and rows[got["paths"]][1] > 0                 # [id, start]
    _, t0, op, flags, peer, tag, nbytes = rows[got["mpi"]]                              # [id, start, *mark]
    assert t0 > 0 and (op, flags, peer, tag, nbytes) == (got["recv"], 0, 0, 5, 0)
    assert got["after"] == [] and got["done"] == {"recv": "None", "observe": "(0, (7,))"}
