"""The launcher: one node server process per pathmap node, started, linked, watched and stopped."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path as FilePath

import pastset
from pastset.security import bind_problem

from . import mpiexec as by_mpiexec
from . import rundir, runfile
from . import snapshot as snapshots
from .errors import PathsError
from .node import ABORT, INFO, JOIN, LINK, START, STOP
from .pathmap import Pathmap
from .runfile import RunFile

# One INFO record per run started, naming its run file (the `eventspace` command prints it), and the
# lines a recorded run's end says (its archive, its flight recorder's dump).
log = logging.getLogger(__name__)

# What records a run (`launch(..., archive=..., record=...)`): defined above paths (eventspace.recording's
# RunRecording), so found through this entry-point group, as wrapper types are.
RECORDING = "eventspace.recording"
ENDED_NORMALLY = "the program ended"


class NodeDied(PathsError):
    """A node server process ended, or its connection closed, while the run needed it."""


class NodeNotAnswering(NodeDied):
    """A node server kept its connection open but did not answer for the run's grace (paused,
    swapping, a busy host), and the run could not wait longer. A NodeDied, so that one handler
    covers every node a run loses."""


class ProgramFailed(PathsError):
    """An application thread raised; `failures` maps thread -> (error class name, message, where in
    the program: `worker.py:41 in work`, or ""). The message names each (the first four), the log
    of its node where the launcher kept one (`logs`: node -> path, with the traceback), and how many
    other threads were `stopped` because of it."""

    def __init__(self, failures: dict[str, tuple], nodes: dict[str, str], logs: dict[str, str] | None = None,
                 stopped: int = 0):
        self.failures = failures
        first = sorted(failures)[:4]
        lines = []
        for t in first:
            name, message, *at = failures[t]
            node = nodes.get(t, "?")
            line = f"thread {t} on node {node} raised {name}: {message}" + (f" at {at[0]}" if at and at[0] else "")
            if (logs or {}).get(node):
                line += f" (traceback in {logs[node]})"
            lines.append(line)
        more = f" (and {len(failures) - len(first)} more threads)" if len(failures) > len(first) else ""
        others = f"; {stopped} other thread{'s' if stopped != 1 else ''} stopped" if stopped else ""
        super().__init__("; ".join(lines) + more + others)


class Run:
    """A set of live node servers for one pathmap: start a program on them, wait, stop them.

    Made by `launch` (which owns the processes) or `attach` (nodes started elsewhere, e.g. with
    `eventspace node` on several hosts). `security`: the keys its clients speak CURVE with
    (None: the pathmap's, see `SecuritySpec.load`).

    A node that is gone (its process ended, its connection closed) ends the run at once; one
    whose connection stays open but who does not answer (paused, swapping, a busy host) is
    waited for until it has been silent for `grace` seconds (the pathmap's `liveness.grace`).
    """

    # How long `wait` and `progress` wait on a silent node before they look at the other nodes
    # (and at the processes) again; the grace is counted over consecutive silent calls.
    _PATIENCE = 1.0
    # How long a hosted call may run (if the grace is not longer) before the node is given up on.
    _CALL_TIMEOUT = 30.0

    def __init__(self, pathmap: Pathmap, run_file: RunFile, processes: dict[str, subprocess.Popen] | None = None,
                 logs: dict[str, FilePath] | None = None, security: pastset.Security | None = None):
        self.pathmap = pathmap
        self.security = security if security is not None else pathmap.security.load()
        self.grace = pathmap.liveness.grace
        self.run_file = run_file
        self.endpoints = dict(run_file.endpoints)
        self._processes = processes or {}
        self._logs = logs or {}
        self._clients: dict[str, pastset.Client] = {}
        self._silent: dict[str, float] = {}   # node -> when it stopped answering
        self._thread_node = {t.name: t.node for t in pathmap.threads}

    @property
    def name(self) -> str:
        """The run's name: its pathmap's, or `NAME-2`, ... while another run of that name is live."""
        return self.run_file.name

    @property
    def pids(self) -> dict[str, int]:
        return dict(self.run_file.pids)

    def client(self, node: str) -> pastset.Client:
        """A client of `node`'s server (kept open until the run stops)."""
        client = self._clients.get(node)
        if client is None:
            client = self._clients[node] = pastset.connect(self.endpoints[node], security=self.security)
        return client

    # -- programs ------------------------------------------------------------------------------

    def start(self, program: str, args: dict | None = None) -> None:
        """Start `program` in every application thread, on every node; returns at once."""
        for node in self._nodes_with_threads():
            self._call(node, START, program, args or {})

    def progress(self) -> dict[str, dict]:
        """What every running thread last reported with `ctx.report(...)`, by thread. The threads
        of a node that does not answer within a second are left out (see `wait` for the errors)."""
        out: dict[str, dict] = {}
        for node in self._nodes_with_threads():
            info = self._call(node, INFO, patient=True)
            if info is not None:
                out.update(info["progress"])
        return out

    def wait(self, timeout: float | None = None, poll: float = 0.1, on_poll=None) -> dict[str, object]:
        """Every thread's result once all have ended: {thread: what program(ctx) returned}.

        Raises ProgramFailed if a thread raised; NodeDied as soon as a node process ends or its
        connection closes (naming it, and its exit code if launched here); NodeNotAnswering once
        a node that keeps its connection has not answered for the run's grace (naming it);
        pastset.Timeout after `timeout` seconds. `on_poll(run)` is called every `poll` seconds
        while it waits (to show progress).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pending = set(self._nodes_with_threads())
        outcomes: dict[str, list] = {}
        while pending:
            self.check_nodes()
            for node in sorted(pending):
                joined = self._call(node, JOIN, 0, patient=True)
                if joined is not None:
                    outcomes.update(joined["outcomes"])
                    if not joined["running"]:
                        pending.discard(node)
            if pending and any(o[0] == "error" for o in outcomes.values()):
                self._stop_threads(outcomes, pending)   # the others would wait for it for ever
                break
            if not pending:
                break
            if on_poll is not None:
                on_poll(self)
            if deadline is not None and time.monotonic() >= deadline:
                raise pastset.Timeout(f"the program still runs on node(s) {', '.join(sorted(pending))} "
                                      f"after {timeout} s")
            time.sleep(poll)
        failures = {t: tuple(o[1:]) for t, o in outcomes.items() if o[0] == "error"}
        if failures:
            logs = {node: str(path) for node, path in self._logs.items()
                    if path.exists() and path.stat().st_size}
            raise ProgramFailed(failures, self._thread_node, logs,
                                stopped=len(self.pathmap.threads) - len(failures))
        return {t: o[1] for t, o in outcomes.items()}

    # Seconds the threads of a failed run are given to leave what they wait in once it is ended under them.
    _STOP_THREADS = 2.0

    def _stop_threads(self, outcomes: dict[str, list], pending: set[str]) -> None:
        """A thread failed while others run: end what they wait in (ABORT, on every node with threads),
        and take the outcomes of those that end within _STOP_THREADS seconds."""
        failed = sorted(t for t, o in outcomes.items() if o[0] == "error")
        first = outcomes[failed[0]]
        why = f"thread {failed[0]} failed ({first[1]}: {first[2]})"
        for end in (False, True):   # every node learns why before any ends what its threads wait in
            for node in self._nodes_with_threads():   # a stage one waits in may be on a node whose threads ended
                with contextlib.suppress(pastset.EventSpaceError):
                    self._call(node, ABORT, why, end)
        deadline = time.monotonic() + self._STOP_THREADS
        for node in sorted(pending):
            with contextlib.suppress(pastset.EventSpaceError):
                outcomes.update(self._call(node, JOIN, max(0.0, deadline - time.monotonic()))["outcomes"])

    def run(self, program: str, args: dict | None = None, timeout: float | None = None) -> dict[str, object]:
        """`start` then `wait`."""
        self.start(program, args)
        return self.wait(timeout)

    # -- health --------------------------------------------------------------------------------

    def dead(self) -> dict[str, int]:
        """Launched nodes whose process has ended: node -> exit code."""
        return {n: p.returncode for n, p in self._processes.items() if p.poll() is not None}

    def check_nodes(self) -> None:
        """Raise NodeDied if a launched node's process has ended."""
        dead = self.dead()
        if dead:
            node, code = sorted(dead.items())[0]
            raise NodeDied(f"node {node} died (exit code {code}){self._log_tail(node)}")

    def kill(self, node: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to a launched node's process (fault injection); under mpiexec, to its rank's
        process (on this host)."""
        process = self._processes[node]
        if list(self._processes.values()).count(process) > 1:   # one mpiexec for every node
            os.kill(self.pids[node], sig)
        else:
            process.send_signal(sig)

    def _call(self, node, name, *args, patient: bool = False):
        """One hosted call to `node`'s server. NodeDied if the node is gone; NodeNotAnswering once
        it has been silent, with its connection open, for the run's grace. A `patient` call (one
        that may be repeated: JOIN(0), INFO) returns None after _PATIENCE of silence instead, so
        that the caller can look at the other nodes meanwhile."""
        grace = min(self._PATIENCE, self.grace) if patient else self.grace
        asked = time.monotonic()
        try:
            result = self.client(node).call(name, *args, timeout=max(self._CALL_TIMEOUT, self.grace + 1),
                                            grace=grace)
        except pastset.NotAnswering:
            since = self._silent.setdefault(node, asked)
            if not patient or time.monotonic() - since >= self.grace:
                raise NodeNotAnswering(f"node {node} at {self.endpoints[node]} did not answer for {self.grace:g} s "
                                       "though its connection is open (paused, swapping or overloaded?); to wait "
                                       "longer, raise the pathmap's liveness.grace (or --grace)") from None
            return None
        except pastset.ServerGone as exc:
            self.check_nodes()
            raise NodeDied(f"node {node} at {self.endpoints[node]} is gone: {exc}") from None
        self._silent.pop(node, None)
        return result

    def _nodes_with_threads(self) -> list[str]:
        return [n.name for n in self.pathmap.nodes if self.pathmap.threads_on(n.name)]

    def _log_tail(self, node: str, lines: int = 5) -> str:
        log = self._logs.get(node)
        if log is None or not log.exists():
            return ""
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-lines:]
        return (": " + " | ".join(tail)) if tail else ""

    # -- stopping --------------------------------------------------------------------------------

    def close_clients(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every launched node (asked first, killed if it lingers) and remove the run's own files.
        Monitors attached to the run first get their final read (`RunFile.end`: at most
        runfile.FINAL_READ_GRACE seconds, nothing when none is attached; Ctrl-C cuts it short)."""
        if any(proc.poll() is None for proc in self._processes.values()):
            with contextlib.suppress(KeyboardInterrupt):
                self.run_file.end()
        for node, proc in self._processes.items():
            if proc.poll() is None:
                with contextlib.suppress(pastset.EventSpaceError):
                    self.client(node).call(STOP, timeout=1)
        self.close_clients()
        _stop_processes(self._processes, timeout)
        if self._processes:
            self.run_file.release()


@contextlib.contextmanager
def launch(pathmap: Pathmap | str | os.PathLike, *, run_dir: str | os.PathLike | None = None,
           start_timeout: float | None = None, env: dict[str, str] | None = None,
           path: Iterable[str | os.PathLike] = (), insecure: bool = False,
           grace: float | None = None, mpiexec: Sequence[str] | None = None,
           on_host: Mapping[str, Sequence[str]] | None = None, archive: str | os.PathLike | None = None,
           record: str | None = None) -> Iterator[Run]:
    """Start one node server process per pathmap node on this machine; stop them all on exit.

    Registers the run (`paths.runfile.claim`: its name is the pathmap's, or `NAME-2`, ... while
    another run of that name is live), waits until every node answers (PathsError naming a node
    that does not within `start_timeout` seconds, by default 60, or 10 per node if more, after
    stopping the others), tells each where the others listen, and publishes the run file in
    `run_dir` (default `paths.runfile.run_dir()`: $EVENTSPACE_RUN_DIR, $XDG_RUNTIME_DIR/eventspace/runs
    or ~/.eventspace/runs) that monitors find the run by. It logs one INFO record on the
    `paths.launch` logger naming the run and its run file (the `eventspace` command prints it;
    a library caller sees it with `logging.basicConfig(level=logging.INFO)`, or reads
    `run.run_file.path`). Exiting, also by an exception or Ctrl-C, stops every node and removes
    the run's own files; a node also stops by itself if the launcher dies (its stdin closes).

    Node processes import programs (`module:function`) from the launcher's working directory,
    from each directory in `path` (first), and from $PYTHONPATH. `env` adds environment variables
    for the node processes (its PYTHONPATH comes after those directories).

    Security: the nodes serve CURVE with the keys of the pathmap's `security` section, else
    with those in $EVENTSPACE_KEYS (the node processes inherit the environment); the launcher
    speaks CURVE to them with the same keys. A node whose host is not loopback is refused
    (PathsError, before anything starts) unless CURVE is on or `insecure`.

    `grace` (seconds) replaces the pathmap's `liveness.grace`, for the launcher and the nodes:
    how long a node that keeps its connection but does not answer is waited for.

    `mpiexec` (a list, maybe empty, of the MPI launcher's own arguments): start the nodes with
    `mpiexec -n N ARGS python -m paths --by-rank` instead, node i as rank i, wherever the MPI
    launcher places its ranks (paths.mpiexec says which launcher); the run is the same. Every
    node's log is then the launcher's output (one file). On Linux the MPI launcher hears SIGTERM,
    and ends its ranks, when the thread that called `launch` ends: keep the run in that thread.

    `on_host` (node -> a command prefix, e.g. `["ip", "netns", "exec", "h1"]`): start that node's
    process through the prefix; it must keep the process's stdin and stdout (the node reports
    where it listens on stdout and stops when its stdin closes) and see this machine's files
    (the node reads the pathmap snapshot in the run directory). Not with `mpiexec`.

    `archive` (a new file): every node records its trace elements into a file of its own in the run
    directory while the run goes on, and the archive is built from those files once the nodes have
    stopped, however the run ended. `record` (`last:30s`, `last:64MiB`): every node keeps a flight
    recorder's window instead, dumped into a new archive if the run ends otherwise than normally
    (and on demand: `eventspace dump`). ValueError at once for an archive that exists, or both.
    """
    if on_host and mpiexec is not None:
        raise PathsError("launch(on_host=..., mpiexec=...): the MPI launcher places the nodes itself; give one of them")
    pathmap = Pathmap.load(pathmap) if not isinstance(pathmap, Pathmap) else pathmap.validate()
    pathmap = pathmap.with_grace(grace)
    if start_timeout is None:  # 8 nodes importing numpy at once on 2 busy cores take a while
        start_timeout = max(60.0, 10.0 * len(pathmap.nodes))
    security = pathmap.security.load()
    exposed = [(n.name, problem) for n in pathmap.nodes
               if (problem := bind_problem(f"tcp://{n.host}:{n.port}", security))]
    if exposed and not insecure:
        node, problem = exposed[0]
        raise PathsError(f"node {node}: {problem} (launch(..., insecure=True))")
    if pathmap.security.keys is not None:
        # The snapshot is read from the run directory: a relative key directory must name the same one.
        pathmap = dataclasses.replace(pathmap, security=dataclasses.replace(
            pathmap.security, keys=os.path.abspath(pathmap.security.keys)))
    recording = _recording(archive, record)
    node_env = node_environment(env, path)
    source = pathmap.source if pathmap.source.startswith("<") else os.path.abspath(pathmap.source)
    run_file = runfile.claim(pathmap.name, run_dir, source=source)
    ended = ENDED_NORMALLY
    snapshot = FilePath(run_file.pathmap_file)
    logs = {n.name: run_file.log(n.name) for n in pathmap.nodes}
    processes: dict[str, subprocess.Popen] = {}
    run = None
    try:
        if recording is not None:
            node_env.update(recording.environment(run_file))
        digest = snapshots.write(pathmap, snapshot, header=f"Snapshot of pathmap {pathmap.name} ({pathmap.source}) "
                                                          f"for run {run_file.name}; written by paths.launch")
        node_command = [sys.executable, "-m", "paths", "--pathmap", str(snapshot), "--checked", digest, "--launched",
                        *(["--insecure"] if insecure else [])]
        if mpiexec is not None:
            ranks_log = run_file.log("mpiexec")
            logs = {n.name: ranks_log for n in pathmap.nodes}
            with rundir.open_new(ranks_log) as launcher_log:
                ranks = subprocess.Popen(
                    by_mpiexec.command(len(pathmap.nodes), list(mpiexec), [*node_command, "--by-rank"]),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=launcher_log, env=node_env)
            processes = {n.name: ranks for n in pathmap.nodes}
            endpoints, pids = _await_ranks(ranks, [n.name for n in pathmap.nodes], ranks_log, start_timeout)
        else:
            for node in pathmap.nodes:
                with rundir.open_new(logs[node.name]) as node_log:
                    processes[node.name] = subprocess.Popen(
                        [*(on_host or {}).get(node.name, ()), *node_command, "--node", node.name],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=node_log, env=node_env,
                    )
            endpoints = _await_endpoints(processes, logs, start_timeout)
            pids = {n: p.pid for n, p in processes.items()}
        run_file = run_file.ready(endpoints, pids, checked=digest)
        run = Run(pathmap, run_file, processes, logs, security)
        for node in endpoints:
            run.client(node).call(LINK, endpoints, timeout=10)
        renamed = f" (a run named {pathmap.name} is live already)" if run_file.name != pathmap.name else ""
        log.info("run %s%s: run file %s", run_file.name, renamed, run_file.path)
        yield run
    except BaseException as exc:
        ended = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise
    finally:
        if run is not None:
            if recording is not None:
                _tell(recording.ending, run, ended)
            run.stop()
        else:
            _stop_processes(processes, 2.0)
        run_file.release()
        run_file.drop_empty_logs(logs)
        if recording is not None and run is not None:
            _tell(recording.finish, run_file, pathmap, ended)


def _recording(archive, record):
    """What records the run (eventspace.recording.RunRecording, through the RECORDING entry point), or None."""
    if archive is None and record is None:
        return None
    from .registry import installed

    found = list(installed(RECORDING))
    if not found:
        raise PathsError(f"recording a run (--archive, --record) needs the {RECORDING} entry point; reinstall eventspace")
    return found[0].load()(archive=archive, record=record)


def _tell(step, *args) -> None:
    """Log the lines a recording's step says (a failure of its own is one line too: the run is ending)."""
    try:
        lines = step(*args)
    except Exception as exc:
        lines = [f"recording: {type(exc).__name__}: {exc}"]
    for line in lines:
        log.info("%s", line)


def node_environment(env: dict[str, str] | None = None, path: Iterable[str | os.PathLike] = ()) -> dict[str, str]:
    """The environment of a node process: this one's, plus `env`, with PYTHONPATH = the `path`
    directories, this process's working directory, then the PYTHONPATH already set (`env`'s, else
    this process's). PathsError for a `path` entry that is not a directory."""
    merged = {**os.environ, **(env or {})}
    dirs = []
    for entry in path:
        if not os.path.isdir(entry):
            raise PathsError(f"--path {os.fspath(entry)}: no such directory (it lists where node "
                             "processes import programs from)")
        dirs.append(os.path.abspath(entry))
    dirs.append(os.getcwd())
    if merged.get("PYTHONPATH"):
        dirs.append(merged["PYTHONPATH"])
    merged["PYTHONPATH"] = os.pathsep.join(dirs)
    return merged


def attach(run: str | os.PathLike | RunFile, run_dir: str | os.PathLike | None = None) -> Run:
    """A Run over nodes that are already live (a run file, or a run name in `run_dir`, default
    `paths.runfile.run_dir()`).

    RunError if the run file is missing or stale. Stopping an attached run stops nothing.
    """
    run_file = run if isinstance(run, RunFile) else RunFile.find(run, run_dir)
    # The run's keys are its pathmap's; the snapshot goes when the run ends, and without it
    # check_live tells that the run is stale.
    pathmap = run_file.pathmap() if os.path.exists(run_file.pathmap_file) else None
    security = pathmap.security.load() if pathmap is not None else None
    run_file.check_live(security=security)
    attached = Run(pathmap or run_file.pathmap(), run_file, security=security)
    for node in run_file.endpoints:
        attached.client(node).call(INFO, timeout=5)
    return attached


def _await_endpoints(processes: dict[str, subprocess.Popen], logs: dict[str, FilePath],
                     timeout: float) -> dict[str, str]:
    """Each node's endpoint, from the JSON line it prints once it serves."""
    deadline = time.monotonic() + timeout
    waiting = {p.stdout.fileno(): n for n, p in processes.items()}
    endpoints: dict[str, str] = {}
    while waiting:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            late = ", ".join(sorted(waiting.values()))
            raise PathsError(f"node{'s' if len(waiting) > 1 else ''} {late} did not come up within "
                             f"{timeout} s; the other nodes were stopped (logs: {logs[min(waiting.values())]})")
        ready, _, _ = select.select(list(waiting), [], [], min(remaining, 0.5))
        for fd in ready:
            node = waiting.pop(fd)
            line = processes[node].stdout.readline()
            try:
                endpoints[node] = json.loads(line)["endpoint"]
            except (ValueError, KeyError, TypeError):
                code = processes[node].wait(timeout=5)
                tail = [ln for ln in logs[node].read_text(errors="replace").splitlines() if ln.strip()][-3:]
                raise PathsError(f"node {node} did not start (exit code {code}): "
                                 f"{' | '.join(tail) or 'no output'}") from None
    return endpoints


def _await_ranks(ranks: subprocess.Popen, nodes: list[str], log: FilePath,
                 timeout: float) -> tuple[dict[str, str], dict[str, int]]:
    """Each node's endpoint and pid, from the JSON lines its rank prints through mpiexec (in any
    order; other lines are the launcher's own and are skipped)."""
    deadline = time.monotonic() + timeout
    endpoints: dict[str, str] = {}
    pids: dict[str, int] = {}
    fd = ranks.stdout.fileno()
    pending = b""
    while len(endpoints) < len(nodes):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            late = ", ".join(n for n in nodes if n not in endpoints)
            raise PathsError(f"node{'s' if len(nodes) - len(endpoints) > 1 else ''} {late} did not come up under "
                             f"mpiexec within {timeout} s; the other nodes were stopped (log: {log})")
        ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            code = ranks.wait(timeout=10)
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:]
            raise PathsError(f"mpiexec ended (exit code {code}) before every node served: "
                             f"{' | '.join(tail) or 'no output'} (log: {log})")
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            for said in _json_objects(line):
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    endpoints[said["node"]], pids[said["node"]] = said["endpoint"], int(said["pid"])
    return endpoints, pids


def _json_objects(line: bytes) -> Iterator[dict]:
    """The JSON objects on one line of the ranks' shared output: usually one, but a launcher may
    put two ranks' lines together (`{...}{...}`) where one wrote its newline apart."""
    text, decoder, at = line.decode(errors="replace"), json.JSONDecoder(), 0
    while (at := text.find("{", at)) >= 0:
        try:
            said, at = decoder.raw_decode(text, at)
        except ValueError:
            at += 1
            continue
        if isinstance(said, dict):
            yield said


def _stop_processes(processes: dict[str, subprocess.Popen], timeout: float) -> None:
    """Close each node's stdin (its signal to stop), wait, kill what lingers, reap everything."""
    processes = dict.fromkeys(processes.values())   # under mpiexec every node has the same one
    for proc in processes:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    deadline = time.monotonic() + timeout
    for proc in processes:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.terminate()   # what mpiexec passes on to its ranks before it exits; SIGKILL would not be
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            proc.stdout.close()
