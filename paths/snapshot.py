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

from . import rundir
from .document import Origin
from .errors import PathsError
from .pathmap import Pathmap


def checked_file(snapshot: str | os.PathLike) -> FilePath:
    """Where the checked pathmap of the YAML snapshot at `snapshot` is kept."""
    return FilePath(f"{os.fspath(snapshot)}.checked")


def write(pathmap: Pathmap, snapshot: str | os.PathLike, header: str) -> str:
    """Write `pathmap` (validated) as the YAML snapshot at `snapshot`, and its checked form beside it,
    each replacing what is there, never written through a link (`paths.rundir.replace`: readable by
    this user alone); returns the checked file's digest, for the nodes' command line."""
    rundir.replace(snapshot, pathmap.dumps(header=header).encode())
    # Without the line of every key (a node's problems name keys, not lines): 20 MB less per node.
    checked = replace(pathmap, origin=Origin(pathmap.origin.source))
    checked.collector_points()  # found here, once for every node: it travels in the pickle
    data = pickle.dumps(checked, protocol=pickle.HIGHEST_PROTOCOL)
    rundir.replace(checked_file(snapshot), data)
    return hashlib.sha256(data).hexdigest()


def load(snapshot: str | os.PathLike, digest: str, own: bool = False) -> Pathmap:
    """The checked pathmap kept beside the snapshot at `snapshot`, if its sha256 is `digest`;
    PathsError if it is missing or is not the file the launcher wrote. With `own` (a digest read
    from a file, not given by the launcher itself), only if the file and its directory belong to
    this user, nobody else may write the file, and its directory may be trusted
    (`paths.rundir.trust_problem`): the same trust as the user's own code."""
    path = checked_file(snapshot)
    try:
        if own and (not rundir.own_file(path) or path.stat().st_mode & 0o022 or rundir.trust_problem(path.parent)):
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
    """Remove the snapshot at `snapshot` and its checked pathmap, if they are this user's."""
    for done in (snapshot, checked_file(snapshot)):
        rundir.remove(done)
