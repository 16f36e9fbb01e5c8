"""ScopeMon: what every monitor built on one event scope shares (closing it closes the scope)."""

from __future__ import annotations


class ScopeMon:
    """A monitor that owns one event scope, `self.scope`; a context manager that closes it."""

    scope = None

    def close(self) -> None:
        self.scope.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
