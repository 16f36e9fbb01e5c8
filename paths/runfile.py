"""Run files: which runs are live, where their nodes listen, and who watches them, in one per-user place."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path as FilePath
from urllib.parse import quote

import pastset

from . import rundir
from . import snapshot as snapshots
from .errors import PathsError
from .pathmap import Pathmap
from .process import Owner, exited, refused
from .rundir import RunError, run_dir

# Seconds a launcher whose program has ended waits, nodes still serving, for the monitors attached to
# make their final read (RunFile.end). A monitor that sees the end reads once more and detaches:
# within about a pull's time.
FINAL_READ_GRACE = 10.0


@dataclass(frozen=True)
class RunFile:
    """A run: its pathmap (a snapshot the launcher wrote), each node's endpoint and pid, who
    launched it and when.

    `claim(name)` claims a name for a new run (atomically: two launches of one pathmap get two
    names), `ready(endpoints, pids)` publishes the nodes once they serve, and `release()`
    removes the run's own files and nothing else. `RunFile.find(name_or_path)` reads one,
    `live_runs()` lists them, `check_live()` tells a stale one apart.

    A run file without endpoints belongs to a run that is still starting.
    """

    pathmap_file: str
    endpoints: dict[str, str]
    pids: dict[str, int]
    started: float
    path: str = ""
    source: str = ""                 # the pathmap file the run was launched from, as the launcher named it
    owner: Owner | None = None       # the launcher (None in run files written by older versions)
    pathmap_name: str = ""           # the pathmap's name (the run's name, unless another run held it)
    checked: str = ""                # the digest of the checked pathmap beside the snapshot (paths.snapshot)

    @property
    def name(self) -> str:
        return FilePath(self.path).stem

    @property
    def directory(self) -> FilePath:
        return FilePath(self.path).parent

    @property
    def starting(self) -> bool:
        return not self.endpoints

    def pathmap(self) -> Pathmap:
        """The run's pathmap: the checked one its launcher kept beside the snapshot, if it is this
        user's own file and is the one the launcher wrote (seconds faster for a large pathmap),
        else the snapshot, read and checked again."""
        if self.checked:
            with contextlib.suppress(PathsError):
                return snapshots.load(self.pathmap_file, self.checked, own=True)
        try:
            return Pathmap.load(self.pathmap_file)
        except FileNotFoundError:
            if not os.path.exists(self.path):
                raise RunError(f"run {self.name} has ended: its launcher removed its files") from None
            raise RunError(f"run {self.name}: its pathmap snapshot {self.pathmap_file} is missing; the run file "
                           "is stale: `eventspace runs` lists the live runs") from None

    def log(self, node: str) -> FilePath:
        """Where the launcher keeps node `node`'s stderr (kept after the run if not empty): a file of
        the run directory, whatever the node's name (a `/` in it is quoted)."""
        return self.directory / f"{self.name}.{quote(node, safe='')}.log"

    def drop_empty_logs(self, nodes) -> None:
        """Remove the logs of these nodes that are empty (one worth keeping tells why a node failed),
        if they are this user's files."""
        for node in nodes:
            log = self.log(node)
            with contextlib.suppress(OSError):
                if rundir.own_file(log) and os.lstat(log).st_size == 0:
                    log.unlink()

    def as_dict(self) -> dict:
        return {"name": self.name, "pathmap": self.pathmap_name, "pathmap_file": self.pathmap_file,
                "source": self.source,
                "endpoints": dict(self.endpoints), "pids": dict(self.pids), "started": self.started,
                "owner": self.owner.as_dict() if self.owner else None, "checked": self.checked}

    def write(self, path: str | os.PathLike) -> RunFile:
        """Write this run file to `path` (replacing what is there, atomically, a link included:
        `paths.rundir.replace`); the copy at `path`."""
        rundir.replace(path, json.dumps(self._data(), indent=2).encode())
        return replace(self, path=os.fspath(path))

    def ready(self, endpoints: dict[str, str], pids: dict[str, int], checked: str = "") -> RunFile:
        """Publish the nodes of a registered run: its run file, rewritten with their endpoints and pids
        (and the digest of the checked pathmap its launcher wrote, if it did)."""
        return replace(self, endpoints=dict(endpoints), pids=dict(pids), checked=checked).write(self.path)

    def release(self) -> None:
        """Remove this run's run file, pathmap snapshot and monitor entries, if they are still its own
        (a file another launcher has since registered under the name is left alone)."""
        try:
            current = RunFile.read(self.path)
        except RunError:
            current = None
        if current is not None and current.owner != self.owner:
            return
        _remove_run(self)

    def _data(self) -> dict:
        data = self.as_dict()
        del data["name"]
        return data

    @classmethod
    def read(cls, path: str | os.PathLike) -> RunFile:
        path = FilePath(path)
        try:
            data = json.loads(path.read_text())
            run = cls(str(data["pathmap_file"]), dict(data["endpoints"]), dict(data["pids"]),
                      float(data["started"]), os.fspath(path), str(data.get("source", "")),
                      Owner.from_dict(data.get("owner")), str(data.get("pathmap", "")), str(data.get("checked", "")))
        except FileNotFoundError:
            raise RunError(f"no run file {path}: is the run live? start one with `eventspace run`, "
                           "list the live ones with `eventspace runs`, or pass the run file the launcher "
                           "printed") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RunError(f"run file {path} is unreadable ({type(exc).__name__}: {exc}); "
                           "remove it and start the run again") from None
        return run

    @classmethod
    def find(cls, run: str | os.PathLike, directory: str | os.PathLike | None = None) -> RunFile:
        """A run by run-file path, or by name in `directory` (default: `run_dir()`). RunError if the
        directory cannot be trusted (`paths.rundir.prepare`), or the file named there is not this
        user's (another user's, or a link)."""
        path = FilePath(run)
        if path.suffix != ".json" and not path.exists():
            path = (rundir.prepare(directory, create=False) or run_dir(directory)) / f"{run}.json"
            if path.exists() and not rundir.own_file(path):
                raise RunError(f"run file {path} belongs to another user (or is a link): not read")
        return cls.read(path)

    def check_live(self, timeout: float = 2.0, security: pastset.Security | None = None) -> RunFile:
        """Self while the run is live; RunError if it is still starting, its launcher is gone, or
        every node is gone (`run_ended`'s test). A node that does not answer but is not gone (paused,
        hung in a call that holds its GIL, overloaded) leaves the run live: it is what a monitor
        attaching now is to name, not a reason to refuse it.

        `security`: the keys to speak with (None: the process's, $EVENTSPACE_KEYS). A live node
        that refuses them raises pastset.Refused: the run is live, this process lacks its keys.
        """
        age = time.time() - self.started
        if self.owner is not None and self.owner.alive() is False:
            done = "its run file was removed" if _remove_if_stale(self) else "`eventspace runs` removes its run file"
            raise RunError(f"run {self.name} ({self.path}) has ended: its launcher (pid {self.owner.pid}) is gone "
                           f"(started {age:.0f} s ago); {done}")
        if self.starting:
            raise RunError(f"run {self.name} is still starting (registered {age:.0f} s ago); try again "
                           "in a moment")
        dead = [node for node, endpoint in self.endpoints.items() if not _answers(endpoint, timeout, security)]
        if dead and run_ended(self):
            raise RunError(f"run file {self.path} is stale: node{'s' if len(dead) > 1 else ''} "
                           f"{', '.join(dead)} do{'es' if len(dead) == 1 else ''} not answer (started "
                           f"{age:.0f} s ago); the run has ended: remove the file or start a new run")
        return self

    # -- the end, and the monitors' final reads ---------------------------------------------------

    @property
    def ending_marker(self) -> FilePath:
        """The file whose presence says the run's program has ended and its nodes wait for the
        monitors' final reads (`end`)."""
        return self.directory / f"{self.name}.ending"

    def ending(self) -> bool:
        """Whether the run's program has ended and its nodes wait, still serving, for the monitors
        attached to make their final read (one stat)."""
        return os.path.lexists(self.ending_marker)

    def end(self, grace: float = FINAL_READ_GRACE) -> list[MonitorEntry]:
        """Say that the program has ended (the nodes still serve), and wait up to `grace` seconds
        for every monitor attached to make its final read and detach: the launcher calls it
        before it stops the nodes, so that what the collectors wrote last is read. Returns at once
        when no monitor is attached; the monitors that did not detach in time."""
        waiting = self.monitors()
        if not waiting:
            return []
        rundir.create(self.ending_marker, f"{time.time()}\n".encode())
        deadline = time.monotonic() + grace
        while waiting and time.monotonic() < deadline:
            time.sleep(0.02)
            waiting = self.monitors()
        return waiting

    # -- monitors --------------------------------------------------------------------------------

    @property
    def monitor_dir(self) -> FilePath:
        return self.directory / f"{self.name}.monitors"

    def attach_monitor(self, kind: str) -> MonitorEntry:
        """Record that a monitor of `kind` (e.g. "heartbeat") in this process watches the run, until
        the entry is closed or the process ends (an entry whose process is gone is pruned)."""
        problem = rundir.trust_problem(self.directory)
        if problem:
            raise RunError(f"run directory {self.directory} {problem}: no monitor entry is written there")
        directory = self.monitor_dir
        rundir.make_dir(directory)
        owner = Owner.here()
        entry = MonitorEntry(kind, owner, time.time(), "")
        data = json.dumps({"kind": kind, "owner": owner.as_dict(), "started": entry.started}).encode()
        path = next(p for n in itertools.count(1) if rundir.create(p := directory / f"{owner.pid}-{n}.json", data))
        return replace(entry, path=os.fspath(path))

    def monitors(self) -> list[MonitorEntry]:
        """The monitors attached now; entries of processes that are gone are removed."""
        found = []
        with contextlib.suppress(FileNotFoundError):
            for path in sorted(self.monitor_dir.glob("*.json")):
                if not rundir.own_file(path):
                    continue
                try:
                    data = json.loads(path.read_text())
                    entry = MonitorEntry(str(data["kind"]), Owner.from_dict(data["owner"]),
                                         float(data["started"]), os.fspath(path))
                except FileNotFoundError:
                    continue
                except (OSError, ValueError, KeyError, TypeError, AttributeError):
                    entry = None
                if entry is None or entry.owner.alive() is False:
                    rundir.remove(path)
                else:
                    found.append(entry)
        return found


@dataclass(frozen=True)
class MonitorEntry:
    """One monitor attached to a run: what it is, its process, since when (seconds since the epoch)."""

    kind: str
    owner: Owner
    started: float
    path: str = field(default="", compare=False)

    def close(self) -> None:
        """Remove the entry (idempotent)."""
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def claim(name: str, directory: str | os.PathLike | None = None, source: str = "") -> RunFile:
    """Claim a run name for this process (the launcher) and write its run file, still without nodes.

    The name is `name`, or `name-2`, `name-3`, ... if a live run holds it: the claim is atomic (a
    lock on the directory, and a run file that appears whole or not at all), so two launches at
    the same moment never share a name. A run file whose launcher is gone is replaced; a name
    another user's file holds is passed over. Returns the RunFile; its `pathmap_file` is where the
    launcher writes the pathmap's snapshot, and `ready()` publishes the nodes.

    RunError if the run directory cannot be made or trusted (`paths.rundir.prepare`).
    """
    directory = rundir.prepare(directory)
    owner = Owner.here()
    with _locked(directory):
        for n in itertools.count(1):
            candidate = name if n == 1 else f"{name}-{n}"
            path = directory / f"{candidate}.json"
            run = RunFile(os.fspath(_snapshot(directory.resolve(), candidate)), {}, {}, time.time(),
                          os.fspath(path), source, owner, name)
            text = json.dumps(run._data(), indent=2).encode()
            created = rundir.create(path, text)
            if not created and _stale(path):
                with contextlib.suppress(RunError):
                    _remove_run(RunFile.read(path))
                rundir.remove(path)   # also an unreadable one: nobody can use it
                created = rundir.create(path, text)
            if created:
                _clear_monitors(run)  # of an earlier run of that name
                rundir.remove(run.ending_marker)
                return run


def live_runs(directory: str | os.PathLike | None = None) -> list[RunFile]:
    """Every run registered in `directory` (default `run_dir()`) by this user whose launcher has not
    gone, by start time; the run files of launchers that are gone are removed first (see `prune`).
    RunError if the directory cannot be trusted."""
    prune(directory)
    found = rundir.prepare(directory, create=False)
    return sorted(_read_all(found), key=lambda r: r.started) if found is not None else []


def prune(directory: str | os.PathLike | None = None) -> list[RunFile]:
    """Remove the runs of this user whose launcher is gone from this host (run file, snapshot, monitor
    entries, empty logs); the runs removed. Run files of other hosts, of older versions without a
    launcher, and of other users stay. RunError if the directory cannot be trusted."""
    found = rundir.prepare(directory, create=False)
    if found is None:
        return []
    candidates = [r for r in _read_all(found) if r.owner is not None and r.owner.alive() is False]
    return [run for run in candidates if _remove_if_stale(run)]


def remove_ended(name: str, since: float, wait: float = 5.0,
                 directory: str | os.PathLike | None = None) -> list[RunFile]:
    """Remove the runs that asked for the name `name` (named `name`, or `name-N`) and registered at
    `since` (seconds since the epoch) or later, once their launchers are gone from this host,
    waiting up to `wait` seconds for those still ending; the runs removed. For a process that
    outlives the launcher its run's file names (`eventspace mpirun`, whose job's rank 0 registered
    the run), once the job has ended: however it ended. RunError if the directory cannot be trusted."""
    deadline = time.monotonic() + wait
    removed = []
    while True:
        found = rundir.prepare(directory, create=False)
        ours = [r for r in (_read_all(found) if found is not None else [])
                if r.pathmap_name == name and r.started >= since and r.owner is not None]
        removed += [r for r in ours if r.owner.alive() is False and _remove_if_stale(r)]
        if all(r in removed for r in ours) or time.monotonic() >= deadline:
            return removed
        time.sleep(0.05)


def _read_all(directory: FilePath) -> list[RunFile]:
    """The run files of this user in `directory` that can be read."""
    runs = []
    with contextlib.suppress(FileNotFoundError):
        for path in directory.glob("*.json"):
            if rundir.own_file(path):
                with contextlib.suppress(RunError):
                    runs.append(RunFile.read(path))
    return runs


def _snapshot(directory: FilePath, name: str) -> FilePath:
    """Where the launcher of run `name` writes its pathmap snapshot (paths.snapshot)."""
    return directory / f"{name}.pathmap.yaml"


def _stale(path: FilePath) -> bool:
    """True if the run file at `path` is this user's and belongs to a launcher that is gone from
    this host, or is unreadable (no launcher can use it)."""
    if not rundir.own_file(path):
        return False
    try:
        run = RunFile.read(path)
    except RunError:
        return True
    return run.owner is not None and run.owner.alive() is False


def _remove_if_stale(run: RunFile) -> bool:
    """Remove `run` if its run file is still there and stale (`_stale`), and its directory can be
    trusted; whether it was removed. Under the directory's lock: a launcher may be taking the name
    over right now."""
    directory = run.directory
    if rundir.trust_problem(directory):
        return False
    with _locked(directory):
        if not _stale(FilePath(run.path)):
            return False
        _remove_run(run)
    return True


def _remove_run(run: RunFile) -> None:
    """Remove the files of `run` in its run directory, by the names the registry gives them (never
    a path a run file names), and only this user's."""
    rundir.remove(run.path)   # where the file was found, not what it says
    rundir.remove(run.ending_marker)
    snapshots.remove(_snapshot(run.directory, run.name))
    _clear_monitors(run)
    run.drop_empty_logs(run.pids)


def _clear_monitors(run: RunFile) -> None:
    rundir.remove_dir(run.monitor_dir)


@contextlib.contextmanager
def _locked(directory: FilePath) -> Iterator[None]:
    """Hold the directory's lock (between this host's launchers: registering and pruning)."""
    lock = directory / ".lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise RunError(f"cannot open the run directory's lock {lock}: {exc.strerror} (a link there is not "
                       "followed); remove it") from None
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise RunError(f"the run directory's lock {lock} belongs to another user; remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _answers(endpoint: str, timeout: float, security: pastset.Security | None) -> bool:
    try:
        with pastset.connect(endpoint, timeout=timeout, security=security):
            return True
    except pastset.Refused:
        raise
    except pastset.PastSetError:
        return False


def run_ended(run: RunFile, timeout: float = 0.5) -> str | None:
    """Why the run that `run` describes has ended, or None while it has not.

    The one test every monitor uses. A run has ended when its launcher removed its run file
    (or a new run replaced it), or when every node is gone: its process has exited (for nodes
    on this host) or nothing listens at its endpoint any more (connection refused). A node that
    merely does not answer (paused, overloaded, behind a slow network) has not ended the run.
    Costs a file read and, while the file stays, one TCP connect to each node until one accepts
    (at most `timeout` seconds each). A run whose nodes and launcher are all gone (killed, or ended
    by MPI's abort) leaves a run file nobody else removes: it is removed here, and the answer says so.
    """
    if run.path:
        if not os.path.exists(run.path):
            return "its launcher removed the run file"
        try:
            current = RunFile.read(run.path)
        except RunError:
            current = run  # caught while being written: the nodes tell
        if (current.started, current.pids) != (run.started, run.pids):
            return "its run file now describes another run"
    for node, endpoint in run.endpoints.items():
        if not (exited(endpoint, run.pids.get(node)) or refused(endpoint, timeout)):
            return None
    if run.path and run.owner is not None and run.owner.alive() is False and _remove_if_stale(run):
        return "every node is gone, and its launcher: its run file was removed"
    return "every node is gone"
