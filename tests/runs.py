"""Shared by the tests that launch runs: small pathmaps, the test programs' environment, process checks."""

import codecs
import contextlib
import dataclasses
import importlib.util
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pastset
from eventspace.roster import Roster, roster_node
from paths import AppMap, ClusterMap, Instrument, Pathmap, Placement, RunError, RunFile, Selector, generate, launch
from polling import until

REPO = Path(__file__).resolve().parents[1]

# Node processes import the test programs (tests/programs/programs.py) as `programs`; only that
# folder of tests/ goes on their path (with the launcher's working directory, see
# paths.launch.node_environment), so that tests/pastset and the like never shadow the real packages.
PROGRAMS = Path(__file__).parent / "programs"
ENV = {"PYTHONPATH": str(PROGRAMS)}


TWO_NODES = "clusters: {c1: {nodes: {A: {host: 127.0.0.1}, B: {host: 127.0.0.1}}}}"
THREE_NODES = ("clusters: {c1: {nodes: {A: {host: 127.0.0.1}, B: {host: 127.0.0.1}}}, "
               "c2: {nodes: {C: {host: 127.0.0.1}}}}")
FOUR_NODES = ("clusters: {c1: {nodes: {A: {host: 127.0.0.1}, B: {host: 127.0.0.1}}}, "
              "c2: {nodes: {C: {host: 127.0.0.1}, D: {host: 127.0.0.1}}}}")


def benchmark(name: str):
    """The module of benchmarks/`name`.py (imported once), for a test that runs a benchmark's workload
    or checks its parts."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


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


def memory_kb(pid: int) -> dict[str, int]:
    """The process's resident memory now (VmRSS) and at its peak (VmHWM), in kB."""
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line.split(":")[0]] = int(line.split()[1])
    return found


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


def not_answering(endpoint: str, within: float = 1.0) -> bool:
    """Whether the node server at `endpoint` accepts a connection but does not answer within `within`
    seconds (paused, or a C call holds its GIL)."""
    try:
        pastset.connect(endpoint, timeout=within).close()
    except pastset.NotAnswering:
        return True
    return False


def still_running(job: subprocess.Popen) -> bool:
    """True while `job` runs; once it ended, AssertionError with the end of what it printed (a
    condition of `until` starts with it, so that a wait ends as soon as the job does)."""
    if job.poll() is None:
        return True
    out, err = job.communicate()
    raise AssertionError(f"exit code {job.returncode}; it printed: {(out or '')[-3000:]}\n{(err or '')[-3000:]}")


def until_live(run, job: subprocess.Popen, timeout: float = 60.0) -> RunFile:
    """The run file of `run` (a run's name, or its run file's path) once every node serves;
    AssertionError if `job`, which started it, ends first."""
    return until(lambda: still_running(job) and RunFile.find(str(run)).check_live(), timeout, f"run {run} to come up",
                 ignoring=RunError)


def in_roster(run, pid: int) -> bool:
    """Whether a scope of process `pid` reported to the roster of `run` (a launched run): a monitor
    that pulls."""
    roster = Roster(run.endpoints[roster_node(run.pathmap)])
    try:
        return any(a.entry.monitor.endswith(f":{pid}") for a in roster.active())
    finally:
        roster.close()


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
    """`eventspace COMMAND --run RUN_FILE ...` in its own process, its output in one pipe; with --json,
    stdout alone (JSON lines only: the lines for people go to stderr, kept in `proc.stderr`)."""
    json_lines = "--json" in (*command, *extra)
    return subprocess.Popen([sys.executable, "-m", "eventspace.cli", *command, "--run", run.run_file.path,
                             "--interval", "0.3", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE if json_lines else subprocess.STDOUT, text=True)


def read_until(proc, words, timeout=60.0) -> str:
    """What the process printed until a line holding `words`, or matching it if it is a compiled
    pattern (AssertionError if it did not in time).

    It reads the pipe's descriptor itself: a buffered `readline` after `select` would leave the rest
    of a burst (a whole rich table) in Python's buffer, where `select` cannot see it. What it read past
    that line is kept on `proc` for the next call and for `finish`."""
    decoder = proc.__dict__.setdefault("decoder", codecs.getincrementaldecoder("utf-8")("replace"))
    out = []
    deadline = time.monotonic() + timeout
    while True:
        line, newline, rest = proc.__dict__.get("unread", "").partition("\n")
        if newline:
            proc.unread = rest
            out.append(line + newline)
            if (words.search(line) if isinstance(words, re.Pattern) else words in line):
                return "".join(out)
            continue
        left = deadline - time.monotonic()
        ready = left > 0 and select.select([proc.stdout], [], [], min(left, 0.5))[0]
        chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
        if ready and chunk:
            proc.unread = proc.__dict__.get("unread", "") + decoder.decode(chunk)
        elif ready or left <= 0:
            break
    out.append(proc.__dict__.get("unread", ""))
    raise AssertionError(f"no line with {words!r} within {timeout} s; printed: {''.join(out)[-2000:]!r}")


def finish(proc) -> tuple[int, list[str]]:
    """Exit status and the lines printed, once the process ended by itself within ENDS_WITHIN s
    (it is killed and the test fails if not: a monitor that never ends must not hang the suite)."""
    try:
        out, err = proc.communicate(timeout=ENDS_WITHIN)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        out = proc.__dict__.get("unread", "") + out
        raise AssertionError(f"the monitor did not end within {ENDS_WITHIN} s after its run did; "
                             f"it printed: {out[-2000:]!r} {(err or '')[-1000:]!r}") from None
    out = proc.__dict__.get("unread", "") + out  # what read_until read past its line
    proc.people = [line for line in (err or "").splitlines() if line.strip()]   # stderr, if apart (--json)
    return proc.returncode, [line for line in out.splitlines() if line.strip()]


class InProcessRun:
    """A pathmap's node servers all in this process, each served under a `local://` name: the
    in-process backend of pastset, where every request between nodes (and from a scope) is a
    direct call. Quacks as a `paths.Run` does for what event scopes and tests ask of one
    (`pathmap`, `endpoints`, `client`, `run`); `close()` closes every node."""

    run_file = None

    def __init__(self, pathmap: Pathmap):
        import pastset
        from paths import NodeServer

        if str(PROGRAMS) not in sys.path:   # what ENV gives node processes
            sys.path.insert(0, str(PROGRAMS))
        self._connect = pastset.connect
        self.pathmap = pathmap
        self.nodes = {}
        try:
            for node in pathmap.nodes:
                self.nodes[node.name] = NodeServer(pathmap, node.name)
            self.endpoints = {name: node.serve(f"local://{pathmap.name}-{name}") for name, node in self.nodes.items()}
            for node in self.nodes.values():
                node.link(self.endpoints)
        except BaseException:
            self.close()
            raise
        self._clients = {}

    def client(self, node: str):
        if node not in self._clients:
            self._clients[node] = self._connect(self.endpoints[node])
        return self._clients[node]

    def run(self, program: str, args: dict | None = None, timeout: float = 60) -> dict:
        """Run `program` on every node's threads; their results by thread (AssertionError on a failure)."""
        for node in self.nodes.values():
            node.start(program, args)
        outcomes = {}
        for node in self.nodes.values():
            joined = node.join(timeout)
            assert not joined["running"], f"threads {joined['running']} still run after {timeout} s"
            outcomes.update(joined["outcomes"])
        failed = {t: o for t, o in outcomes.items() if o[0] != "ok"}
        assert not failed, failed
        return {t: o[1] for t, o in outcomes.items()}

    def close(self) -> None:
        for client in getattr(self, "_clients", {}).values():
            client.close()
        for node in self.nodes.values():
            node.close()
