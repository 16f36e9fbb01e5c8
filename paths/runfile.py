"""Run files: where a live run's nodes listen, so that monitors and tools can find it."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path as FilePath

import pastset

from .pathmap import Pathmap

DEFAULT_DIR = FilePath(".eventspace") / "runs"


class RunError(pastset.PastSetError):
    """A run file is missing, unreadable, or describes a run that is no longer live."""


@dataclass(frozen=True)
class RunFile:
    """A live run: its pathmap (a snapshot the launcher wrote), each node's endpoint and pid.

    Written by `paths.launch` to `.eventspace/runs/<pathmap name>.json` (removed on a clean
    stop). `RunFile.find(name_or_path)` reads one; `check_live()` tells a stale one apart.
    """

    pathmap_file: str
    endpoints: dict[str, str]
    pids: dict[str, int]
    started: float
    path: str = ""

    @property
    def name(self) -> str:
        return FilePath(self.path).stem

    def pathmap(self) -> Pathmap:
        return Pathmap.load(self.pathmap_file)

    def write(self, path: str | os.PathLike) -> RunFile:
        path = FilePath(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in asdict(self).items() if k != "path"}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)  # readers never see half a file
        return RunFile(**data, path=os.fspath(path))

    @classmethod
    def read(cls, path: str | os.PathLike) -> RunFile:
        path = FilePath(path)
        try:
            data = json.loads(path.read_text())
            run = cls(str(data["pathmap_file"]), dict(data["endpoints"]), dict(data["pids"]),
                      float(data["started"]), os.fspath(path))
        except FileNotFoundError:
            raise RunError(f"no run file {path}: is the run live? start one with `eventspace run`, "
                           "or pass the run file the launcher printed") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RunError(f"run file {path} is unreadable ({type(exc).__name__}: {exc}); "
                           "remove it and start the run again") from None
        return run

    @classmethod
    def find(cls, run: str | os.PathLike, run_dir: str | os.PathLike | None = None) -> RunFile:
        """A run by file path, or by pathmap name in `run_dir` (default .eventspace/runs)."""
        path = FilePath(run)
        if path.suffix != ".json" and not path.exists():
            path = FilePath(run_dir or DEFAULT_DIR) / f"{run}.json"
        return cls.read(path)

    def check_live(self, timeout: float = 2.0, security: pastset.Security | None = None) -> RunFile:
        """Self if every node answers; RunError naming the nodes that do not (a stale run file).

        `security`: the keys to speak with (None: the process's, $EVENTSPACE_KEYS). A live node
        that refuses them raises pastset.Refused: the run is live, this process lacks its keys.
        """
        dead = [node for node, endpoint in self.endpoints.items() if not _answers(endpoint, timeout, security)]
        if dead:
            age = time.time() - self.started
            raise RunError(f"run file {self.path} is stale: node{'s' if len(dead) > 1 else ''} "
                           f"{', '.join(dead)} do{'es' if len(dead) == 1 else ''} not answer (started "
                           f"{age:.0f} s ago); the run has ended: remove the file or start a new run")
        return self


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
        if not (_exited(endpoint, run.pids.get(node)) or _refused(endpoint, timeout)):
            return None
    return "every node is gone"


def _exited(endpoint: str, pid: int | None) -> bool:
    """Whether a node on this host (a loopback endpoint) has no process any more."""
    host = endpoint.partition("://")[2].rpartition(":")[0].strip("[]")
    if pid is None or not (host == "localhost" or host == "::1" or host.startswith("127.")):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # another user's process: the socket tells
    return False


def _refused(endpoint: str, timeout: float) -> bool:
    """Whether nothing listens at a tcp:// or ipc:// endpoint: a stopped (paused) process still
    accepts connections (the kernel does), a process that exited refuses them."""
    scheme, _, address = endpoint.partition("://")
    try:
        if scheme == "tcp":
            host, _, port = address.rpartition(":")
            probe = socket.create_connection((host.strip("[]"), int(port)), timeout)
        elif scheme == "ipc":
            probe = socket.socket(socket.AF_UNIX)
            probe.settimeout(timeout)
            probe.connect(address)
        else:
            return False
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    except (OSError, ValueError):
        return False  # unreachable or slow: not known to be gone
    probe.close()
    return False
