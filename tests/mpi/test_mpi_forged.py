"""A record written into a rank's trace element by someone other than its collector, while the run's
archive writer drains the rings: it is left out and said once, and every other record is kept."""

from __future__ import annotations

import subprocess
import sys
import time

import pastset
from eventspace import ignored, trace
from eventspace.catalogue import Catalogue
from jobs import PROGRAMS, requires_mpi, stop, until_live
from monitors.archive import Archive

pytestmark = requires_mpi


def test_a_forged_time_in_a_rank_ring_does_not_stop_the_archive(tmp_path):
    """Attack: one record with t_end = 2**63 in r1's ring: the archive writer died on it (ValueError),
    and every record after it was lost."""
    stop_file = tmp_path / "stop"
    process = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "mpirun", "-n", "2", "--name", "forged",
                                "--archive", tmp_path / "run.sqlite", PROGRAMS / "live.py", stop_file], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        run_file = until_live("forged", process, 90)
        catalogue = Catalogue(run_file.pathmap())
        victim = next(e for e in catalogue.entries if e.thread == "r1")
        with pastset.connect(run_file.endpoints[victim.trace_node]) as client:
            now = client.call("eventspace.clock")
            client.enter(victim.trace, trace.FORMAT).move((0x0100, 0, victim.id, 0, 0, 0, now, 2**63))
        time.sleep(1.0)   # the writer takes every 0.1 s: it meets the record, and the program goes on (no
        # sign of it but the archive, which is read once the run ended)
        stop_file.touch()
        out, err = process.communicate(timeout=120)
    finally:
        stop(process)
    assert process.returncode == 0, err
    steps = {line.split()[0]: int(line.split()[2]) for line in out.splitlines() if " steps " in line}
    with Archive.open(tmp_path / "run.sqlite") as archive:
        _, rows = archive.query("SELECT thread, count(*) FROM events WHERE op_name = 'MPI_Sendrecv.send' GROUP BY thread")
    assert {thread: n for thread, n in rows} == {f"r{r}": n for r, n in steps.items()}, (rows, steps)
    told = [line for line in err.splitlines() if "ignored" in line]
    assert told == [f"archive {tmp_path / 'run.sqlite'}: 1 record ignored: {ignored.BAD_TIMES}"], err
