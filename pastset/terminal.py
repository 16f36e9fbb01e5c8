"""Consoles for commands: rich, and never cutting a name when the output is a pipe or a file."""

from __future__ import annotations

import sys

from rich.console import Console

# rich gives a console that writes to a pipe or a file 80 columns, and wraps or cuts what a table
# holds to fit them: a run's name piped into grep would arrive as "wor". Such a console gets lines
# as long as their content instead (tables are as wide as their cells; up to this many columns).
UNBOUNDED = 100_000


def console(stderr: bool = False, **options) -> Console:
    """A rich Console on stdout (or stderr): a terminal's width on a terminal, else lines as long as
    they need to be (whatever $COLUMNS says), so that piped or redirected tables keep every name whole."""
    stream = sys.stderr if stderr else sys.stdout
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    return Console(stderr=stderr, width=None if terminal else UNBOUNDED, **options)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`1 rank`, `4 ranks`, `2,000 events`: a count and its noun, agreeing."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
