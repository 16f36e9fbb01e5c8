"""The roster of a run's scopes: every event scope reports its figures into one element of the run, and dashboards read them."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from dataclasses import dataclass

import pastset
from pastset import PastSetError

ROSTER = "eventspace/scopes"    # the element, on the run's first node (the pathmap's first)
KEEP = 256                      # records it keeps: a few minutes of a few dozen scopes
REPORT_EVERY = 1.0              # seconds between a scope's reports
STALE_AFTER = 5.0               # seconds without a new report after which a scope counts as gone


@dataclass(frozen=True)
class ScopeEntry:
    """One report of one scope, as it travels in the roster element (one typed tuple, these
    fields in this order). `scope` is the scope's id (unique per scope), `monitor` the
    `host:pid` of its process, `collectors` the trace elements its view selects, `max_rate`
    its pull-rate limit (0.0: none); `pulls`, `seconds` (spent pulling), `tuples`, `bytes_in`,
    `bytes_out` count since it was made; `at` is when it reported (seconds since the epoch, its
    host's clock); `open` is False in the last report of a closed scope."""

    scope: str
    name: str
    monitor: str
    view: str
    shape: str
    placement: str
    mode: str
    collectors: int
    max_rate: float
    pulls: int
    seconds: float
    tuples: int
    bytes_in: int
    bytes_out: int
    at: float
    open: bool = True

    @property
    def observe_rate(self) -> float:
        """Pulls per second of time spent pulling."""
        return self.pulls / self.seconds if self.seconds else 0.0

    def values(self) -> list:
        return [getattr(self, f.name) for f in dataclasses.fields(self)]


# ScopeEntry's fields, in order.
TEMPLATE = ["str", "str", "str", "str", "str", "str", "str", "int", "float", "int", "float", "int", "int", "int",
            "float", "bool"]
assert [f.type for f in dataclasses.fields(ScopeEntry)] == [t for t in TEMPLATE]


@dataclass(frozen=True)
class ActiveScope:
    """A scope as a dashboard shows it: its newest report, and rates over its last two reports
    (events and bytes per second delivered; `busy`: the share of wall time spent pulling)."""

    entry: ScopeEntry
    tuples_per_s: float = 0.0
    bytes_per_s: float = 0.0
    busy: float = 0.0

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self.entry), "tuples_per_s": self.tuples_per_s, "bytes_per_s": self.bytes_per_s,
                "busy": self.busy}


def monitor_name() -> str:
    """`host:pid` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def roster_node(pathmap) -> str:
    """The node whose server holds the roster: the pathmap's first."""
    return pathmap.nodes[0].name


class RosterWriter:
    """Writes one scope's reports. Never raises and never blocks long: a node that does not
    answer costs at most `timeout` seconds (one whose connection closed, at most GONE_AFTER),
    and the next report tries again. Used by one thread."""

    GONE_AFTER = 0.5

    def __init__(self, endpoint: str, timeout: float = 2.0):
        self._endpoint = endpoint
        self._timeout = timeout
        self._client = None
        self._element = None
        self.wrote = False

    @property
    def connected(self) -> bool:
        """Whether the last report reached the roster (the next goes over the same connection)."""
        return self._element is not None

    def write(self, entry: ScopeEntry) -> None:
        try:
            if self._element is None:
                self._client = pastset.connect(self._endpoint, timeout=self._timeout,
                                               gone_after=min(self._timeout, self.GONE_AFTER))
                self._element = self._client.enter(ROSTER, TEMPLATE, keep=KEEP)
            self._element.move(entry.values())
            self.wrote = True
        except PastSetError:
            self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = self._element = None


class Roster:
    """Reads a run's roster: `active()` is every scope, of any monitor on any host, that reported
    within the last STALE_AFTER seconds and has not closed. A scope first seen with a report
    older than that (by its host's clock) is not shown; after that, freshness is judged by this
    process's clock alone (a new report arrived, or not), so skewed clocks do not hide scopes."""

    def __init__(self, endpoint: str, timeout: float = 2.0):
        self._endpoint = endpoint
        self._timeout = timeout
        self._client = None
        self._element = None
        self._seen: dict[str, tuple[ScopeEntry, float, ActiveScope]] = {}  # scope -> newest, when it came, figures

    def active(self) -> list[ActiveScope]:
        """The live scopes, by name then monitor; PastSetError if the roster's node does not answer."""
        if self._element is None:
            self._client = pastset.connect(self._endpoint, timeout=self._timeout, gone_after=self._timeout)
            self._element = self._client.enter(ROSTER, TEMPLATE, keep=KEEP)
        try:
            _, reports = self._element.latest(KEEP)
        except PastSetError:
            self.close()
            raise
        newest: dict[str, ScopeEntry] = {}
        older: dict[str, ScopeEntry] = {}
        for values in reports:
            entry = ScopeEntry(*values)
            if entry.scope in newest:
                older[entry.scope] = newest[entry.scope]
            newest[entry.scope] = entry
        now, wall = time.monotonic(), time.time()
        for scope, entry in newest.items():
            known = self._seen.get(scope)
            if known is not None and known[0] == entry:
                continue
            if known is None and wall - entry.at > STALE_AFTER:
                continue
            self._seen[scope] = (entry, now, _figures(entry, older.get(scope) or (known[0] if known else None)))
        for scope in [s for s, (entry, came, _) in self._seen.items() if now - came > STALE_AFTER or not entry.open]:
            del self._seen[scope]
        return sorted((figures for _, _, figures in self._seen.values()),
                      key=lambda a: (a.entry.name, a.entry.monitor, a.entry.scope))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = self._element = None


def _figures(entry: ScopeEntry, before: ScopeEntry | None) -> ActiveScope:
    if before is None or entry.at <= before.at:
        return ActiveScope(entry)
    period = entry.at - before.at
    return ActiveScope(entry, (entry.tuples - before.tuples) / period, (entry.bytes_in - before.bytes_in) / period,
                       (entry.seconds - before.seconds) / period)
