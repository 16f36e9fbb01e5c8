"""Run files: where a live run's nodes listen, so that monitors and tools can find it."""

from __future__ import annotations

import json
import os
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
