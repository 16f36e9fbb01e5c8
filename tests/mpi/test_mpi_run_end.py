"""Monitors attached to an MPI run read what the ranks wrote last: the run waits for their final read, and
each monitor's last line says what its view made and what became of every record."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jobs import PROGRAMS, requires_mpi, stop, until_live

pytestmark = [requires_mpi, pytest.mark.slow]

COUNT, ROUNDS = 3000, 40


def monitor(tmp_path, *command):
    return subprocess.Popen([sys.executable, "-m", "eventspace.cli", "monitor", *command, "--run", "ending",
                             "--json", "--interval", "1"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def lines_of(proc) -> tuple[list[dict], str]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()], err   # stdout: JSON lines only


def test_monitors_read_to_the_end_of_an_mpi_run_and_their_counts_reconcile(tmp_path):
    go = tmp_path / "go"
    # keep: every record of the burst fits in the rings, so nothing is discarded and counts are exact.
    job = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "mpirun", "-n", "2", "--name", "ending",
                            "--keep", str(4 * COUNT), str(PROGRAMS / "ending.py"), str(go), str(COUNT), str(ROUNDS)],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    monitors = {}
    try:
        until_live("ending", job)
        monitors = {name: monitor(tmp_path, *command) for name, command in
                    {"matrix": ["matrix"], "colop": ["colop"], "getevent": ["getevent"],
                     "dashboard": ["dashboard"]}.items()}
        for proc in monitors.values():
            json.loads(proc.stdout.readline())   # attached, and pulled once
        go.touch()
        out, err = job.communicate(timeout=120)
        assert job.returncode == 0, err
        ended = {name: lines_of(proc) for name, proc in monitors.items()}
    finally:
        for proc in monitors.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        stop(job)
    matrix, colop, getevent, board = (ended[name][0][-1] for name in ("matrix", "colop", "getevent", "dashboard"))
    for last in (matrix, colop, getevent, board):
        assert (last["ended"], last["why"]) == (True, "its program ended")
    assert matrix["messages"] == COUNT
    assert colop["rounds"] == ROUNDS + 2   # the Barrier, the allreduces and the Gather, every one complete
    # The dashboard on an MPI run: its collectives panel counts them too, and the panel it has nothing
    # for (an MPI run samples no system summaries) says so instead of ending the dashboard.
    assert board["trees"] == {"comm0": ROUNDS + 2} and board["heartbeat"]
    assert "no system summaries" in ended["dashboard"][1]
    # getevent's view: every record of both ranks (source and contribute collectors): the sends, the
    # receives, and each rank's collectives.
    account = getevent["account"]
    assert account["made"] == 2 * COUNT + 2 * (ROUNDS + 2)
    assert account["before"] + account["read"] + account["discarded"] == account["made"]
    for name, (_, err) in ended.items():
        assert f"{account['made']:,} events made in its view" in err or name != "getevent", err
        assert err.splitlines()[-1].startswith("run ending ended: its program ended; "), err
