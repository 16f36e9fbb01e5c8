"""Shared by the tests that launch runs: small pathmaps, the test programs' environment, process checks."""

import contextlib
import dataclasses
import os
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
