"""Intercommunicators, spawned processes and mpi4py.futures under eventspace mpirun: both groups' records,
peers named by the run's ranks."""

from __future__ import annotations

import json
import os
import pickle
import sys
from collections import Counter
from pathlib import Path

import pytest

from eventspace.mpi import encoding as e
from eventspace.scope import EventScope
from jobs import mpirun, ours, requires_mpi, run, start, stop, until_live
from paths import RunError, RunFile
from polling import until
from test_mpi_collect import records

pytestmark = requires_mpi


def test_an_intercommunicators_calls_are_recorded_in_both_groups_with_world_ranks(tmp_path):
    archive = tmp_path / "intercomm.sqlite"
    result = mpirun("-n", 4, "--archive", archive, "intercomm.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows, trees, info = records(archive)
    assert info.discarded == 0
    communicators = {f"comm{c['id']}": c for c in json.loads(info.extra["communicators"])}
    (inter,) = [c for c, made in communicators.items() if made["how"].startswith("Create_intercomm")]
    # Its members: both groups, the one holding world rank 0 first, each in its own rank order.
    assert communicators[inter]["members"] == [0, 2, 1, 3]
    assert communicators[inter]["how"].endswith("intercommunicator: groups of 2 and 2")
    assert trees[inter] == {"r0", "r1", "r2", "r3"}
    (merged,) = [c for c, made in communicators.items() if made["how"].startswith("Merge")]
    assert communicators[merged]["members"] == [0, 2, 1, 3]

    def on(comm, thread):
        return [(e.NAMES[r["op"]], r["flags"], r["element"], r["arg"], r["nbytes"]) for r in rows
                if r["thread"] == thread and comm in (r["element_name"], r["tree"])]

    back = {r: len(pickle.dumps({"from": r}, 5)) for r in range(4)}
    none = e.PEER_NONE
    # Point-to-point: peers are the partners' world ranks; the Recv from any source resolved.
    assert on(inter, "r0")[:2] == [("MPI_Send", 0, 1, 3, 100), ("MPI_Recv", e.PICKLED, 1, 4, back[1])]
    assert on(inter, "r2")[:2] == [("MPI_Send", 0, 3, 3, 200), ("MPI_Recv", e.PICKLED, 3, 4, back[3])]
    assert on(inter, "r1")[:2] == [("MPI_Recv", e.ANY_SOURCE, 0, 3, 100), ("MPI_Send", e.PICKLED, 0, 4, back[1])]
    assert on(inter, "r3")[:2] == [("MPI_Recv", e.ANY_SOURCE, 2, 3, 200), ("MPI_Send", e.PICKLED, 2, 4, back[3])]
    # Collectives: rounds counted alike in both groups; the Bcast's root is world rank 0 for itself
    # (MPI.ROOT) and for the other group, nobody for its own group's others (MPI.PROC_NULL).
    bcast_root = {"r0": 0, "r2": none, "r1": 0, "r3": 0}
    for thread in ("r0", "r1", "r2", "r3"):
        assert on(inter, thread)[2:] == [("MPI_Bcast", 0, bcast_root[thread], 0, 1000 if thread == "r0" else 0),
                                         ("MPI_Allreduce", 0, none, 1, 8), ("MPI_Barrier", 0, none, 2, 0)]
        (allreduce,) = on(merged, thread)
        assert allreduce[:4] == ("MPI_Allreduce", e.PICKLED, none, 0)
    assert Counter(r["thread"] for r in rows if inter in (r["element_name"], r["tree"])) == \
        {"r0": 5, "r1": 5, "r2": 5, "r3": 5}


@pytest.mark.slow
def test_a_futures_pool_under_mpi4py_futures_is_traced_task_by_task(tmp_path):
    """`eventspace mpirun -n 4 -m mpi4py.futures prog.py`: rank 0 runs the program, ranks 1-3 serve
    its pool over an intercommunicator; every task and result is a message of the matrix, and each
    one's bytes are the same at both ends."""
    archive = tmp_path / "pool.sqlite"
    result = mpirun("-n", 4, "--archive", archive, "-m", "mpi4py.futures", "pool.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[0]) == [x * x for x in range(12)]
    _pool_traffic(archive, tmp_path, workers=(1, 2, 3))


def _pool_traffic(archive, cwd, workers: tuple) -> None:
    """The matrix of a pool's run (master r0) is its twelve tasks out and their results back."""
    shown = run([sys.executable, "-m", "eventspace.cli", "archive", "matrix", archive, "--json"], cwd)
    assert shown.returncode == 0, shown.stderr
    matrix = json.loads(shown.stdout)
    messages, sent = matrix["messages"], matrix["bytes"]
    # Twelve tasks and a stop per worker from the master; twelve results back; nothing between workers.
    assert sum(messages[0][w] for w in workers) == 12 + len(workers)
    assert sum(messages[w][0] for w in workers) == 12
    assert all(messages[a][b] == 0 for a in workers for b in workers)
    for w in workers:
        assert messages[w][0] == messages[0][w] - 1   # each worker's results: its tasks (its stop has none)
    rows, _, info = records(archive)
    assert info.discarded == 0
    received = Counter()
    for row in rows:
        if row["op"] == e.RECV:
            received[row["element"], int(row["thread"][1:])] += row["nbytes"]
    ranks = range(len(messages))
    assert [[sent[a][b] for b in ranks] for a in ranks] == [[received[a, b] for b in ranks] for a in ranks]


@pytest.mark.slow
def test_a_spawned_childs_calls_are_recorded_on_both_sides_of_its_intercommunicator(tmp_path):
    """Two ranks spawn two children: the children are the run's ranks r2 and r3, and the Spawn's
    intercommunicator is collected at both ends, peers named by those ranks."""
    archive = tmp_path / "spawner.sqlite"
    result = mpirun("-n", 2, "--archive", archive, "spawner.py", "-", "spawn", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "eventspace.mpi: run spawner: r2, r3 joined, spawned by r0" in ours(result.stderr)
    # Nothing silent, children included: the parents' two Disconnects and the children's two.
    assert "eventspace.mpi: not traced: 4 calls of MPI_Comm_disconnect" in ours(result.stderr), result.stderr
    rows, trees, info = records(archive)
    assert info.discarded == 0 and info.tuples == len(rows)
    assert set(json.loads(info.extra["hosts"])) == {"r0", "r1", "r2", "r3"}
    communicators = {f"comm{c['id']}": (c["members"], c["how"]) for c in json.loads(info.extra["communicators"])}
    assert sorted(communicators.values()) == [
        ([0, 1], "COMM_WORLD"),
        ([0, 1, 2, 3], "Spawn of comm 0, intercommunicator: groups of 2 and 2"),
        ([2, 3], "COMM_WORLD of the processes r0 spawned")]
    (inter,) = [c for c, (_, how) in communicators.items() if how.startswith("Spawn")]
    (children,) = [c for c, (_, how) in communicators.items() if how.startswith("COMM_WORLD of")]
    assert trees[inter] == {"r0", "r1", "r2", "r3"} and trees[children] == {"r2", "r3"}

    def on(comm, thread):
        return [(e.NAMES[r["op"]], r["flags"], r["element"], r["arg"], r["nbytes"]) for r in rows
                if r["thread"] == thread and comm in (r["element_name"], r["tree"])]

    answer = {i: len(pickle.dumps({"child": i}, 5)) for i in (0, 1)}
    none, pickled = e.PEER_NONE, e.PICKLED
    collectives = [("MPI_Barrier", 0, none, 1, 0)]
    assert on(inter, "r0") == [("MPI_Send", 0, 3, 5, 300), ("MPI_Recv", pickled, 2, 6, answer[0]),
                               ("MPI_Bcast", 0, 0, 0, 800), *collectives]
    assert on(inter, "r1") == [("MPI_Recv", pickled, 3, 6, answer[1]), ("MPI_Bcast", 0, none, 0, 0), *collectives]
    assert on(inter, "r2") == [("MPI_Send", pickled, 0, 6, answer[0]), ("MPI_Bcast", 0, 0, 0, 0), *collectives]
    assert on(inter, "r3") == [("MPI_Recv", 0, 0, 5, 300), ("MPI_Send", pickled, 1, 6, answer[1]),
                               ("MPI_Bcast", 0, 0, 0, 0), *collectives]
    for child in ("r2", "r3"):
        assert on(children, child) == [("MPI_Barrier", 0, none, 0, 0)]
    assert {r["thread"] for r in rows} == {"r0", "r1", "r2", "r3"}


@pytest.mark.slow
def test_monitors_attached_before_a_spawn_see_its_children_join(tmp_path):
    """A stream scope made before the Spawn (here Spawn_multiple: two commands) follows the run to the
    children's records, and `eventspace space ls` lists their collectors."""
    gate = tmp_path / "go"
    job = start(tmp_path, 2, "spawnlive", "spawner.py", gate, "multiple")
    try:
        run_file = until_live("spawnlive", job)
        with EventScope(run_file, "all", mode="stream") as scope:
            seen = Counter()

            def children_seen() -> Counter:
                seen.update(scope.catalogue[int(r["collector"])].thread for r in scope.pull().records)
                return seen

            gate.touch()
            # r2: a send, a Bcast, a Barrier on the intercommunicator and one on its world; r3 a receive more.
            until(children_seen, 60, "the children's records", holds=lambda s: s["r2"] >= 4 and s["r3"] >= 5)
        listed = run([sys.executable, "-m", "eventspace.cli", "space", "ls", "spawnlive", "--view",
                      "thread:r2 | thread:r3"], tmp_path)
        assert listed.returncode == 0, listed.stderr
        table = listed.stdout.replace("┃", "│")   # rich's heavy header rule, then its rows
        cells = [[cell.strip() for cell in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│")]
        threads = [row[cells[0].index("thread")] for row in cells[1:]]
        # Each child: its collectors on the intercommunicator and on its COMM_WORLD (point-to-point, collectives).
        assert sorted(threads) == ["r2"] * 4 + ["r3"] * 4
        Path(f"{gate}.done").touch()
        out, err = job.communicate(timeout=120)
        assert job.returncode == 0, err
    finally:
        stop(job)


@pytest.mark.slow
def test_a_spawned_child_that_crashes_is_named_and_the_run_ends_as_mpi_ends_it(tmp_path):
    result = mpirun("-n", 2, "spawner.py", "-", "spawn", "crash", cwd=tmp_path)
    assert result.returncode != 0
    assert any(line.startswith("eventspace.mpi: rank 3 (spawned by r0) raised ZeroDivisionError: child 1 divides "
                               "by zero") for line in ours(result.stderr)), result.stderr
    with pytest.raises(RunError):
        RunFile.find("spawner")


@pytest.mark.slow
def test_an_mpipoolexecutor_that_spawns_its_workers_is_traced_task_by_task(tmp_path):
    """`python pool.py` (no -m mpi4py.futures): the executor spawns two workers, which join the run
    as r1 and r2; every task and result is a message of the matrix."""
    archive = tmp_path / "pool.sqlite"
    result = mpirun("-n", 1, "--archive", archive, "pool.py", cwd=tmp_path,
                    env={**os.environ, "MPI4PY_FUTURES_MAX_WORKERS": "2"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[0]) == [x * x for x in range(12)]
    _pool_traffic(archive, tmp_path, workers=(1, 2))


@pytest.mark.slow
def test_the_archive_of_a_run_whose_spawned_child_crashed_has_the_children(tmp_path):
    """eventspace mpirun builds the archive from the ranks' recordings when MPI's abort ended the job:
    its catalogue, made from their notes, has the spawned ranks, and their records are in it."""
    archive = tmp_path / "crashed.sqlite"
    result = mpirun("-n", 2, "--archive", archive, "spawner.py", "-", "spawn", "crash", cwd=tmp_path)
    assert result.returncode != 0
    assert any(line.startswith(f"eventspace mpirun: archive {archive}: ") for line in result.stderr.splitlines()), \
        result.stderr
    rows, trees, _ = records(archive)
    assert {"r2", "r3"} <= {thread for members in trees.values() for thread in members}
    # Child 0 (r2) answered parent 0 before child 1's abort: its send is in the archive. (r0's receive
    # may not be: Open MPI's abort kills r0 at once, before its last records reach its file.)
    answer = len(pickle.dumps({"child": 0}, 5))
    sends = [(r["thread"], r["op"], r["element"], r["nbytes"]) for r in rows if r["arg"] == 6]
    assert ("r2", e.SEND, 0, answer) in sends


def test_a_spawned_program_that_cannot_join_runs_unmonitored_and_says_so_once(tmp_path):
    result = mpirun("-n", 1, "spawn_c.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["7", "7"]
    said = [line for line in ours(result.stderr) if "run unmonitored" in line]
    assert len(said) == 1 and said[0].startswith(f"eventspace.mpi: rank 0: the processes of its Spawn run "
                                                 f"unmonitored: only `{sys.executable} [flags] prog.py`"), said
    assert not any("joined" in line for line in ours(result.stderr))
