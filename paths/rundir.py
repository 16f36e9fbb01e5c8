"""The run directory: where run files live, trusted only if nobody else may change what is in it, and
the one way the registry writes and removes files there (never through a link, never another user's).

Every file the registry writes appears whole under its name: it is written to a new file of a
random name in the same directory (created with O_EXCL|O_NOFOLLOW, readable by this user alone) and
then renamed over the name, or linked to it if the name must be new (paths.atomicfile). A rename
replaces whatever is at the name, a planted link included, and never writes through it. Removal takes names the
registry derives itself (paths.runfile), and removes only this user's files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path as FilePath
from typing import BinaryIO

import pastset

from .atomicfile import PRIVATE, fresh, write_atomically

# Where run files live, in order: this variable, $XDG_RUNTIME_DIR/eventspace/runs, ~/.eventspace/runs.
RUN_DIR_ENV = "EVENTSPACE_RUN_DIR"


class RunError(pastset.PastSetError):
    """A run file is missing, unreadable, or describes a run that is no longer live; or the run
    directory cannot be trusted or made."""


def run_dir(directory: str | os.PathLike | None = None) -> FilePath:
    """The directory of run files: `directory` if given, else $EVENTSPACE_RUN_DIR, else
    $XDG_RUNTIME_DIR/eventspace/runs, else ~/.eventspace/runs. One place per user, whatever the
    current directory, so that a monitor started anywhere finds every run."""
    return _located(directory)[0]


def _located(directory) -> tuple[FilePath, FilePath]:
    """(the run directory, the directory above it that must exist already: the one named by the
    user or the environment)."""
    given = directory or os.environ.get(RUN_DIR_ENV)
    if given:
        path = FilePath(given).absolute()
        return path, path.parent
    if os.environ.get("XDG_RUNTIME_DIR"):
        base = FilePath(os.environ["XDG_RUNTIME_DIR"])
        return base / "eventspace" / "runs", base
    base = FilePath.home()
    return base / ".eventspace" / "runs", base


def prepare(directory: str | os.PathLike | None = None, create: bool = True) -> FilePath | None:
    """The run directory (see `run_dir`), checked before anything in it is trusted.

    With `create`, the levels missing below its base (the directory the user or the environment
    named: $XDG_RUNTIME_DIR, $HOME, or the parent of the one given) are made, for this user alone;
    a base that does not exist is refused. Without, None if the directory does not exist.
    RunError if it cannot be made, or if others may write in it (see `trust_problem`).
    """
    path, base = _located(directory)
    if not path.is_dir():
        if not create:
            return None
        if not base.is_dir():
            raise RunError(f"run directory {path} is refused: {base} does not exist (is $HOME or $XDG_RUNTIME_DIR "
                           "right?), and only the levels below it are made; set $EVENTSPACE_RUN_DIR or --run-dir "
                           "to a directory of yours")
        missing = [level for level in (path, *path.parents) if level != base and base in level.parents]
        try:
            for level in reversed(missing):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(level, 0o700)
        except OSError as exc:
            raise RunError(f"cannot make the run directory {path}: {exc.strerror}; set $EVENTSPACE_RUN_DIR "
                           "or --run-dir to a directory of yours") from None
    problem = trust_problem(path)
    if problem:
        raise RunError(f"run directory {path} {problem}: whoever may write there could make launchers write "
                       f"or remove files of yours; make it yours alone (chmod 700 {path}), or shared but "
                       f"sticky and yours (chmod 1777), or set $EVENTSPACE_RUN_DIR or --run-dir to another")
    return path


def trust_problem(directory: str | os.PathLike) -> str | None:
    """Why nobody should trust what is in `directory` (None if it may be trusted): it is not a
    directory, it belongs to another user (root excepted), or others may write in it and it is not
    both sticky and this user's (in a sticky directory of one's own, others may add files but not
    replace or remove this user's; the registry then reads and touches only this user's)."""
    try:
        status = os.stat(directory)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    me = os.geteuid()
    if not stat.S_ISDIR(status.st_mode):
        return "is not a directory"
    if status.st_uid not in (me, 0):
        return f"belongs to another user (uid {status.st_uid})"
    if status.st_mode & 0o022 and not (status.st_mode & stat.S_ISVTX and status.st_uid == me):
        return f"is not sticky and others may write in it (mode {stat.S_IMODE(status.st_mode):o})"
    return None


def own(path: str | os.PathLike) -> bool:
    """Whether `path` itself (not what a link there points to) exists and is this user's."""
    try:
        return os.lstat(path).st_uid == os.geteuid()
    except OSError:
        return False


def own_file(path: str | os.PathLike) -> bool:
    """Whether `path` is a regular file of this user's (a link there is not)."""
    try:
        status = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(status.st_mode) and status.st_uid == os.geteuid()


def replace(path: str | os.PathLike, data: bytes) -> None:
    """Put a file holding `data` at `path`, replacing what is there (a link included, never
    written through); readers see the old file or the new one, whole. OSError if it cannot."""
    write_atomically(path, data, PRIVATE)


def create(path: str | os.PathLike, data: bytes) -> bool:
    """Put a file holding `data` at `path` if nothing is there (not even a link): True if it was put
    there. Readers see the whole file or none (a hard link of a finished file: atomic, and refused
    if the name exists)."""
    with fresh(path, "wb", PRIVATE) as (out, tmp), out:
        out.write(data)
        out.flush()
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    return True


def open_new(path: str | os.PathLike) -> BinaryIO:
    """A new empty file at `path`, open for writing, replacing what is there (as `replace`)."""
    with fresh(path, "wb", PRIVATE) as (out, tmp):
        os.replace(tmp, path)
        return out


def open_exclusive(path: str | os.PathLike) -> int:
    """A new empty file at `path`, for this user alone, open for appending: its descriptor.
    Never a file that exists, and never through a link (FileExistsError if anything is there)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def create_dir(path: str | os.PathLike) -> bool:
    """A new directory at `path` for this user alone: True if it was made, False if anything is
    there already (it is left as it is)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return False
    return True


def remove(path: str | os.PathLike) -> None:
    """Remove `path` if it is this user's (a link is removed, never what it points to)."""
    if own(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def make_dir(path: str | os.PathLike) -> None:
    """A directory at `path` for this user alone: made, or RunError if something else is there
    (a link, a file, or another user's directory)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    status = os.lstat(path)
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.geteuid():
        raise RunError(f"{path} is not a directory of yours (a link, a file, or another user's): not used; "
                       "remove it")


def remove_dir(path: str | os.PathLike) -> None:
    """Remove the directory `path` and what is in it, if it is this user's own directory (a link
    there is removed, never followed)."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    if status.st_uid != os.geteuid():
        return
    if stat.S_ISDIR(status.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        remove(path)
