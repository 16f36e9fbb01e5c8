"""A launched run's pathmap snapshot: the YAML that anyone can read and check, and beside it the
checked pathmap, which the run's node processes load instead of parsing and checking the YAML
again (3.7 s of CPU per node for a 64-node, 19,601-collector layout: minutes on two cores).

The checked file is a pickle, so it is only ever loaded with the sha256 digest the launcher gave
the node on its command line: a file changed after the launcher wrote it is refused, not loaded.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from dataclasses import replace
from pathlib import Path as FilePath

from .document import Origin
from .pathmap import Pathmap
from .wrapper import PathsError


def checked_file(snapshot: str | os.PathLike) -> FilePath:
    """Where the checked pathmap of the YAML snapshot at `snapshot` is kept."""
    return FilePath(f"{os.fspath(snapshot)}.checked")


def write(pathmap: Pathmap, snapshot: str | os.PathLike, header: str) -> str:
    """Write `pathmap` (validated) as the YAML snapshot at `snapshot`, and its checked form beside it
    (readable by this user alone); returns the checked file's digest, for the nodes' command line."""
    FilePath(snapshot).write_text(pathmap.dumps(header=header))
    # Without the line of every key (a node's problems name keys, not lines): 20 MB less per node.
    checked = replace(pathmap, origin=Origin(pathmap.origin.source))
    checked.collector_points()  # found here, once for every node: it travels in the pickle
    data = pickle.dumps(checked, protocol=pickle.HIGHEST_PROTOCOL)
    target = checked_file(snapshot)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        out.write(data)
    tmp.replace(target)
    return hashlib.sha256(data).hexdigest()


def load(snapshot: str | os.PathLike, digest: str, own: bool = False) -> Pathmap:
    """The checked pathmap kept beside the snapshot at `snapshot`, if its sha256 is `digest`;
    PathsError if it is missing or is not the file the launcher wrote. With `own` (a digest read
    from a file, not given by the launcher itself), only if the file and its directory belong to
    this user and nobody else may write them: the same trust as the user's own code."""
    path = checked_file(snapshot)
    try:
        if own:
            for where in (path, path.parent):
                status = where.stat()
                if status.st_uid != os.getuid() or status.st_mode & 0o022:
                    raise PathsError(f"the checked pathmap {path} is not this user's alone: not loaded")
        data = path.read_bytes()
    except OSError as exc:
        raise PathsError(f"cannot read the checked pathmap {path}: {exc.strerror} (the run's launcher writes "
                         "it; start the node with --pathmap alone to read the YAML snapshot)") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise PathsError(f"the checked pathmap {path} is not the one its launcher wrote (its digest differs): "
                         "refused; relaunch the run")
    try:
        pathmap = pickle.loads(data)
    except Exception as exc:  # written by another version of EventSpace: its classes differ
        raise PathsError(f"cannot load the checked pathmap {path} ({type(exc).__name__}: {exc}); "
                         "relaunch the run") from None
    if not isinstance(pathmap, Pathmap):
        raise PathsError(f"the checked pathmap {path} holds no pathmap")
    return pathmap


def remove(snapshot: str | os.PathLike) -> None:
    """Remove the snapshot at `snapshot` and its checked pathmap."""
    for done in (FilePath(snapshot), checked_file(snapshot)):
        done.unlink(missing_ok=True)
