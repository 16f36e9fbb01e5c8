"""Files replaced whole: a reader sees the old file or the new one, never half of either, and no
file is ever written through a link.

The one way EventSpace writes a file it replaces (run files, snapshots, pathmaps, exported
traces): a new file of a random name beside it, created with O_EXCL|O_NOFOLLOW (so nothing that
is already there, a planted link included, is opened), then renamed over the name (which
replaces a link there rather than following it), or linked to it when the name must be new.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import IO

# Readable by everyone the umask lets read it, as `open` makes a file; run files pass PRIVATE.
PUBLIC, PRIVATE = 0o666, 0o600
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def fresh(path: str | os.PathLike, mode: str = "wb", permissions: int = PUBLIC):
    """(a new file beside `path`, open in `mode`, its name): the caller renames or links that name
    to `path` inside the block (a `replace` that wins, a `link` that may find the name taken). The
    name is gone afterwards whatever happens; the file is the caller's to close, unless the block
    raises (then it is closed). OSError if no file can be made there."""
    path = Path(path)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, _NEW, permissions)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    out = os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    try:
        yield out, tmp
    except BaseException:
        out.close()
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def replacing(path: str | os.PathLike, mode: str = "wb", permissions: int = PUBLIC):
    """A new file open for writing, renamed over `path` once the block ends without an error (what
    is at `path`, a link included, is replaced and never written through); if the block raises,
    `path` is left as it was. OSError if it cannot be written."""
    with fresh(path, mode, permissions) as (out, tmp):
        with out:
            yield out
        os.replace(tmp, path)


def write_atomically(path: str | os.PathLike, data: str | bytes, permissions: int = PUBLIC) -> None:
    """Replace `path` by a file holding `data` (text as UTF-8), whole (see `replacing`)."""
    with replacing(path, "w" if isinstance(data, str) else "wb", permissions) as out:
        out.write(data)
