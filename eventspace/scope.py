"""Event scopes: gather trees over a view of the virtual event space, shaped and placed by their monitor."""

from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass, field, replace

import networkx as nx
import numpy as np

from paths import Pathmap, RunFile, Shape
from paths.shapes import Join as TreeJoin
from paths.shapes import Member, lay_out
from pastset import PastSetError
from pastset import protocol as p
from pastset.fanout import Fanout

from . import trace
from .catalogue import Catalogue
from .gather import INSTALL, MODES, REMOVE, RENEW, Join, JoinSpec, Pulled
from .space import INFLIGHT, Mark
from .stages import ScopeStage
from .view import View

PLACEMENTS = ("monitor", "near")
CONCURRENCY = ("concurrent", "sequential")


class ScopeError(ValueError):
    """A scope setting that is not valid (say which and what to write)."""


@dataclass(frozen=True)
class TreeSettings:
    """How a scope's gather tree is shaped and placed.

    `shape`: flat | kary:K | knomial:K | per-node | per-cluster. `placement`: `near` runs each
    join inside the node server the tree puts it on (close to the trace elements it reads);
    `monitor` runs every join in the scope's own process. `concurrency`: a join asks its
    children all at once, or one after another. `stages`: applied at every join, in order.
    `max_rate`: pulls per second at most (None: as fast as asked).
    """

    shape: str = "flat"
    placement: str = "monitor"
    concurrency: str = "concurrent"
    stages: tuple[str, ...] = ()
    max_rate: float | None = None

    def checked(self, allow_modules=()) -> TreeSettings:
        try:
            Shape.parse(self.shape)
        except ValueError as exc:
            raise ScopeError(str(exc)) from None
        if self.placement not in PLACEMENTS:
            raise ScopeError(f"unknown placement {self.placement!r}; use near or monitor")
        if self.concurrency not in CONCURRENCY:
            raise ScopeError(f"unknown concurrency {self.concurrency!r}; use concurrent or sequential")
        stages = tuple(self.stages)
        for i, text in enumerate(stages):
            stage = ScopeStage.parse(text, allow_modules)
            if stage.kind == "convert" and i != len(stages) - 1:
                raise ScopeError(f"stage {text!r} must be the last: it turns records into dicts")
        if self.max_rate is not None and not self.max_rate > 0:
            raise ScopeError(f"max_rate must be a positive number of pulls per second, got {self.max_rate!r}")
        return replace(self, stages=stages)


@dataclass
class ScopeStats:
    """A scope's own figures since it was made (or last reconfigured, for `levels`)."""

    pulls: int = 0
    seconds: float = 0.0              # wall time spent inside pull()
    tuples: int = 0                   # records delivered
    bytes_in: int = 0                 # bytes the monitor received
    bytes_out: int = 0                # bytes the monitor sent
    discarded: int = 0                # stream mode: records discarded before they were read
    started: float = field(default_factory=time.monotonic)
    levels: dict[int, list] = field(default_factory=dict)  # level -> [seconds, tuples, bytes in]

    @property
    def observe_rate(self) -> float:
        """Pulls per second of time spent pulling (the paper's observe rate)."""
        return self.pulls / self.seconds if self.seconds else 0.0


@dataclass
class Pull:
    """One pull's result: `records` (a trace.DTYPE array, or dicts after convert:records),
    `discarded` (stream mode), `missing` (nodes that did not answer within the timeout)."""

    records: np.ndarray | list
    discarded: int
    missing: set[str]
    seconds: float


class EventScope:
    """A gather tree over a view of a live run's trace elements, pulled by its monitor.

    `run` is a RunFile, a `paths.Run`, a run-file path or a pathmap name (looked up in
    `.eventspace/runs`), or a Pathmap whose nodes have fixed ports. `mode`: `latest` (the newest
    tuple of every trace element in the view), `stream` (everything since the last pull, and
    how many were discarded before being read), `backlog` (everything still kept).

    Any number of scopes, of any number of monitors, may coexist. A scope is used by one thread
    at a time. Joins placed `near` hold a lease on their node server, renewed by every pull and
    by a background thread; a monitor that dies leaves nothing behind once its leases expire.
    `close()` removes them at once.
    """

    def __init__(self, run, view: str | View = "all", *, mode: str = "latest", tree: str = "flat",
                 placement: str = "monitor", concurrency: str = "concurrent", stages=(),
                 max_rate: float | None = None, timeout: float = 2.0, lease: float = 10.0,
                 clock_offsets: dict[str, int] | None = None):
        self.pathmap, self.endpoints = _resolve(run)
        self.catalogue = Catalogue(self.pathmap)
        self.view = View.parse(view)
        self.entries = self.view.select(self.catalogue)
        if mode not in MODES:
            raise ScopeError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        self.mode = mode
        self.timeout = timeout
        self.lease = lease
        self.settings = TreeSettings(tree, placement, concurrency, tuple(stages), max_rate).checked(
            self.pathmap.allow_modules)
        self.clock_offsets = dict(clock_offsets or {})
        self._fanout = Fanout(self.endpoints)
        self._id = uuid.uuid4().hex[:12]
        self._generation = 0
        self._stats = ScopeStats()
        self._last_pull = 0.0
        self._cursors: dict[str, int] = {}
        self._mutex = threading.Lock()      # held while the tree is pulled, swapped or renewed
        self._closed = False
        self._installed: list[tuple[str, str]] = []   # (node, key) of near joins
        self._build()
        self._closing = threading.Event()   # set by close(): the lease renewer stops at once
        self._renewer = threading.Thread(target=self._renew_loop, name="scope-lease", daemon=True)
        self._renewer.start()

    # -- the tree ------------------------------------------------------------------------------

    def plan(self, settings: TreeSettings | None = None) -> list[JoinSpec]:
        """The joins of the tree for `settings` (default: the current ones), root last."""
        settings = settings or self.settings
        pm = self.pathmap
        members = [e.trace for e in self.entries]
        node_of = {e.trace: e.trace_node for e in self.entries}
        cluster_of = {n.name: n.cluster for n in pm.nodes}
        graph = lay_out(Shape.parse(settings.shape), members, node_of, cluster_of, [n.name for n in pm.nodes])
        root = graph.graph["root"]
        depth = nx.shortest_path_length(graph.reverse(copy=False), root)
        prefix = f"{self._id}.{self._generation}"
        near = settings.placement == "near"
        keys = {v: f"{prefix}/{v.label}" for v in graph if isinstance(v, TreeJoin)}
        specs = []
        for join in sorted(keys, key=lambda j: -depth[j]):   # leaves' joins first, root last
            node = graph.nodes[join]["node"] if near else None
            leaves: dict[str, list[str]] = {}
            children = []
            for child in graph.predecessors(join):
                if isinstance(child, Member):
                    leaves.setdefault(node_of[child.name], []).append(child.name)
                else:
                    children.append([graph.nodes[child]["node"] if near else None, keys[child]])
            stages = [s for s in settings.stages if not s.startswith("convert")]
            cursors = {f"{n}/{name}": self._cursors.get(f"{n}/{name}", 0)
                       for n, names in leaves.items() for name in names} if self.mode == "stream" else {}
            # A join waits less than its parent does, so that a node that does not answer is
            # reported by the join that asked it, and the parent still hears from that join.
            levels = max(depth.values()) + 1
            timeout = self.timeout * (levels - depth[join]) / (levels + 1) if near else self.timeout
            specs.append(JoinSpec(keys[join], depth[join], node, leaves, children, stages, self.mode,
                                  settings.concurrency, timeout, dict(self.endpoints), cursors))
        return specs

    def _build(self) -> None:
        specs = self.plan()
        self._root = specs[-1]
        self._joins: dict[str, Join] = {}
        installed = []
        try:
            for spec in specs:
                if spec.node is None:
                    self._joins[spec.key] = Join(spec, self.catalogue, joins=self._joins)
                else:
                    self._call(spec.node, INSTALL, spec.wire(), self.lease)
                    installed.append((spec.node, spec.key))
        except PastSetError:
            self._remove(installed)
            raise
        self._installed = installed

    def _call(self, node, name, *args):
        replies, missing = self._fanout.request([(node, p.CALL, (name, list(args)))], self.timeout)
        if missing:
            raise PastSetError(f"node {node} did not answer {name} within {self.timeout} s")
        if isinstance(replies[0], PastSetError):
            raise replies[0]
        return replies[0]

    def _remove(self, installed) -> dict[str, int]:
        """Remove near joins (best effort: a node that is gone drops them when their lease ends)."""
        cursors = {}
        if not installed:
            return cursors
        replies, _ = self._fanout.request([(node, p.CALL, (REMOVE, [key])) for node, key in installed],
                                          self.timeout)
        for reply in replies:
            if isinstance(reply, dict):
                cursors.update(reply)
        return cursors

    # -- pulling -------------------------------------------------------------------------------

    def pull(self) -> Pull:
        """Pull the tree once: blocks at most about `timeout` seconds (nodes that do not answer are
        listed in `missing`), and, with `max_rate`, until the rate allows another pull."""
        if self._closed:
            raise ScopeError("the scope is closed")
        with self._mutex:
            rate = self.settings.max_rate
            if rate:
                wait = self._last_pull + 1.0 / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            self._last_pull = time.monotonic()
            started = time.perf_counter()
            sent, received = self._fanout.bytes_sent, self._fanout.bytes_received
            root = self._root
            if root.node is None:
                pulled = self._joins[root.key].pull(self._fanout)
            else:
                pulled = self._pull_remote_root(root)
            seconds = time.perf_counter() - started
            records = self._correct(pulled.records)
            stats = self._stats
            stats.pulls += 1
            stats.seconds += seconds
            stats.tuples += len(records)
            stats.discarded += pulled.discarded
            stats.bytes_in += self._fanout.bytes_received - received
            stats.bytes_out += self._fanout.bytes_sent - sent
            for level, values in pulled.levels.items():
                mine = stats.levels.setdefault(level, [0.0, 0, 0])
                for i, v in enumerate(values):
                    mine[i] += v
            if self.settings.stages and self.settings.stages[-1].startswith("convert"):
                records = self.catalogue.label(records)
            return Pull(records, pulled.discarded, pulled.missing, seconds)

    def _pull_remote_root(self, root: JoinSpec) -> Pulled:
        replies, missing = self._fanout.request([(root.node, p.CALL, ("eventspace.scope.pull", [root.key]))],
                                                self.timeout)
        reply = replies[0]
        if reply is None or isinstance(reply, PastSetError):
            return Pulled(trace.empty(), missing={root.node})
        return Pulled.from_wire(reply)

    def _correct(self, records: np.ndarray) -> np.ndarray:
        """Timestamps on the monitor's clock: each node's estimated offset taken off its events."""
        if not self.clock_offsets or not len(records):
            return records
        column = self.catalogue.column("node")
        names = self.catalogue.names("node")
        offsets = np.array([self.clock_offsets.get(n, 0) for n in names], dtype=np.int64)
        shift = offsets[column[records["collector"]]]
        out = records.copy()
        out["t_start"] = (out["t_start"].astype(np.int64) - shift).astype(np.uint64)
        out["t_end"] = (out["t_end"].astype(np.int64) - shift).astype(np.uint64)
        return out

    def in_flight(self) -> tuple[dict[int, int], set[str]]:
        """The view's collectors timing an operation right now: ({collector id: its start, ns on
        the collector's node clock}, nodes that did not answer). A thread blocked in an observe
        or a collective shows here before any record of that operation exists."""
        rows, missing = self._in_flight_rows()
        return {row[0]: row[1] for row in rows}, missing

    def in_flight_marks(self) -> tuple[dict[int, Mark], set[str]]:
        """As `in_flight`, for the collectors that mark what they are timing (MPI collectors):
        ({collector id: Mark(t_start, op, flags, element, arg, nbytes)}, nodes that did not
        answer); the fields are the record's as known when the operation began."""
        rows, missing = self._in_flight_rows()
        return {row[0]: Mark(*row[1:7]) for row in rows if len(row) == 7}, missing

    def _in_flight_rows(self) -> tuple[list[list[int]], set[str]]:
        nodes = sorted({e.node for e in self.entries})
        with self._mutex:
            replies, missing = self._fanout.request([(n, p.CALL, (INFLIGHT, [])) for n in nodes], self.timeout)
        mine = {e.id for e in self.entries}
        rows = []
        for node, reply in zip(nodes, replies):
            if isinstance(reply, list):
                rows.extend(row for row in reply if row[0] in mine)
            elif reply is not None:
                missing.add(node)
        return rows, missing

    # -- reshaping -------------------------------------------------------------------------------

    def reconfigure(self, *, tree: str | None = None, placement: str | None = None,
                    concurrency: str | None = None, stages=None, max_rate: float | None = ...) -> None:
        """Swap the gather tree while the application runs. In stream mode, no record is lost or
        repeated across the swap: the read cursors move from the old joins to the new ones."""
        settings = self.settings
        new = TreeSettings(
            tree if tree is not None else settings.shape,
            placement if placement is not None else settings.placement,
            concurrency if concurrency is not None else settings.concurrency,
            tuple(stages) if stages is not None else settings.stages,
            settings.max_rate if max_rate is ... else max_rate,
        ).checked(self.pathmap.allow_modules)
        with self._mutex:
            self._cursors = self._collect_cursors()
            old_installed = self._installed
            self.settings = new
            self._generation += 1
            self._build()
            self._stats.levels = {}
            # The old near joins go last: their cursors were copied before, and nothing read since.
            self._remove(old_installed)

    def _collect_cursors(self) -> dict[str, int]:
        cursors = dict(self._cursors)
        for join in self._joins.values():
            cursors.update(join.cursors)
        if self._installed and self.mode == "stream":
            replies, missing = self._fanout.request(
                [(node, p.CALL, ("eventspace.scope.cursors", [key])) for node, key in self._installed],
                self.timeout)
            for reply in replies:
                if isinstance(reply, dict):
                    cursors.update(reply)
        return cursors

    # -- figures, leases, closing ------------------------------------------------------------------

    def stats(self) -> ScopeStats:
        return replace(self._stats, levels={k: list(v) for k, v in self._stats.levels.items()})

    def installed(self) -> list[tuple[str, str]]:
        """(node, key) of the joins this scope has placed in node servers."""
        return list(self._installed)

    def _renew_loop(self) -> None:
        fanout = None
        while not self._closing.wait(max(0.05, self.lease / 3)):
            with self._mutex:
                installed = list(self._installed)
            if not installed:
                continue
            if fanout is None:
                fanout = Fanout(self.endpoints)  # this thread's own sockets
            by_node: dict[str, list[str]] = {}
            for node, key in installed:
                by_node.setdefault(node, []).append(key)
            fanout.request([(node, p.CALL, (RENEW, [keys, self.lease])) for node, keys in by_node.items()],
                           self.timeout)
        if fanout is not None:
            fanout.close()

    def close(self) -> None:
        """Remove every join this scope placed on node servers; the scope cannot pull after."""
        if self._closed:
            return
        with self._mutex:
            self._closed = True
            self._closing.set()
            self._remove(self._installed)
            self._installed = []
        self._renewer.join(timeout=self.timeout + 1)
        self._fanout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _resolve(run) -> tuple[Pathmap, dict[str, str]]:
    """(pathmap, node endpoints) of what `run` names."""
    if isinstance(run, Pathmap):
        missing = [n.name for n in run.nodes if not n.port]
        if missing:
            raise ScopeError(f"nodes {', '.join(missing)} of pathmap {run.name} have port 0; give the scope "
                             "the live run (its run file) instead")
        return run, {n.name: f"tcp://{n.host}:{n.port}" for n in run.nodes}
    if hasattr(run, "run_file") and hasattr(run, "pathmap"):  # a paths.Run
        return run.pathmap, dict(run.endpoints)
    run_file = run if isinstance(run, RunFile) else RunFile.find(os.fspath(run))
    return run_file.pathmap(), dict(run_file.endpoints)
