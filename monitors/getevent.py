"""GetEventMon: every raw event of a view, streamed as it happens, to Perfetto, OTF2 or an SQLite archive."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eventspace import clock, trace
from eventspace.scope import EventScope

FORMATS = {".pftrace": "pftrace", ".json": "perfetto", ".otf2": "otf2", ".sqlite": "archive", ".db": "archive",
           ".sqlite3": "archive"}


def format_of(out: str | os.PathLike) -> str:
    """pftrace (Perfetto's protobuf), perfetto (Perfetto / Chrome JSON), otf2 or archive, by the
    file name's suffix; ValueError naming the choices."""
    suffix = Path(out).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{out}: unknown output format {suffix or '(no suffix)'}; write trace.pftrace "
                         "(Perfetto), trace.json (Perfetto / Chrome JSON), trace.otf2 (an OTF2 directory) "
                         "or archive.sqlite")
    return FORMATS[suffix]


@dataclass
class GetEventStats:
    pulls: int = 0
    tuples: int = 0
    discarded: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        """Events per second of monitoring."""
        return self.tuples / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class GetEventReport:
    """One read: the new events (trace.DTYPE, monitor clock; `catalogue` names their collectors),
    and the stream's figures so far: events read in all (`total`), discarded before they could be
    read, and read per second of pulling (`rate`)."""

    records: np.ndarray = field(repr=False)
    catalogue: object = field(repr=False, compare=False)
    total: int
    discarded: int
    rate: float

    @property
    def events(self) -> int:
        return len(self.records)

    def as_dict(self) -> dict:
        return {"events": self.events, "total": self.total, "discarded": self.discarded, "rate": self.rate}


class GetEventMon:
    """A gather-only scope in `stream` mode over `view` (default: every collector and each node's
    system summary element): each `read()` reports the events written
    since the last one (timestamps on the monitor's clock, after clock synchronisation) and
    appends them to the output. Nothing read is lost: an archive's row count equals the tuples
    streamed, and the events discarded before they could be read are counted and recorded.

    Perfetto and OTF2 files are written by `close()` (they need every event); an archive grows
    with every read, so it is useful while the run goes on. `lost` names the nodes that did not
    answer the last read: node -> (gone, since), `gone` True if its connection closed (its
    process ended), False if it is only not answering (paused, busy), `since` the wall-clock time
    (seconds since the epoch) of the read that first missed it so. Traces are dated by the
    wall-clock time of the monitor's clock read when monitoring began (`recorded`).
    """

    def __init__(self, run, view: str = "all | role:system", out: str | os.PathLike | None = None, *, tree: str = "flat",
                 placement: str = "monitor", concurrency: str = "concurrent", sync_clocks: bool = True,
                 timeout: float = 2.0):
        self.out = Path(out) if out is not None else None
        self.format = format_of(out) if out is not None else None
        if self.format == "otf2":
            from .otf2_export import INSTALL_HINT, Otf2Unavailable, available
            if not available():
                raise Otf2Unavailable(f"OTF2 output needs the otf2 package: {INSTALL_HINT}")
        self.scope = EventScope(run, view, mode="stream", tree=tree, placement=placement,
                                concurrency=concurrency, timeout=timeout, name="getevent")
        if sync_clocks:
            nodes = {e.node for e in self.scope.entries} | {e.trace_node for e in self.scope.entries}
            estimates = clock.synchronise(self.scope.pathmap, {n: self.scope.endpoints[n] for n in sorted(nodes)})
            self.scope.clock_offsets = {n: e.offset_ns for n, e in estimates.items()}
        self.recorded = clock.WallClock.now()
        self.stats = GetEventStats()
        self.missing: set[str] = set()
        self.lost: dict[str, tuple[bool, float]] = {}
        self._kept: list[np.ndarray] = []
        self._archive = None
        if self.format == "archive":
            from .archive import Archive
            try:
                self._archive = Archive(self.out, self.scope.catalogue)
                self._archived = self.scope.catalogue   # the catalogue it holds the collectors of
                entry = self.scope.roster_entry()
                self._archive.set_meta("scope", json.dumps({
                    "name": entry.name, "monitor": entry.monitor, "view": entry.view, "shape": entry.shape,
                    "placement": entry.placement, "mode": entry.mode, "collectors": entry.collectors}))
            except BaseException:
                self.scope.close()
                raise

    @property
    def catalogue(self):
        return self.scope.catalogue

    def read(self) -> GetEventReport:
        """Pull once: the new events (trace.DTYPE, monitor clock), also written to the output."""
        started = time.perf_counter()
        bytes_before = self.scope.stats().bytes_in
        pulled = self.scope.pull()
        records = pulled.records
        if self._archive is not None and self._archived is not self.scope.catalogue:
            self._archive.extend(self.scope.catalogue)   # the run grew (an MPI run's new communicators)
            self._archived = self.scope.catalogue
        self.stats.pulls += 1
        self.stats.tuples += len(records)
        self.stats.discarded += pulled.discarded
        if self._archive is not None:
            from .archive import PullFigures
            figures = PullFigures(time.monotonic_ns(), pulled.seconds, self.scope.stats().bytes_in - bytes_before)
            self._archive.append(records, discarded=pulled.discarded, pull=figures)
        elif self.format is not None and len(records):
            self._kept.append(records)
        self.stats.seconds += time.perf_counter() - started
        self.missing = pulled.missing
        now = time.time()
        self.lost = {node: self.lost[node] if self.lost.get(node, (None,))[0] == (node in pulled.gone)
                     else (node in pulled.gone, now) for node in pulled.missing}
        stats = self.stats
        return GetEventReport(records, self.scope.catalogue, stats.tuples, stats.discarded, stats.rate)

    def events(self) -> np.ndarray:
        """Everything kept so far (Perfetto and OTF2 outputs keep events until close)."""
        return np.concatenate(self._kept) if self._kept else trace.empty()

    def close(self) -> Path | None:
        """Write the output (Perfetto, OTF2), close the archive and the scope; the output's path."""
        try:
            if self.format == "pftrace":
                from .pftrace import write_pftrace
                write_pftrace(self.out, self.events(), self.catalogue, recorded=self.recorded)
            elif self.format == "perfetto":
                from .perfetto import write_perfetto
                write_perfetto(self.out, self.events(), self.catalogue, title=f"EventSpace: {self.catalogue.pathmap.name}")
            elif self.format == "otf2":
                from .otf2_export import write_otf2
                write_otf2(self.out, self.events(), self.catalogue, recorded=self.recorded)
            elif self._archive is not None:
                self._archive.close()
        finally:
            self.scope.close()
        return self.out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
