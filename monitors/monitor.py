"""Monitor and Report: the one shape every monitor has, reading apart from rendering (as rich keeps data from renderables)."""

from __future__ import annotations

from typing import Protocol, TypeVar, runtime_checkable

R = TypeVar("R", bound="Report", covariant=True)


@runtime_checkable
class Report(Protocol):
    """What a monitor observed at one read, as plain data: a frozen dataclass of its own per monitor
    (HeartbeatReport, ColOpReport, MatrixReport...), never changed once made, so that a report can be
    kept, compared with the next one and shown later.

    `as_dict()` is its `--json` form: what `eventspace monitor ... --json` prints for it, one line
    per read. Its terminal form is `monitors.render.render(report)`, a rich renderable; nothing in
    a report knows how it looks."""

    def as_dict(self) -> dict: ...


@runtime_checkable
class Monitor(Protocol[R]):
    """A monitor: `read()` observes once and returns its Report; `close()` lets go of what it holds
    (its event scope, its requests' sockets; a monitor of one scope, monitors.scoped.ScopeMon, is
    also a context manager that closes it).

    `read()` of a live monitor pulls its scope once (a round of requests to the run's nodes, within
    the scope's timeout: it never hangs on a node that does not answer, which its report names) and
    returns the report of everything read so far or at this read, as each monitor's docstring says;
    the sequence player's `read()` plays the next frame of an archive. Reading never prints:
    `monitors.render.render(report)` shows a report, `report.as_dict()` serialises it, and the
    dashboard composes the reports of the monitors it runs into its own (DashboardState)."""

    def read(self) -> R: ...

    def close(self) -> None: ...
