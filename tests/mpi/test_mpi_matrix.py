"""The traffic matrix of a real MPI run equals what the program sent: from its archive and live."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jobs import mpirun, requires_mpi, run, start, stop, until_live
from monitors.heatmap import plotting
from polling import until

pytestmark = requires_mpi


def sent(stdout: str) -> dict:
    """What the program says it sent (the first line of its output)."""
    return json.loads(stdout.splitlines()[0])


def archive_matrix(archive, *args, cwd):
    return run([sys.executable, "-m", "eventspace.cli", "archive", "matrix", archive, *map(str, args)], cwd)


def test_the_matrix_of_an_archive_equals_the_bytes_and_messages_the_program_sent(tmp_path):
    archive = tmp_path / "traffic.sqlite"
    result = mpirun("-n", 3, "--archive", archive, "traffic.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    expected = sent(result.stdout)
    shown = archive_matrix(archive, "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    matrix = json.loads(shown.stdout)
    assert (matrix["bytes"], matrix["messages"]) == (expected["bytes"], expected["messages"])
    total = sum(map(sum, expected["bytes"]))
    assert matrix["by_hop"][0] == {"hop": "same host", "messages": sum(map(sum, expected["messages"])),
                                   "bytes": total}
    table = archive_matrix(archive, cwd=tmp_path)
    assert table.returncode == 0 and f"{total:,}" in table.stdout and "same host" in table.stdout


@pytest.mark.skipif(not plotting(), reason="needs the plot extra (matplotlib)")
def test_the_matrix_draws_a_heatmap_and_bytes_per_host(tmp_path):
    archive = tmp_path / "traffic.sqlite"
    assert mpirun("-n", 3, "--archive", archive, "traffic.py", cwd=tmp_path).returncode == 0
    drawn = archive_matrix(archive, "--plot", tmp_path / "m.png", cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    for png in ("m.png", "m-hosts.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(plotting(), reason="the plot extra is installed")
def test_without_the_plot_extra_the_matrix_says_so_and_prints_the_table(tmp_path):
    archive = tmp_path / "traffic.sqlite"
    assert mpirun("-n", 3, "--archive", archive, "traffic.py", cwd=tmp_path).returncode == 0
    shown = archive_matrix(archive, "--plot", tmp_path / "m.png", cwd=tmp_path)
    assert shown.returncode == 0 and "same host" in shown.stdout
    assert shown.stderr == "note: no plots: --plot needs matplotlib (pip install 'eventspace[plot]')\n"
    assert not (tmp_path / "m.png").exists()


@pytest.mark.slow   # 6-7 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_the_live_matrix_counts_what_the_program_sends_after_it_attached(tmp_path):
    go, done = tmp_path / "go", tmp_path / "done"
    job = start(tmp_path, 3, "traffic", "traffic.py", go, done)
    monitor = None
    try:
        until_live("traffic", job)
        monitor = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "monitor", "matrix", "--run", "traffic",
                                    "--json", "--interval", "0.2"], cwd=tmp_path, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        first = json.loads(monitor.stdout.readline())
        assert sum(map(sum, first["bytes"])) == 0
        go.touch()
        expected = sent(job.stdout.readline() + "\n")
        last = until(lambda: json.loads(monitor.stdout.readline()), 30, "a matrix with every byte the program sent",
                     holds=lambda last: last["bytes"] == expected["bytes"])
        assert (last["bytes"], last["messages"], last["discarded"]) == (expected["bytes"], expected["messages"], 0)
        done.touch()
        out, err = monitor.communicate(timeout=60)
        assert monitor.returncode == 0, err
        end = json.loads(out.splitlines()[-1])   # the last JSON line says how it ended; people read stderr
        assert end["ended"] and end["messages"] == sum(map(sum, expected["messages"]))
        assert err.splitlines()[-1].startswith("run traffic ended: its program ended; ")
        job.communicate(timeout=60)
        assert job.returncode == 0
    finally:
        if monitor is not None and monitor.poll() is None:
            monitor.kill()
            monitor.communicate()
        stop(job)
