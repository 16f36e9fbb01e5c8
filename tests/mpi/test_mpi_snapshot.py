"""An MPI run's pathmap snapshot (issue 34): rank 0 writes it off the path of a communicator's
declare, at a cost that grows with what the run gained, and the monitors attached see every
communicator the program made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eventspace.mpi.generate import Communicator, add_communicator, run_pathmap
from eventspace.mpi.registry import Registration
from eventspace.scope import EventScope
from jobs import PROGRAMS, requires_mpi, stop, until_live
from paths import Pathmap, RunFile
from polling import until


def entries(pathmap: Pathmap) -> int:
    """The entries of the pathmap's named and listed sections: what its YAML lays out one by one."""
    return (len(pathmap.nodes) + len(pathmap.threads) + len(pathmap.elements) + len(pathmap.stages)
            + len(pathmap.paths) + len(pathmap.trees) + len(pathmap.instrument.collectors))


def test_a_run_that_declares_many_communicators_lays_each_entry_of_its_snapshot_out_once():
    """Rank 0 rewrote the whole snapshot, as YAML, inside every declare: O(communicators x pathmap),
    5 s a communicator at 200 communicators of 64 ranks. Now each entry is laid out once over the
    run (declares that come while a write is under way all go into the next one), and the snapshot
    on disk, once flushed, is the newest pathmap, whole."""
    ranks, count = 8, 40
    comms = [Communicator(0, tuple(range(ranks)), "COMM_WORLD")]
    pathmap = run_pathmap("snapshot-growth", ["h"] * ranks, {"h": "default"}, comms)
    registration = Registration("snapshot-growth")
    try:
        registration.ready(pathmap, comms, {f"r{r}": f"tcp://127.0.0.1:{7000 + r}" for r in range(ranks)},
                           {f"r{r}": 1 for r in range(ranks)})
        for cid in range(1, count + 1):
            comm = Communicator(cid, tuple(range(ranks))[::-1] if cid % 2 else tuple(range(0, ranks, 2)),
                                f"Split of comm {cid - 1}")
            pathmap, comms = add_communicator(pathmap, comm).pathmap, [*comms, comm]
            registration.update(pathmap, comms)
        assert registration.flush(timeout=60)
        text = Path(registration.run_file.pathmap_file).read_text()
        assert registration.problem is None
    finally:
        registration.remove()
    assert text.endswith(pathmap.dumps()) and Pathmap.loads(text) == pathmap
    assert f"#   comm{count}: Split of comm {count - 1}, members {list(comms[-1].members)}" in text.splitlines()
    assert 1 <= registration.writes <= count + 1
    assert registration.laid_out == entries(pathmap)   # each entry once: linear in the communicators
    assert not Path(registration.run_file.pathmap_file).exists() and not Path(registration.path).exists()


@requires_mpi
@pytest.mark.slow
def test_monitors_see_the_last_of_many_communicators_a_program_makes(tmp_path):
    """A scope attached while the program makes communicators follows the run to the last one (its
    records included), and one attached afterwards sees them all at once."""
    count, made, done = 60, tmp_path / "made", tmp_path / "done"
    job = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "mpirun", "-n", "3", "--name", "many",
                            str(PROGRAMS / "many.py"), str(count), str(made), str(done)], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        run_file = until_live("many", job, 90)
        with EventScope(run_file, "all", mode="stream") as early:
            last = []   # records of collectors on communicator `count` (its tree's contribute points)

            def last_ones() -> list:
                last.extend(r for r in early.pull().records if early.catalogue[int(r["collector"])].element_id == count)
                return last
            # The last communicator's allreduce, on every rank: its collectors were followed.
            until(last_ones, 120, f"the records of communicator {count}", holds=lambda records: len(records) >= 3)
            assert sorted(early.catalogue[int(r["collector"])].thread for r in last) == ["r0", "r1", "r2"]
        until(made.exists, 60)
        with EventScope(RunFile.find("many"), f"tree:comm{count}", mode="backlog") as late:
            assert {late.catalogue[e.id].thread for e in late.entries} == {"r0", "r1", "r2"}
            assert len(late.pull().records) == 3
        done.touch()
        out, err = job.communicate(timeout=120)
        assert job.returncode == 0, err
    finally:
        stop(job)
