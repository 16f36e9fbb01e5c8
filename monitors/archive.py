"""The archive, as monitors use it: the format lives in eventspace.archive (the MPI launcher writes it too)."""

from eventspace.archive import (  # noqa: F401
    FORMAT,
    PULLS_DTYPE,
    RESERVED,
    VERSION,
    Archive,
    ArchivedCatalogue,
    ArchivedPathmap,
    ArchiveError,
    ArchiveInfo,
    PullFigures,
)
