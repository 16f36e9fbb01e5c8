"""Files replaced whole: a reader sees the old text or the new one, never half of either."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` through a new file beside it, renamed over `path` once complete (a link at
    `path` is replaced, not followed); the temporary file is gone whatever happens."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
