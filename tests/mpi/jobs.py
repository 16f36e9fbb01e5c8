"""Real mpiexec runs of real programs (tests/mpi/programs), each in a directory of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eventspace.scope import EventScope
from paths import RunFile
from paths.mpiexec import family_of, launcher_options, reclaim_sessions
from polling import until
from runs import still_running, until_live  # noqa: F401 - the MPI tests take them from here

PROGRAMS = Path(__file__).parent / "programs"
MPIEXEC = Path(sys.executable).parent / "mpiexec"


def _have_mpi() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return os.access(MPIEXEC, os.X_OK)


# `make test` installs the mpi extra, so these run there; elsewhere they skip cleanly.
requires_mpi = pytest.mark.skipif(not _have_mpi(), reason="needs the mpi extra (pip install 'eventspace[mpi]')")


def run(cmd: list[str], cwd, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """Run `cmd` to its end (in a session of its own, killed whole if it outlives `timeout`)."""
    given = kwargs.pop("input", None)
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, stdin=subprocess.DEVNULL if given is None else subprocess.PIPE,
                            **kwargs)
    try:
        out, err = proc.communicate(given, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{' '.join(map(str, cmd))} outlived {timeout} s\nstdout: {out}\nstderr: {err}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def mpirun(*args, cwd, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """`eventspace mpirun ARGS` (programs named by their file in tests/mpi/programs)."""
    args = [str(PROGRAMS / a) if isinstance(a, str) and a.endswith(".py") and "/" not in a else str(a) for a in args]
    return run([sys.executable, "-m", "eventspace.cli", "mpirun", *args], cwd, timeout, **kwargs)


def plain(ranks: int, program: str, *args, cwd, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """`mpiexec -n RANKS python PROGRAM ARGS`, unmonitored (with what its MPI's launcher needs to start
    them as `eventspace mpirun` does: Open MPI's --oversubscribe)."""
    options = launcher_options(family_of(str(MPIEXEC)))
    reclaim_sessions()   # as eventspace mpirun does before it starts its launcher
    return run([str(MPIEXEC), "-n", str(ranks), *options, sys.executable, str(PROGRAMS / program), *map(str, args)],
               cwd, timeout, **kwargs)


def ours(lines: str) -> list[str]:
    """The lines eventspace.mpi printed."""
    return [line for line in lines.splitlines() if line.startswith("eventspace.mpi:")]


def start(tmp_path, ranks: int, name: str, program: str, *args, options=(), env=None) -> subprocess.Popen:
    """`eventspace mpirun -n RANKS --name NAME OPTIONS PROGRAM ARGS`, left running (end it with `stop`)."""
    return subprocess.Popen([sys.executable, "-m", "eventspace.cli", "mpirun", "-n", str(ranks), "--name", name,
                             *map(str, options), str(PROGRAMS / program), *map(str, args)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=env)


def until_in_calls(name: str, ranks: int, timeout: float = 90.0, for_at_least: float = 0.0) -> None:
    """Until `ranks` ranks of run `name` are inside an MPI call, as their collectors' in-flight marks
    say (what `eventspace stack` and the heartbeat read), each of them `for_at_least` seconds (a mark
    is made just before the C call: a rank marked half a second ago is blocked inside it)."""
    def in_calls() -> set[str]:
        now = time.monotonic_ns()   # the ranks' clock (one host)
        return {scope.catalogue[c].thread for c, mark in scope.in_flight_marks()[0].items()
                if now - mark.t_start >= for_at_least * 1e9}

    with EventScope(RunFile.find(name), "all", mode="latest") as scope:
        until(in_calls, timeout, f"{ranks} ranks of run {name} inside an MPI call for {for_at_least:g} s",
              holds=lambda threads: len(threads) == ranks)


def stop(job: subprocess.Popen) -> None:
    """End `job` (all of it) if it still runs."""
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
    job.communicate()


def monitor(*args, cwd) -> list[dict]:
    """`eventspace monitor ARGS --json`: one object per interval (the last line, which says how the
    monitor ended, left out)."""
    result = run([sys.executable, "-m", "eventspace.cli", "monitor", *map(str, args), "--json"], cwd, timeout=60)
    assert result.returncode == 0, result.stderr
    *frames, end = [json.loads(line) for line in result.stdout.splitlines()]
    assert "ended" in end and all("ended" not in frame for frame in frames), end
    return frames


def watch(tmp_path, kind: str, name: str, interval: float = 0.2) -> subprocess.Popen:
    """`eventspace monitor KIND --run NAME --json --interval INTERVAL`, left running (end it with `unwatch`):
    its stdout gives one JSON object per interval."""
    return subprocess.Popen([sys.executable, "-m", "eventspace.cli", "monitor", kind, "--run", name, "--json",
                             "--interval", str(interval)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def unwatch(monitor: subprocess.Popen | None) -> None:
    """End a monitor `watch` started, if it still runs."""
    if monitor is not None and monitor.poll() is None:
        monitor.kill()
        monitor.communicate()
