"""Running programs under eventspace.mpi: as `python prog.py` would, with their own output and exit status."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from jobs import MPIEXEC, PROGRAMS, mpirun, ours, plain, requires_mpi, run, start, stop, until_in_calls, until_live

from paths.mpiexec import OPEN_MPI, family_of
from paths.runfile import run_dir

pytestmark = requires_mpi


def test_output_is_the_programs_own(tmp_path):
    mine = mpirun("-n", 3, "output.py", "a", "--b", "c", cwd=tmp_path)
    theirs = plain(3, "output.py", "a", "--b", "c", cwd=tmp_path)
    assert mine.returncode == theirs.returncode == 0, mine.stderr
    assert mine.stdout == theirs.stdout
    assert "argv ['" in mine.stdout and "'a', '--b', 'c']" in mine.stdout and "name __main__" in mine.stdout
    assert [line for line in mine.stderr.splitlines() if not line.startswith("eventspace.mpi:")] == ["to stderr"]
    assert any("run file" in line for line in ours(mine.stderr))


def test_exit_status_propagates(tmp_path):
    mine = mpirun("-n", 2, "exit_code.py", 3, cwd=tmp_path)
    theirs = plain(2, "exit_code.py", 3, cwd=tmp_path)
    assert mine.returncode == theirs.returncode == 3


def test_an_exception_on_one_rank_aborts_the_job_naming_it(tmp_path):
    result = mpirun("-n", 3, "fails.py", cwd=tmp_path, timeout=60)
    # The ordinary MPI abort ended the others: the job's status is MPI_Abort's error code (1), under MPICH
    # and Open MPI. (Not the MPI library's own "MPI_Abort" line: the aborting rank writes it as the launcher
    # tears the job down, and on a loaded machine the launcher had stopped forwarding, one run in fifteen.)
    assert result.returncode == 1, result.stderr
    named = [line for line in ours(result.stderr) if "raised" in line]
    assert named == ["eventspace.mpi: rank 1 raised ZeroDivisionError: rank 1 divides by zero at fails.py:7 in "
                     "<module>; aborting the MPI job"]
    assert "Traceback" in result.stderr and 'fails.py", line 7' in result.stderr


def test_a_program_without_mpi_runs_with_one_note(tmp_path):
    result = mpirun("-n", 2, "no_mpi.py", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["no MPI here 45", "no MPI here 45"]
    assert ours(result.stderr) == ["eventspace.mpi: the program never imported mpi4py.MPI: no MPI calls were collected"]


def test_a_module_runs_as_python_m_with_stdin_at_rank_0(tmp_path):
    # a line, not to the end: Open MPI 5.0's launcher (its PMIx) forwards stdin but never its end
    (tmp_path / "modprog.py").write_text(
        "import sys\nfrom mpi4py import MPI\n"
        "if MPI.COMM_WORLD.Get_rank() == 0: print(__name__, sys.argv[1:], sys.stdin.readline().strip())\n")
    result = mpirun("-n", 2, "-m", "modprog", "x", "--y", cwd=tmp_path, input="hello ranks\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "__main__ ['x', '--y'] hello ranks\n"
    assert "run modprog:" in result.stderr


def test_a_missing_mpiexec_names_the_extra(tmp_path):
    result = mpirun("-n", 2, "--mpiexec", tmp_path / "no-mpiexec", "output.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"eventspace mpirun: no mpiexec at {tmp_path / 'no-mpiexec'}; pip install 'eventspace[mpi]' "
        "installs one next to Python"]


def test_a_missing_mpi4py_names_the_extra(tmp_path):
    shim = tmp_path / "shim" / "mpi4py"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('no mpi4py in this environment')\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path / "shim")}
    launcher = mpirun("-n", 2, "output.py", cwd=tmp_path, env=env)
    assert launcher.returncode == 2
    assert launcher.stderr.splitlines() == [
        f"eventspace mpirun: mpi4py is not installed for {sys.executable}; pip install 'eventspace[mpi]'"]
    direct = run([sys.executable, "-m", "eventspace.mpi", str(PROGRAMS / "output.py")], tmp_path, env=env)
    assert direct.returncode == 2
    assert direct.stderr.splitlines() == ["eventspace.mpi: mpi4py is not installed; pip install 'eventspace[mpi]'"]


def test_a_bad_topology_is_one_clear_error_before_any_rank_starts(tmp_path):
    topology = tmp_path / "t.yaml"
    topology.write_text("clusters:\n  rack1: {hosts: [a]}\n")
    result = mpirun("-n", 2, "--topology", topology, "output.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"eventspace mpirun: {topology}:2: clusters.rack1:")
    assert result.stdout == ""


def test_one_rank_is_one_rank(tmp_path):
    result = mpirun("-n", 1, "--name", "solo", "--archive", tmp_path / "solo.sqlite", "output.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    said = "\n".join(ours(result.stderr))
    assert "run solo: 1 rank on 1 host;" in said and "from 1 rank," in said and "1 ranks" not in said

# -- the run file, however the run ends -------------------------------------------------------------------------

def test_a_run_aborted_by_an_exception_on_another_rank_leaves_no_run_file(tmp_path):
    result = mpirun("-n", 3, "--name", "aborted", "fails.py", cwd=tmp_path, timeout=60)
    assert result.returncode != 0
    assert not list(run_dir().glob("aborted*")), "MPI's abort ended rank 0, and its run file stayed"
    assert "eventspace mpirun: removed the run file of aborted: its ranks have ended" in result.stderr


def test_a_rank_0_that_raises_removes_its_run_file_before_it_aborts_under_any_launcher(tmp_path):
    program = tmp_path / "root_fails.py"
    program.write_text("from mpi4py import MPI\n"
                       "if MPI.COMM_WORLD.Get_rank() == 0:\n    raise ValueError('rank 0 gives up')\n"
                       "MPI.COMM_WORLD.Barrier()\n")
    result = run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "eventspace.mpi", "--name", "root-fails",
                  str(program)], tmp_path, timeout=60)
    assert result.returncode != 0 and "rank 0 raised ValueError: rank 0 gives up" in result.stderr
    assert not list(run_dir().glob("root-fails*"))


@pytest.mark.parametrize("ending", ["raise", "MPI_Abort"])
def test_an_aborted_run_leaves_none_of_the_mpi_librarys_shared_memory_files(tmp_path, ending):
    """MPICH and Open MPI remove the files of their ranks' shared memory (/dev/shm) at MPI_Finalize, not
    at an abort: each aborted run left 3 MB behind, and this machine's /dev/shm held 4.4 GB of them."""
    program = tmp_path / "abandons.py"
    program.write_text(   # each rank writes down the files it maps (an abort may lose what ranks print)
        "import sys\nfrom mpi4py import MPI\n"
        "comm = MPI.COMM_WORLD\ncomm.Barrier()\n"
        "mapped = {line.split(maxsplit=5)[5] for line in open('/proc/self/maps').read().splitlines()\n"
        "          if len(line.split(maxsplit=5)) == 6}\n"
        "with open(f'maps.{comm.Get_rank()}', 'w') as f:\n"
        "    f.write('\\n'.join(p for p in mapped if p.startswith('/dev/shm/')))\n"
        "comm.Barrier()\n"
        "if comm.Get_rank() == 1:\n"
        "    if sys.argv[1] == 'raise':\n        raise RuntimeError('rank 1 gives up')\n"
        "    comm.Abort(4)\n"
        "comm.Barrier()\n")
    result = mpirun("-n", 2, str(program), ending, cwd=tmp_path, timeout=60)
    assert result.returncode != 0
    files = {p for rank in (0, 1) for p in (tmp_path / f"maps.{rank}").read_text().splitlines()
             if p.rsplit("/", 1)[1].startswith(("mpich_shm_", "sm_segment."))}   # MPICH's, Open MPI's
    assert files, "no MPI shared-memory file was mapped"   # both MPIs make them for 2 ranks on a host
    assert not [p for p in files if Path(p).exists()]


@pytest.mark.parametrize("ending", ["ctrl-c", "kill-rank-0", "kill-rank-1"])
def test_a_run_ended_by_ctrl_c_or_a_rank_killed_leaves_no_run_file(tmp_path, ending):
    name = f"ended-{ending}"
    job = start(tmp_path, 2, name, "live.py", tmp_path / "stop")
    try:
        run_file = until_live(name, job)
        if ending == "ctrl-c":
            os.killpg(job.pid, signal.SIGINT)      # the terminal's Ctrl-C reaches the whole job
        else:
            os.kill(run_file.pids[f"r{ending[-1]}"], signal.SIGKILL)
        job.communicate(timeout=60)
    finally:
        stop(job)
    assert not Path(run_file.path).exists() and not Path(run_file.pathmap_file).exists()


@pytest.mark.parametrize("ending", ["ctrl-c", "sigterm"])
def test_a_hung_run_ends_on_ctrl_c_or_sigterm_though_its_ranks_are_blocked_in_mpi(tmp_path, ending):
    """Ranks blocked in MPI calls that never return (a deadlock: when users press Ctrl-C, or `timeout`
    sends SIGTERM) never ran Python's handler of the signal, and eventspace mpirun waited for good."""
    name = f"hung-{ending}"
    job = start(tmp_path, 3, name, "waits.py", "collective")   # r0, r1 in an Allreduce, r2 in a receive
    try:
        run_file = until_live(name, job)
        until_in_calls(name, 3, for_at_least=0.5)   # blocked in C: only the C-level handler hears the signal
        if ending == "ctrl-c":
            os.killpg(job.pid, signal.SIGINT)      # the terminal's Ctrl-C reaches the whole job
        else:
            job.send_signal(signal.SIGTERM)        # what `timeout` or Slurm sends eventspace mpirun
        out, err = job.communicate(timeout=60)
    finally:
        stop(job)
    assert job.returncode == (130 if ending == "ctrl-c" else 143), err
    why = "Ctrl-C (SIGINT)" if ending == "ctrl-c" else "SIGTERM"
    if family_of(str(MPIEXEC)) != OPEN_MPI:   # Open MPI's launcher ends its ranks itself once it passes the signal on
        assert f"eventspace.mpi: {why}, while blocked in a call that never returned: aborting the MPI job" in err
    assert not Path(run_file.path).exists()


