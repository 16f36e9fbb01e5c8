"""The memory budget: the bytes one node server may hold on its callers' behalf."""

from __future__ import annotations

import ctypes
import threading

from .errors import LimitExceeded


class MemoryBudget:
    """The bytes a node server holds for what its callers asked of it, against `Limits.max_memory`.

    Whoever allocates on a caller's behalf takes the bytes first (`take`), and gives them back when
    they are freed (`give`): elements their own objects, template and ring or held tuples
    (pastset.element), endpoints the big replies the transport still holds (pastset.server,
    `take_reply`). A take that would pass the limit raises LimitExceeded, and nothing was allocated.
    The last `reserve` bytes are for replies only, so that what elements hold can always be read
    (and so drained), however full they are. `limit=None` counts without limit (an element made
    outside a server).

    Thread-safe. The mutex is a leaf: it is taken with an element's mutex held, never the other way.
    """

    def __init__(self, limit: int | None = None, max_ring: int | None = None, server: str = "pastset",
                 reserve: int = 0):
        self.limit = limit
        self.max_ring = max_ring
        self.server = server
        self.reserve = reserve
        self._mutex = threading.Lock()
        self.used = 0          # bytes taken and not given back

    def take(self, nbytes: int, what: str) -> None:
        """Count `nbytes` more for `what` (e.g. "the ring of element trace/3"); LimitExceeded if the
        budget, less its reserve for replies, cannot hold them."""
        self._take(nbytes, what, self.reserve)

    def take_reply(self, nbytes: int, what: str) -> None:
        """As `take`, for a reply: it may use the reserve."""
        self._take(nbytes, what, 0)

    def _take(self, nbytes, what, kept):
        with self._mutex:
            if self.limit is not None and self.used + nbytes > self.limit - kept:
                of = f", {kept:,} of them kept for replies" if kept else ""
                raise LimitExceeded(
                    f"server {self.server}: {what} needs {nbytes:,} bytes, but {self.used:,} of its "
                    f"{self.limit:,}-byte memory budget (Limits.max_memory{of}) are in use; delete "
                    "elements, lower keep or delta, read fewer tuples at once, or raise Limits.max_memory"
                )
            self.used += nbytes

    def charge(self, nbytes: int) -> None:
        """Count `nbytes` held whatever the budget says (an error reply, which refuses something
        bigger): never refused, so these may take the count past the limit."""
        with self._mutex:
            self.used += nbytes

    def give(self, nbytes: int) -> None:
        with self._mutex:
            self.used -= nbytes

    def check_ring(self, nbytes: int, what: str) -> None:
        """LimitExceeded if one ring of `nbytes` (records x slots) is over `Limits.max_ring`."""
        if self.max_ring is not None and nbytes > self.max_ring:
            raise LimitExceeded(
                f"server {self.server}: {what} of {nbytes:,} bytes is over the {self.max_ring:,}-byte "
                "ring limit (Limits.max_ring); lower keep or delta, or raise Limits.max_ring"
            )


def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim   # glibc
    except (AttributeError, OSError):
        return None


_TRIM = _malloc_trim()


def release_freed() -> None:
    """Hand the memory this process freed back to the system, where the C library keeps it: glibc
    keeps freed blocks in its heaps for reuse (up to gigabytes, after many replies of a megabyte or
    so), so a server's resident size would stay at its peak. A few milliseconds; elsewhere nothing."""
    if _TRIM is not None:
        _TRIM(0)
