"""Shared by the tests that launch runs: small pathmaps, the test programs' environment, process checks."""

import contextlib
import dataclasses
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from paths import AppMap, ClusterMap, Instrument, Pathmap, Placement, Selector, generate, launch

REPO = Path(__file__).resolve().parents[1]

# Node processes import the test programs (tests/programs/programs.py) as `programs`; only that
# folder of tests/ goes on their path (with the launcher's working directory, see
# paths.launch.node_environment), so that tests/pastset and the like never shadow the real packages.
ENV = {"PYTHONPATH": str(Path(__file__).parent / "programs")}


TWO_NODES = "clusters: {c1: {nodes: {A: {host: 127.0.0.1}, B: {host: 127.0.0.1}}}}"
THREE_NODES = ("clusters: {c1: {nodes: {A: {host: 127.0.0.1}, B: {host: 127.0.0.1}}}, "
               "c2: {nodes: {C: {host: 127.0.0.1}}}}")


def ring_app(n: int) -> AppMap:
    lines = [f"threads: {n}", "elements:"]
    for i in range(n):
        j = (i + 1) % n
        lines.append(f"  - {{name: row_{i}_{j}, template: [int, bytes], delta: 2, users: [T{i}, T{j}]}}")
    lines += ["trees:", "  - {name: count, kind: allreduce, members: all}",
              "  - {name: step, kind: barrier, members: all}"]
    return AppMap.loads("\n".join(lines))


def pathmap_for(app: AppMap, cluster: str, rule="block", shape="flat", name="rt") -> Pathmap:
    pm = generate(app, ClusterMap.loads(cluster), Placement(rule=rule), shape, name=name)
    return dataclasses.replace(pm, allow_modules=("programs",)).validate()


@contextlib.contextmanager
def windtunnel_with_source_collectors(run_dir, seconds: float = 120, seed: int = 3):
    """The 2-node wind tunnel (pathmaps/windtunnel-2node.yaml, N=48) with an event collector at
    every path's source, launched in `run_dir` and running for `seconds`: the Run."""
    pm = Pathmap.load(REPO / "pathmaps" / "windtunnel-2node.yaml")
    pm = dataclasses.replace(pm, instrument=Instrument(keep=50, collectors=(Selector(at=("source",)),)))
    with launch(pm.validate(), run_dir=run_dir) as run:
        run.start("windtunnel", {"size": 48, "steps": 1_000_000, "seed": seed, "until": time.time() + seconds})
        yield run


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it is gone once its parent reaped it.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"
    except FileNotFoundError:
        return True


def node_children():
    """PIDs of this process's node server children (`python -m paths ...`) that are still running."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and stat[0] != "Z" and b"paths" in cmdline:
            found.append(int(entry.name))
    return found


# How long a monitor may take to notice that its run ended: a pull of dead nodes, then the check.
ENDS_WITHIN = 30


def start_monitor(command, run, *extra):
    """`eventspace COMMAND --run RUN_FILE ...` in its own process, its output in one pipe."""
    env = {**os.environ, "COLUMNS": "400"}  # rich wraps at 80 columns in a pipe otherwise
    return subprocess.Popen([sys.executable, "-m", "eventspace.cli", *command, "--run", run.run_file.path,
                             "--interval", "0.3", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def read_until(proc, words, timeout=60.0) -> str:
    """What the process printed until a line holding `words` (AssertionError if it did not in time)."""
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            out.append(line)
            if words in line:
                return "".join(out)
    raise AssertionError(f"no line with {words!r} within {timeout} s; printed: {''.join(out)[-2000:]!r}")


def finish(proc) -> tuple[int, list[str]]:
    """Exit status and the lines printed, once the process ended by itself within ENDS_WITHIN s
    (it is killed and the test fails if not: a monitor that never ends must not hang the suite)."""
    try:
        out, _ = proc.communicate(timeout=ENDS_WITHIN)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"the monitor did not end within {ENDS_WITHIN} s after its run did; "
                             f"it printed: {out[-2000:]!r}") from None
    return proc.returncode, [line for line in out.splitlines() if line.strip()]
