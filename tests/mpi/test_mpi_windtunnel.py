"""The wind tunnel on mpi4py, monitored, against the single-process reference."""

from __future__ import annotations

import json

from apps.windtunnel.lattice import grid_sha256, reference_run
from eventspace.archive import Archive
from jobs import mpirun, requires_mpi

pytestmark = requires_mpi


def test_the_mpi_wind_tunnel_grid_equals_the_reference(tmp_path):
    archive = tmp_path / "wt.sqlite"
    result = mpirun("-n", 4, "--archive", archive, "-m", "apps.windtunnel.mpi", "--size", 32, "--steps", 20, "--json",
                    cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["ranks"] == 4 and summary["steps"] == 20
    assert summary["grid_sha256"] == grid_sha256(reference_run(32, 20, 1))
    with Archive.open(archive) as db:
        _, rows = db.query("SELECT op_name, count(*), sum(nbytes) FROM events GROUP BY op_name")
    counts = {op: (n, b) for op, n, b in rows}
    # Every rank sends its two border rows (8 x 64 bytes each) per step.
    assert counts["MPI_Sendrecv.send"] == (4 * 2 * 20, 4 * 2 * 20 * 8 * 64)
