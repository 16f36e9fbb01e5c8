"""The MPI library mpi4py runs on (MPICH's under `make test`, Open MPI's under `make test-openmpi`): its
launcher, its Status layout and handle size, each found, not assumed (eventspace.mpi.library)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from jobs import mpirun, requires_mpi

from paths.mpiexec import OPEN_MPI, ROOT_VARIABLES, family_of

pytestmark = requires_mpi

REPO = Path(__file__).resolve().parents[2]


def library() -> dict:
    """What eventspace.mpi.library finds, asked in a process of its own (MPI loaded, not started)."""
    done = subprocess.run([sys.executable, "-c", "import json; from eventspace.mpi.library import mpi_library; "
                           "m = mpi_library(); print(json.dumps([m.family, m.version, m.path]))"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    family, version, path = json.loads(done.stdout)
    return {"family": family, "version": version, "path": path}


PROGRAM = """\
import json, socket
from mpi4py import MPI
from eventspace.mpi import collector, mpi4py_access
from eventspace import compiled
comm = MPI.COMM_WORLD
said = {"version": MPI.Get_library_version().splitlines()[0].strip(), "size": comm.Get_size(),
        "host": MPI.Get_processor_name(), "hostname": socket.gethostname(),
        "offsets": collector.status_offsets(mpi4py_access.status_getter()),
        "handle": mpi4py_access.handle_size(), "status": mpi4py_access.status_size(),
        "in_c": collector.count_in_c(compiled.collector_module())}
gathered = comm.gather(said)
print(json.dumps(gathered) if comm.Get_rank() == 0 else "", end="")
"""


def test_mpirun_starts_ranks_with_the_launcher_of_the_mpi_mpi4py_runs_on_and_reads_its_layout(tmp_path):
    """The ranks are one job of 2 (a launcher of another MPI would start two singletons of 1),
    on the library `eventspace mpirun` found; each finds where its MPI_Status keeps the source and
    the tag, and its handle size, so that compiled receives read them there (MPICH: 8 and 12, 4-byte
    handles; Open MPI: 0 and 4, pointers); Get_processor_name is the host's name under both."""
    found = library()
    assert found["family"] and found["path"] and os.path.exists(found["path"]), found
    (tmp_path / "which.py").write_text(PROGRAM)
    result = mpirun("-n", 2, tmp_path / "which.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    ranks = json.loads(result.stdout)
    assert [r["size"] for r in ranks] == [2, 2]
    assert all(found["version"] in " ".join(r["version"].split()) for r in ranks), (found, ranks)
    assert {r["host"] for r in ranks} == {socket.gethostname()}
    layout = {(tuple(r["offsets"]), r["handle"], r["status"], r["in_c"]) for r in ranks}
    assert len(layout) == 1
    (source_at, tag_at), handle, status_size, in_c = layout.pop()
    expected = ((0, 4), 8) if found["family"] == OPEN_MPI else ((8, 12), 4)
    assert ((source_at, tag_at), handle) == expected and status_size >= 20 and in_c, layout


def test_a_launcher_of_another_mpi_is_refused_in_one_line(tmp_path):
    """`--mpiexec` naming MPICH's launcher while mpi4py runs on Open MPI (or the reverse) would start
    each rank alone: one line says so, and nothing starts (needs the other MPI's venv of this
    checkout: .venv for MPICH, .venv-openmpi for Open MPI)."""
    ours = library()["family"]
    others = [p for p in (REPO / ".venv" / "bin" / "mpiexec", REPO / ".venv-openmpi" / "bin" / "mpiexec")
              if os.access(p, os.X_OK) and family_of(str(p)) not in ("", ours)]
    if not others:
        pytest.skip("no launcher of another MPI in this checkout (make test-openmpi makes .venv-openmpi)")
    (tmp_path / "nothing.py").write_text("from mpi4py import MPI\n")
    result = mpirun("-n", 2, "--mpiexec", others[0], tmp_path / "nothing.py", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"eventspace mpirun: --mpiexec {others[0]} is {family_of(str(others[0]))}'s, but mpi4py runs on "
        f"{library()['version']} ({library()['path']}): each rank would start alone; give {ours}'s mpiexec"]


def test_open_mpi_as_root_without_its_two_variables_is_one_line_naming_them(tmp_path):
    """Open MPI's launcher refuses root unless told twice; `eventspace mpirun` says so, and how, before
    it starts anything."""
    if library()["family"] != OPEN_MPI or os.geteuid() != 0:
        pytest.skip("Open MPI's launcher as root only")
    env = {k: v for k, v in os.environ.items() if k not in ROOT_VARIABLES}
    (tmp_path / "nothing.py").write_text("from mpi4py import MPI\n")
    result = mpirun("-n", 2, tmp_path / "nothing.py", cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "eventspace mpirun: Open MPI's mpiexec refuses to run as root; if you mean to, set "
        "OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment (README: \"Open MPI\")"]


NEXT_PID = Path("/proc/sys/kernel/ns_last_pid")


def test_open_mpis_launcher_starts_where_a_killed_one_left_its_session_under_the_same_pid(tmp_path):
    """make test-openmpi failed a test or two a run with "The PMIx server's listener thread failed to
    start" (exit 213), before any rank started: a launcher killed by SIGKILL (a test ending a job's whole
    group) leaves its session directory, ompi.<its pid>, and a later launcher given the same pid reads
    its own pid in the old rendezvous files, takes them for a live server's and stops. Here the next few
    hundred pids all have such a directory, and `eventspace mpirun` starts its job all the same."""
    if library()["family"] != OPEN_MPI:
        pytest.skip("Open MPI's sessions only")
    if not os.access(NEXT_PID, os.W_OK):
        pytest.skip("choosing the next pids takes root")
    base = Path(next((os.environ[v] for v in ("TMPDIR", "TEMP", "TMP") if os.environ.get(v)), "/tmp"))
    host = socket.gethostname()
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    first = (int(NEXT_PID.read_text()) + 5000) % (pid_max - 1000) + 300
    pids = [p for p in range(first, first + 400)
            if not Path(f"/proc/{p}").exists() and not (base / f"ompi.{p}").exists()]
    (tmp_path / "hello.py").write_text("from mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\n")
    try:
        for pid in pids:   # as a killed launcher leaves it: its rendezvous files name it
            (base / f"ompi.{pid}").mkdir()
            (base / f"ompi.{pid}" / f"pmix.{host}.tool.{pid}").write_text(
                f"prterun-{host}-{pid}@0.0;tcp4://127.0.0.1:1\n5.0\n{pid}\n0:0\nthen\n")
        NEXT_PID.write_text(str(first - 1))
        result = mpirun("-n", 2, tmp_path / "hello.py", cwd=tmp_path)
    finally:
        for pid in pids:
            shutil.rmtree(base / f"ompi.{pid}", ignore_errors=True)
    assert result.returncode == 0, result.stderr
