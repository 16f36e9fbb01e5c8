"""Run files: which runs are live, where their nodes listen, and who watches them, in one per-user place."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path as FilePath
from typing import TYPE_CHECKING

import pastset

from .process import Owner, exited, refused
from .wrapper import PathsError

if TYPE_CHECKING:   # imported where used: finding a run and reading its file need no pathmap code
    from .pathmap import Pathmap

# Where run files live, in order: this variable, $XDG_RUNTIME_DIR/eventspace/runs, ~/.eventspace/runs.
RUN_DIR_ENV = "EVENTSPACE_RUN_DIR"
# Seconds a launcher whose program has ended waits, nodes still serving, for the monitors attached to
# make their final read (RunFile.end). A monitor that sees the end reads once more and detaches:
# within about a pull's time.
FINAL_READ_GRACE = 10.0


def run_dir(directory: str | os.PathLike | None = None) -> FilePath:
    """The directory of run files: `directory` if given, else $EVENTSPACE_RUN_DIR, else
    $XDG_RUNTIME_DIR/eventspace/runs, else ~/.eventspace/runs. One place per user, whatever the
    current directory, so that a monitor started anywhere finds every run."""
    if directory:
        return FilePath(directory)
    if os.environ.get(RUN_DIR_ENV):
        return FilePath(os.environ[RUN_DIR_ENV])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return FilePath(os.environ["XDG_RUNTIME_DIR"]) / "eventspace" / "runs"
    return FilePath.home() / ".eventspace" / "runs"


class RunError(pastset.PastSetError):
    """A run file is missing, unreadable, or describes a run that is no longer live."""


@dataclass(frozen=True)
class RunFile:
    """A run: its pathmap (a snapshot the launcher wrote), each node's endpoint and pid, who
    launched it and when.

    `register(name)` claims a name for a new run (atomically: two launches of one pathmap get two
    names), `ready(endpoints, pids)` publishes the nodes once they serve, and `unregister()`
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
        from . import snapshot as snapshots
        from .pathmap import Pathmap

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
        """Where the launcher keeps node `node`'s stderr (kept after the run if not empty)."""
        return self.directory / f"{self.name}.{node}.log"

    def drop_empty_logs(self, nodes) -> None:
        """Remove the logs of these nodes that are empty (one worth keeping tells why a node failed)."""
        for node in nodes:
            with contextlib.suppress(OSError):
                if self.log(node).stat().st_size == 0:
                    self.log(node).unlink()

    def as_dict(self) -> dict:
        return {"name": self.name, "pathmap": self.pathmap_name, "pathmap_file": self.pathmap_file,
                "source": self.source,
                "endpoints": dict(self.endpoints), "pids": dict(self.pids), "started": self.started,
                "owner": self.owner.as_dict() if self.owner else None, "checked": self.checked}

    def write(self, path: str | os.PathLike) -> RunFile:
        """Write this run file to `path` (replacing what is there, atomically); the copy at `path`."""
        path = FilePath(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self._data(), indent=2))
        tmp.replace(path)  # readers never see half a file
        return replace(self, path=os.fspath(path))

    def ready(self, endpoints: dict[str, str], pids: dict[str, int], checked: str = "") -> RunFile:
        """Publish the nodes of a registered run: its run file, rewritten with their endpoints and pids
        (and the digest of the checked pathmap its launcher wrote, if it did)."""
        return replace(self, endpoints=dict(endpoints), pids=dict(pids), checked=checked).write(self.path)

    def unregister(self) -> None:
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
        """A run by run-file path, or by name in `directory` (default: `run_dir()`)."""
        path = FilePath(run)
        if path.suffix != ".json" and not path.exists():
            path = run_dir(directory) / f"{run}.json"
        return cls.read(path)

    def check_live(self, timeout: float = 2.0, security: pastset.Security | None = None) -> RunFile:
        """Self if every node answers; RunError if the run is still starting, its launcher is gone, or
        nodes do not answer (naming them).

        `security`: the keys to speak with (None: the process's, $EVENTSPACE_KEYS). A live node
        that refuses them raises pastset.Refused: the run is live, this process lacks its keys.
        """
        age = time.time() - self.started
        if self.owner is not None and self.owner.alive() is False:
            raise RunError(f"run file {self.path} is stale: its launcher (pid {self.owner.pid}) is gone "
                           f"(started {age:.0f} s ago); `eventspace runs` removes it")
        if self.starting:
            raise RunError(f"run {self.name} is still starting (registered {age:.0f} s ago); try again "
                           "in a moment")
        dead = [node for node, endpoint in self.endpoints.items() if not _answers(endpoint, timeout, security)]
        if dead:
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
        with contextlib.suppress(FileExistsError):
            _create_exclusive(self.ending_marker, f"{time.time()}\n")
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
        directory = self.monitor_dir
        directory.mkdir(parents=True, exist_ok=True)
        owner = Owner.here()
        entry = MonitorEntry(kind, owner, time.time(), "")
        data = json.dumps({"kind": kind, "owner": owner.as_dict(), "started": entry.started})
        path = next(p for n in itertools.count(1) if _create(p := directory / f"{owner.pid}-{n}.json", data))
        return replace(entry, path=os.fspath(path))

    def monitors(self) -> list[MonitorEntry]:
        """The monitors attached now; entries of processes that are gone are removed."""
        found = []
        with contextlib.suppress(FileNotFoundError):
            for path in sorted(self.monitor_dir.glob("*.json")):
                try:
                    data = json.loads(path.read_text())
                    entry = MonitorEntry(str(data["kind"]), Owner.from_dict(data["owner"]),
                                         float(data["started"]), os.fspath(path))
                except FileNotFoundError:
                    continue
                except (OSError, ValueError, KeyError, TypeError, AttributeError):
                    entry = None
                if entry is None or entry.owner.alive() is False:
                    path.unlink(missing_ok=True)
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


def register(name: str, directory: str | os.PathLike | None = None, source: str = "") -> RunFile:
    """Claim a run name for this process (the launcher) and write its run file, still without nodes.

    The name is `name`, or `name-2`, `name-3`, ... if a live run holds it: the claim is atomic (a
    lock on the directory, and a run file that appears whole or not at all), so two launches at
    the same moment never share a name. A run file whose launcher is gone is replaced. Returns the
    RunFile; its `pathmap_file` is where the launcher writes the pathmap's snapshot, and `ready()`
    publishes the nodes.
    """
    directory = run_dir(directory)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    owner = Owner.here()
    with _locked(directory):
        for n in itertools.count(1):
            candidate = name if n == 1 else f"{name}-{n}"
            path = directory / f"{candidate}.json"
            run = RunFile(os.fspath((directory / f"{candidate}.pathmap.yaml").resolve()), {}, {}, time.time(),
                          os.fspath(path), source, owner, name)
            text = json.dumps(run._data(), indent=2)
            created = _create(path, text)
            if not created and _stale(path):
                with contextlib.suppress(RunError):
                    _remove_run(RunFile.read(path))
                path.unlink(missing_ok=True)   # also an unreadable one: nobody can use it
                created = _create(path, text)
            if created:
                _clear_monitors(run)  # of an earlier run of that name
                run.ending_marker.unlink(missing_ok=True)
                return run


def live_runs(directory: str | os.PathLike | None = None) -> list[RunFile]:
    """Every run registered in `directory` (default `run_dir()`) whose launcher has not gone, by start
    time; the run files of launchers that are gone are removed first (see `prune`)."""
    prune(directory)
    return sorted(_read_all(run_dir(directory)), key=lambda r: r.started)


def prune(directory: str | os.PathLike | None = None) -> list[RunFile]:
    """Remove the runs whose launcher is gone from this host (run file, snapshot, monitor entries);
    the runs removed. Run files of other hosts, and of older versions without a launcher, stay."""
    directory = run_dir(directory)
    candidates = [r for r in _read_all(directory) if r.owner is not None and r.owner.alive() is False]
    removed = []
    if candidates:
        with _locked(directory):  # a launcher may be taking a stale name over right now
            for run in candidates:
                if _stale(FilePath(run.path)):
                    _remove_run(run)
                    removed.append(run)
    return removed


def _read_all(directory: FilePath) -> list[RunFile]:
    runs = []
    with contextlib.suppress(FileNotFoundError):
        for path in directory.glob("*.json"):
            with contextlib.suppress(RunError):
                runs.append(RunFile.read(path))
    return runs


def _stale(path: FilePath) -> bool:
    """True if the run file at `path` belongs to a launcher that is gone from this host, or is
    unreadable (no launcher can use it)."""
    try:
        run = RunFile.read(path)
    except RunError:
        return path.exists()
    return run.owner is not None and run.owner.alive() is False


def _remove_run(run: RunFile) -> None:
    FilePath(run.path).unlink(missing_ok=True)
    run.ending_marker.unlink(missing_ok=True)
    from . import snapshot as snapshots

    snapshots.remove(run.pathmap_file)
    _clear_monitors(run)
    run.drop_empty_logs(run.pids)


def _clear_monitors(run: RunFile) -> None:
    shutil.rmtree(run.monitor_dir, ignore_errors=True)


def _create_exclusive(path: FilePath, text: str) -> None:
    """Create `path` holding `text`; FileExistsError if anything (a link too) is there already."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _create(path: FilePath, text: str) -> bool:
    """Create `path` holding `text` if nothing is there: True if created. Readers see the whole
    text or no file (a hard link of a finished file: atomic, and fails if the name exists)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    tmp.write_text(text)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


@contextlib.contextmanager
def _locked(directory: FilePath) -> Iterator[None]:
    """Hold the directory's lock (between this host's launchers: registering and pruning)."""
    with open(directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


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
    (at most `timeout` seconds each).
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
    return "every node is gone"
