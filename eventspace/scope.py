"""Event scopes: gather trees over a view of the virtual event space, shaped and placed by their monitor."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from queue import SimpleQueue

import numpy as np

from paths import Pathmap, RunError, RunFile, Shape
from paths.node import THREADS
from paths.stack import DEPTH, ThreadState
from paths.shapes import LayoutJoin
from paths.shapes import Member, lay_out
import pastset
from pastset import Fanout, PastSetError

from .catalogue import Catalogue
from .gather import CONCURRENCY, MODES, GatherJoin, JoinLimits, JoinSpec, Pulled
from .hosted import CURSORS, INFLIGHT, INSTALL, OFF, REMOVE, RENEW
from .ignored import BAD_TIMES, NOT_ON_CLOCK, Ignored
from .roster import REPORT_EVERY, RosterWriter, ScopeEntry, monitor_name, roster_node
from .space import Mark
from .stages import ScopeStage, check_tree
from .view import View

PLACEMENTS = ("monitor", "near")
PLACE_TIMEOUT = 10.0   # seconds a node may take to place a near join
MAX_PIPELINE = 16      # pulls one scope may keep in flight
CLOCK_SLACK_NS = 10**9  # how far past now a corrected record may end (a clock estimate errs by far less)


class ScopeError(ValueError):
    """A scope setting that is not valid (say which and what to write)."""


@dataclass(frozen=True)
class TreeSettings:
    """How a scope's gather tree is shaped and placed.

    `shape`: flat | kary:K | knomial:K | per-node | per-cluster. `placement`: `near` runs each
    join below the root inside the node server the tree puts it on (close to the trace elements
    it reads), and the root in the scope's own process, as MRNet's front end: a root on a node
    would only forward its result to the monitor, one more hop per pull; `monitor` runs every join
    in the scope's own process. `concurrency`: a join asks its
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
class Look:
    """What the nodes said of the view at one look (EventScope.look): the operations its collectors
    time ({collector id: Mark}), the collectors switched off, where its threads are ({thread:
    ThreadState}), and the nodes that did not answer."""

    marks: dict[int, Mark]
    off: set[int]
    threads: dict[str, ThreadState]
    missing: set[str]


@dataclass(frozen=True)
class Account:
    """A stream scope's view, in records: `made` by its collectors as of the last pull, `before`
    those the rings had dropped before the scope was made (never readable), `read` delivered to
    the scope's caller (None where stages transform records: then not comparable), `discarded`
    dropped by the rings after that, before a pull could read them, `ignored` read but left out
    (records no collector wrote, eventspace.ignored: they are in the rings' counts too). Nothing
    lost unseen: `before + read + ignored + discarded == made`."""

    made: int
    before: int
    read: int | None
    discarded: int
    ignored: int = 0

    @property
    def reconciles(self) -> bool:
        return self.read is not None and self.before + self.read + self.ignored + self.discarded == self.made

    def line(self, what: str = "events") -> str:
        """`160,024 events made in the view: 152,674 read, 92 discarded before they were read, 7,258 made
        before the monitor attached` (and `, 3 left out: not a collector's` when some were)."""
        read = "" if self.read is None else f"{self.read:,} read, "
        left = f", {self.ignored:,} left out: not a collector's" if self.ignored else ""
        return (f"{self.made:,} {what} made in its view: {read}{self.discarded:,} discarded before they were "
                f"read, {self.before:,} made before it attached{left}")

    def as_dict(self) -> dict:
        return {"made": self.made, "read": self.read, "discarded": self.discarded, "before": self.before,
                "ignored": self.ignored}


@dataclass
class Pull:
    """One pull's result: `records` (a trace.DTYPE array, or dicts after convert:records),
    `discarded` (stream mode), `missing` (exactly the nodes that were asked and did not answer
    within the timeout) and of those the `gone` ones (their connection closed: the process ended
    or the host is out of reach; the others are `not_answering`: connected, but paused, swapping
    or busy), `unreached` (nodes that were not asked because the join that would have asked them
    did not answer: their events are absent, their state unknown), and the records left out
    because they did not pass eventspace.ignored's check (`ignored`: {reason: how many}; written
    into the run's trace elements by someone other than their collectors)."""

    records: np.ndarray | list
    discarded: int
    missing: set[str]
    seconds: float
    gone: set[str] = field(default_factory=set)
    unreached: set[str] = field(default_factory=set)
    ignored: Ignored = field(default_factory=Ignored)

    @property
    def not_answering(self) -> set[str]:
        return self.missing - self.gone


class EventScope:
    """A gather tree over a view of a live run's trace elements, pulled by its monitor.

    `run` is a RunFile, a `paths.Run`, a run-file path or a run name (looked up in
    `paths.runfile.run_dir()`), or a Pathmap whose nodes have fixed ports. `mode`: `latest` (the newest
    tuple of every trace element in the view), `stream` (everything since the last pull, and
    how many were discarded before being read), `backlog` (everything still kept).

    Any number of scopes, of any number of monitors, may coexist. A scope is used by one thread
    at a time. Joins placed `near` hold a lease on their node server, renewed by every pull and
    by a background thread; a monitor that dies leaves nothing behind once its leases expire.
    `close()` removes them at once.

    Every scope reports itself, as `name`, to the run's roster (eventspace.roster: an element on
    the run's first node) about once a second, so that a dashboard anywhere shows every active
    scope of every monitor: its view, tree, observe rate and cost.

    `pipeline` K > 1 keeps K pulls in flight (latest and backlog modes): `pull()` returns the
    oldest finished one and starts another, so that where a pull is one slow round trip (a
    monitor behind a wide-area link) the observe rate is K times higher. Each pull still holds
    the whole view, as of when it was asked.

    Records are checked at every join (eventspace.ignored): one that names no collector of the
    run, or whose times or class members are out of range, is left out and counted (`Pull.ignored`,
    and `ignored` over the scope's life); the first time a reason comes up, the scope says so on
    the `eventspace.ignored` logger (`scope heartbeat: 12 records ignored: collector id out of
    range`), once.
    """

    def __init__(self, run, view: str | View = "all", *, mode: str = "latest", tree: str = "flat",
                 placement: str = "monitor", concurrency: str = "concurrent", stages=(),
                 max_rate: float | None = None, timeout: float = 2.0, lease: float = 10.0,
                 clock_offsets: dict[str, int] | None = None, name: str = "scope", pipeline: int = 1):
        self.name = name
        self._snapshot = _snapshot_of(run)   # the run's pathmap snapshot and its version: to follow it as it grows
        self._run_file = _run_file_of(run)   # its run file's path: where nodes that join it serve
        self.pathmap, self.endpoints = resolve(run)
        self.catalogue = Catalogue(self.pathmap)
        self.view = View.parse(view)
        self.entries = self.view.select(self.catalogue)
        if mode not in MODES:
            raise ScopeError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        self.mode = mode
        self.pipeline = self._checked_pipeline(pipeline)
        self._inflight: deque = deque()   # futures of the pulls under way (pipeline > 1)
        self._slots: SimpleQueue | None = None   # one fan-out and copy of the monitor's joins per pull in flight
        self._pool = None
        self.timeout = timeout
        self.lease = self._checked_lease(lease)
        self.settings = TreeSettings(tree, placement, concurrency, tuple(stages), max_rate).checked(
            self.pathmap.allow_modules)
        self.clock_offsets = dict(clock_offsets or {})
        self._fanout = Fanout(self.endpoints)
        self._id = uuid.uuid4().hex[:12]
        self._monitor = monitor_name()
        self._generation = 0
        self._stats = ScopeStats()
        self.ignored = Ignored()
        self._told: set[str] = set()
        self._last_pull = 0.0
        # Stream mode: "node/trace element" -> the next index to read. A stream starts at what
        # each ring holds when the scope is made (its first pull delivers that backlog), and
        # counts as discarded only what the rings drop after that.
        self._cursors: dict[str, int] = self._ring_starts() if mode == "stream" else {}
        self._starts = dict(self._cursors)   # what the rings had dropped before the scope was made
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
        # The tree is laid over the nodes that hold the view's trace elements, not over the
        # elements themselves: a node answers one read for all of its elements (range_many), so
        # a join per group of elements on one node would only add a level that forwards.
        held: dict[str, list[str]] = {}
        for entry in self.entries:
            held.setdefault(entry.trace_node, []).append(entry.trace)
        cluster_of = {n.name: n.cluster for n in pm.nodes}
        graph = lay_out(Shape.parse(settings.shape), list(held), {n: n for n in held}, cluster_of,
                        [n.name for n in pm.nodes])
        root = graph.graph["root"]
        # A join of one child would only forward that child's reply (per-node over nodes: a join
        # per node reading just its own node): the child answers the join above directly. Not so
        # where stages run over a node's own records: there, that join cuts what leaves its node.
        for join in [v for v in graph if isinstance(v, LayoutJoin) and v != root and graph.in_degree(v) == 1
                     and (not settings.stages or isinstance(next(iter(graph.predecessors(v))), LayoutJoin))]:
            (child,), (parent,) = graph.predecessors(join), graph.successors(join)
            graph.remove_node(join)
            graph.add_edge(child, parent)
        if settings.placement == "near":
            # A join placed on the node of the join above it would cost that node a call to itself
            # per pull: the join above reads its children instead (stages compose: a join's are
            # applied at every level, so once over the union is the same). The root runs here.
            merged = True
            while merged:
                merged = False
                for join in [v for v in graph if isinstance(v, LayoutJoin) and v != root]:
                    (parent,) = graph.successors(join)
                    if parent != root and graph.nodes[join]["node"] == graph.nodes[parent]["node"]:
                        for child in list(graph.predecessors(join)):
                            graph.add_edge(child, parent)
                        graph.remove_node(join)
                        merged = True
                        break
        import networkx as nx  # here, not at import: node processes never need it (25 MB of RSS each)
        depth = nx.shortest_path_length(graph.reverse(copy=False), root)
        # The nodes whose trace elements each join's subtree reads (edges lead up: its ancestors).
        reads = {v: {m.name for m in nx.ancestors(graph, v) if isinstance(m, Member)}
                 for v in graph if isinstance(v, LayoutJoin)}
        prefix = f"{self._id}.{self._generation}"
        near = settings.placement == "near"
        keys = {v: f"{prefix}/{v.label}" for v in graph if isinstance(v, LayoutJoin)}
        specs = []
        for join in sorted(keys, key=lambda j: -depth[j]):   # leaves' joins first, root last
            node = graph.nodes[join]["node"] if near and join != root else None   # the root: here
            leaves: dict[str, list[str]] = {}
            children = []
            for child in graph.predecessors(join):
                if isinstance(child, Member):
                    leaves[child.name] = held[child.name]
                else:
                    children.append([graph.nodes[child]["node"] if near else None, keys[child],
                                     sorted(reads[child])])
            stages = [s for s in settings.stages if not s.startswith("convert")]
            cursors = {key: self._cursors[key] for key in (f"{n}/{name}" for n, names in leaves.items()
                                                           for name in names) if key in self._cursors}
            # A join waits less than its parent does, so that a node that does not answer is
            # reported by the join that asked it, and the parent still hears from that join.
            levels = max(depth.values()) + 1
            # (A join on a node waits at most JoinLimits.max_timeout: its parent, longer, hears from it.)
            timeout = (min(self.timeout * (levels - depth[join]) / (levels + 1), JoinLimits().max_timeout) if near
                       else self.timeout)
            specs.append(JoinSpec(keys[join], depth[join], node, leaves, children, stages, self.mode,
                                  settings.concurrency, timeout, dict(self.endpoints), cursors))
        check_tree([ScopeStage.parse(s, pm.allow_modules) for s in settings.stages], [s.leaves for s in specs],
                   self.catalogue)
        return specs

    def _ring_starts(self) -> dict[str, int]:
        """The first index each trace element of the view holds now, by "node/element" (a node
        that does not answer is left out: its stream starts where its rings are at the first read)."""
        names: dict[str, list[str]] = {}
        for entry in self.entries:
            names.setdefault(entry.trace_node, []).append(entry.trace)
        starts = {}
        for node, mine in names.items():
            try:
                with pastset.connect(self.endpoints[node], timeout=self.timeout) as client:
                    held = client.range_many(mine, [0] * len(mine), 0)
            except PastSetError:
                continue
            starts.update((f"{node}/{name}", start) for name, (start, _) in zip(mine, held))
        return starts

    def follow(self) -> bool:
        """Take in the collectors that the run's pathmap has gained since the scope was made (an MPI
        run's new communicators) and that the view selects; whether there were any. Costs one stat of
        the run's pathmap snapshot while it has not changed; `pull` calls it first. In stream mode
        the new collectors' records are read from their first (nothing of them came before)."""
        if self._snapshot is None:
            return False
        path, seen = self._snapshot
        try:
            changed = _version(path)
        except OSError:
            return False   # the run ended: its snapshot is gone
        if changed == seen:
            return False
        self._snapshot = (path, changed)
        try:
            pathmap = Pathmap.load(path)
        except (OSError, ValueError, PastSetError):
            return False   # caught while being rewritten (never half-written: the next look reads it)
        catalogue = Catalogue(pathmap)
        if catalogue.entries[:len(self.catalogue.entries)] != self.catalogue.entries:
            return False   # not grown but replaced: not the run this scope was made for
        entries = self.view.select(catalogue)
        known = {e.id for e in self.entries}
        new = [e for e in entries if e.id not in known]
        if not new:
            return False
        joined = [n.name for n in pathmap.nodes if n.name not in self.endpoints]   # an MPI run's spawned ranks
        endpoints = self._endpoints_of(joined)
        if endpoints is None:
            self._snapshot = (path, seen)   # the run file does not list them yet: the next look
            return False
        with self._mutex:
            self._drain()
            self.endpoints.update(endpoints)
            for node, endpoint in endpoints.items():
                self._fanout.add(node, endpoint)
            self._cursors = self._collect_cursors()
            if self.mode == "stream":
                self._cursors.update((f"{e.trace_node}/{e.trace}", 0) for e in new)
                self._starts.update((f"{e.trace_node}/{e.trace}", 0) for e in new)
            old_installed = self._installed
            self.pathmap, self.catalogue, self.entries = pathmap, catalogue, entries
            self._generation += 1
            self._build()
            self._remove(old_installed)
        return True

    def _endpoints_of(self, nodes: list[str]) -> dict[str, str] | None:
        """Where `nodes`, which joined the run after the scope was made, serve: from the run file
        (which lists them before its snapshot has them); None where it does not list them all."""
        if not nodes:
            return {}
        try:
            listed = RunFile.find(self._run_file).endpoints if self._run_file is not None else {}
        except (PastSetError, RunError, OSError, ValueError):
            return None
        return {n: listed[n] for n in nodes} if all(n in listed for n in nodes) else None

    def account(self) -> Account:
        """Stream mode: what the view's collectors made, as of the last pull, and what became of it
        (Account). A pull reads up to each ring's end, so after a final pull that the collectors did
        not write behind (the program had ended), `made` is all they made. ScopeError in other modes."""
        if self.mode != "stream":
            raise ScopeError("account() needs a stream scope: latest and backlog modes read no cursors")
        with self._mutex:
            cursors = self._collect_cursors()
        return Account(made=sum(cursors.values()), before=sum(self._starts.values()),
                       read=self._stats.tuples if not self.settings.stages else None,
                       discarded=self._stats.discarded, ignored=sum(self.ignored.values()))

    def _build(self) -> None:
        specs = self.plan()
        installed, silent = self._install(specs)
        if silent:
            # A node that did not answer (paused, hung in a call that holds its GIL, gone) is what the
            # monitor is to report, not a reason to fail: its join, and every join above it, run here
            # instead, and read that node remotely; pulls name it until it answers again.
            here = _here(specs, silent)
            self._remove([(node, key) for node, key in installed if key in here])
            installed = [(node, key) for node, key in installed if key not in here]
            specs = [replace(spec, node=None, children=[[None if key in here else node, key, reads]
                                                        for node, key, reads in spec.children])
                     if spec.key in here else spec for spec in specs]
        self._specs = specs
        self._root = specs[-1]
        self._joins = self._monitor_joins(specs)
        self._installed = installed

    def _install(self, specs: list[JoinSpec]) -> tuple[list[tuple[str, str]], set[str]]:
        """Place the near joins of `specs` on their nodes, in one round: ([(node, key)] placed, the keys
        of those whose node did not answer). A node that refused one raises (nothing stays placed)."""
        # Placing a join happens once per tree, not per pull: a busy node gets longer than a pull's
        # timeout, since a join not placed on its node runs here, reading that node remotely.
        placing = self._fanout.round(max(self.timeout, PLACE_TIMEOUT))
        replies = [(spec, placing.call(spec.node, INSTALL, spec.wire(), self.lease)) for spec in specs
                   if spec.node is not None]
        placing.wait()
        installed = [(spec.node, spec.key) for spec, reply in replies if reply.ok]
        refused = [reply for _, reply in replies if reply.error is not None]
        if refused:
            self._remove(installed)
            refused[0].result()
        return installed, {spec.key for spec, reply in replies if not reply.answered}

    def _monitor_joins(self, specs: list[JoinSpec]) -> dict[str, GatherJoin]:
        """The joins of `specs` that run in this process, by key (each finds its children among them)."""
        joins: dict[str, GatherJoin] = {}
        for spec in specs:
            if spec.node is None:
                joins[spec.key] = GatherJoin(spec, self.catalogue, joins=joins)
        return joins

    def _remove(self, installed) -> dict[str, int]:
        """Remove near joins (best effort: a node that is gone drops them when their lease ends)."""
        if not installed:
            return {}
        return self._ask_each(self._fanout, [(node, REMOVE, key) for node, key in installed])

    def _ask_each(self, fanout, calls) -> dict[str, int]:
        """Make the hosted calls [(node, name, *args)] in one round; the dicts they answered with,
        merged (best effort: a node that does not answer adds nothing)."""
        asking = fanout.round(self.timeout)
        replies = [asking.call(*call) for call in calls]
        asking.wait()
        merged: dict = {}
        for reply in replies:
            if reply.ok and isinstance(reply.value, dict):
                merged.update(reply.value)
        return merged

    # -- pulling -------------------------------------------------------------------------------

    def pull(self) -> Pull:
        """Pull the tree once: blocks at most about `timeout` seconds (nodes that do not answer are
        listed in `missing`; when a node holding a near join is one of them, the nodes whose
        records that join would have read are listed in `unreached`), and, with `max_rate`,
        until the rate allows another pull."""
        if self._closed:
            raise ScopeError("the scope is closed")
        self.follow()
        with self._mutex:
            rate = self.settings.max_rate
            if rate:
                wait = self._last_pull + 1.0 / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            self._last_pull = time.monotonic()
            started = time.perf_counter()
            if self.pipeline > 1:
                pulled, took, bytes_in, bytes_out = self._pipelined()
            else:
                pulled, took, bytes_in, bytes_out = self._pull_once(self._joins, self._root.key, self._fanout)
            records = self._correct(pulled.records, pulled.ignored)
            stats = self._stats
            stats.pulls += 1
            stats.seconds += time.perf_counter() - started   # waited here: pulls in flight overlap
            stats.tuples += len(records)
            stats.discarded += pulled.discarded
            stats.bytes_in += bytes_in
            stats.bytes_out += bytes_out
            for level, values in pulled.levels.items():
                mine = stats.levels.setdefault(level, [0.0, 0, 0])
                for i, v in enumerate(values):
                    mine[i] += v
            if pulled.ignored:
                self.ignored.merge(pulled.ignored)
                pulled.ignored.tell(self._told, f"scope {self.name}")
            if self.settings.stages and self.settings.stages[-1].startswith("convert"):
                records = self.catalogue.label(records)
            return Pull(records, pulled.discarded, pulled.missing, took, pulled.gone,
                        pulled.unreached - pulled.missing, pulled.ignored)

    @staticmethod
    def _pull_once(joins: dict, root: str, fanout) -> tuple[Pulled, float, int, int]:
        """One pull of the tree from `root` through `fanout`: (what it brought, seconds, bytes in, out)."""
        started = time.perf_counter()
        sent, received = fanout.bytes_sent, fanout.bytes_received
        pulled = joins[root].pull(fanout)
        return (pulled, time.perf_counter() - started, fanout.bytes_received - received,
                fanout.bytes_sent - sent)

    @staticmethod
    def _checked_lease(lease) -> float:
        try:
            return JoinLimits().lease(lease)
        except PastSetError as exc:
            raise ScopeError(f"lease: {exc}") from None

    def _checked_pipeline(self, pipeline) -> int:
        if isinstance(pipeline, bool) or not isinstance(pipeline, int) or not 1 <= pipeline <= MAX_PIPELINE:
            raise ScopeError(f"pipeline must be a whole number from 1 to {MAX_PIPELINE} (pulls in flight), "
                             f"got {pipeline!r}")
        if pipeline > 1 and self.mode == "stream":
            raise ScopeError("pipeline > 1 needs latest or backlog mode: in stream mode, pulls in flight "
                             "together would each read from the same cursors, and deliver records twice")
        return pipeline

    def _pipelined(self) -> tuple[Pulled, float, int, int]:
        """Keep `pipeline` pulls in flight, each through a slot of its own; the oldest one's result."""
        if self._slots is None:
            from concurrent.futures import ThreadPoolExecutor

            self._slots = SimpleQueue()
            for _ in range(self.pipeline):
                self._slots.put((self._monitor_joins(self._specs), Fanout(self.endpoints)))
            if self._pool is None:
                self._pool = ThreadPoolExecutor(MAX_PIPELINE, thread_name_prefix=f"{self.name}-pipeline")
        root, slots = self._root.key, self._slots
        while len(self._inflight) < self.pipeline:
            self._inflight.append(self._pool.submit(self._pull_in_slot, slots, root))
        return self._inflight.popleft().result()

    def _pull_in_slot(self, slots: SimpleQueue, root: str) -> tuple[Pulled, float, int, int]:
        joins, fanout = slots.get()
        try:
            return self._pull_once(joins, root, fanout)
        finally:
            slots.put((joins, fanout))

    def _drain(self) -> None:
        """Wait out the pulls in flight (their results are dropped) and let the slots go: the tree
        is about to change, or the scope to close."""
        while self._inflight:
            try:
                self._inflight.popleft().result()
            except Exception:   # a pull of the tree that is going: nobody waits for its result
                pass
        if self._slots is not None:
            while not self._slots.empty():
                self._slots.get()[1].close()
            self._slots = None

    def _correct(self, records: np.ndarray, ignored: Ignored) -> np.ndarray:
        """Timestamps on the monitor's clock: each node's estimated offset taken off its events.
        A record is left out (counted in `ignored`) whose time would fall before 0 on the
        monitor's clock, or whose end, on the monitor's clock, comes after now by more than
        CLOCK_SLACK_NS (far more than an estimate's error): no clock read them so."""
        if not self.clock_offsets or not len(records):
            return records
        column = self.catalogue.column("node")
        names = self.catalogue.names("node")
        offsets = np.array([self.clock_offsets.get(n, 0) for n in names], dtype=np.int64)
        synced = np.array([n in self.clock_offsets for n in names])[column[records["collector"]]]
        shift = offsets[column[records["collector"]]]
        t_start = records["t_start"].astype(np.int64) - shift   # times are below 2**62 (eventspace.ignored)
        t_end = records["t_end"].astype(np.int64) - shift
        before = (t_start < 0) | (t_end < 0)
        after = synced & (t_end > time.monotonic_ns() + CLOCK_SLACK_NS)
        out = records.copy()
        out["t_start"], out["t_end"] = np.maximum(t_start, 0), np.maximum(t_end, 0)
        if before.any() or after.any():
            ignored.add(BAD_TIMES, np.count_nonzero(before))
            ignored.add(NOT_ON_CLOCK, np.count_nonzero(after & ~before))
            out = out[~(before | after)]
        return out

    def gone(self, nodes) -> set[str]:
        """Of `nodes` that did not answer this scope (a pull's or `in_flight`'s missing ones), those
        whose connection is closed: gone, where the others are only not answering."""
        return self._fanout.gone(nodes)

    def in_flight(self, skip=()) -> tuple[dict[int, int], set[str]]:
        """The view's collectors timing an operation right now: ({collector id: its start, ns on
        the collector's node clock}, nodes that did not answer). A thread blocked in an observe
        or a collective shows here before any record of that operation exists. Nodes in `skip`
        (say, those the last pull found missing) are not asked."""
        marks, missing = self.in_flight_marks(skip)
        return {cid: mark.t_start for cid, mark in marks.items()}, missing

    def in_flight_marks(self, skip=()) -> tuple[dict[int, Mark], set[str]]:
        """As `in_flight`, with what each collector marked it is timing (MPI collectors do):
        ({collector id: Mark(t_start, op, flags, element, arg, nbytes)}, nodes that did not
        answer); the fields are the record's as known when the operation began, and op is 0
        (the other fields too) for a collector that leaves no mark."""
        look = self.look(skip, marks=True)
        return look.marks, look.missing

    def switched_off(self, skip=()) -> tuple[set[int], set[str]]:
        """The view's collectors switched off now (`eventspace space switch`): (their ids, nodes that
        did not answer). Nodes in `skip` are not asked."""
        look = self.look(skip, off=True)
        return look.off, look.missing

    def thread_states(self, stacks: bool = True, depth: int = DEPTH, skip=()) -> tuple[dict[str, ThreadState], set[str]]:
        """Where the view's threads are now, as their own processes see them (paths.stack): ({thread:
        ThreadState: CPU time, with `stacks` the Python stack, at most `depth` frames; a thread that
        raised, its error}, nodes that did not answer). Nodes in `skip` are not asked."""
        look = self.look(skip, threads=True, stacks=stacks, depth=depth)
        return look.threads, look.missing

    def look(self, skip=(), *, marks: bool = False, off: bool = False, threads: bool = False,
             stacks: bool = False, depth: int = DEPTH) -> Look:
        """What the view's collectors and threads are doing now (`look`, in one round of this scope's
        fan-out); nodes in `skip` are not asked."""
        with self._mutex:
            return look(self._fanout, self.pathmap, self.entries, self.timeout, skip, marks=marks, off=off,
                        threads=threads, stacks=stacks, depth=depth)

    # -- reshaping -------------------------------------------------------------------------------

    def reconfigure(self, *, tree: str | None = None, placement: str | None = None,
                    concurrency: str | None = None, stages=None, max_rate: float | None = ...,
                    pipeline: int | None = None) -> None:
        """Swap the gather tree while the application runs. In stream mode, no record is lost or
        repeated across the swap: the read cursors move from the old joins to the new ones. The
        pulls in flight (`pipeline`) finish on the old tree first; their results are dropped."""
        pipeline = self._checked_pipeline(pipeline) if pipeline is not None else self.pipeline
        settings = self.settings
        new = TreeSettings(
            tree if tree is not None else settings.shape,
            placement if placement is not None else settings.placement,
            concurrency if concurrency is not None else settings.concurrency,
            tuple(stages) if stages is not None else settings.stages,
            settings.max_rate if max_rate is ... else max_rate,
        ).checked(self.pathmap.allow_modules)
        self.plan(new)   # a tree the stages cannot run on fails here, before anything changes
        with self._mutex:
            self._drain()
            self.pipeline = pipeline
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
            cursors.update(self._ask_each(self._fanout, [(node, CURSORS, key) for node, key in self._installed]))
        return cursors

    # -- figures, leases, closing ------------------------------------------------------------------

    def stats(self) -> ScopeStats:
        return replace(self._stats, levels={k: list(v) for k, v in self._stats.levels.items()})

    def installed(self) -> list[tuple[str, str]]:
        """(node, key) of the joins this scope has placed in node servers."""
        return list(self._installed)

    def roster_entry(self, open: bool = True) -> ScopeEntry:
        """This scope's report to the run's roster, as of now."""
        s, stats = self.settings, self._stats
        return ScopeEntry(self._id, self.name, self._monitor, str(self.view), s.shape, s.placement, self.mode,
                          len(self.entries), float(s.max_rate or 0.0), stats.pulls, stats.seconds, stats.tuples,
                          stats.bytes_in, stats.bytes_out, time.time(), open)

    def _renew_loop(self) -> None:
        """Renews the near joins' leases every third of a lease, and reports to the roster."""
        fanout = None
        roster = RosterWriter(self.endpoints[roster_node(self.pathmap)], self.timeout)
        every = max(0.05, self.lease / 3)
        renewed = time.monotonic()
        while not self._closing.wait(min(every, REPORT_EVERY)):
            roster.write(self.roster_entry())
            if time.monotonic() - renewed < every:
                continue
            renewed = time.monotonic()
            with self._mutex:
                installed = list(self._installed)
            if not installed:
                continue
            if fanout is None:
                fanout = Fanout(self.endpoints)  # this thread's own sockets
            by_node: dict[str, list[str]] = {}
            for node, key in installed:
                by_node.setdefault(node, []).append(key)
            self._ask_each(fanout, [(node, RENEW, keys, self.lease) for node, keys in by_node.items()])
        if fanout is not None:
            fanout.close()
        if roster.wrote and roster.connected:  # gone from dashboards at once, not after STALE_AFTER
            roster.write(self.roster_entry(open=False))
        roster.close()

    def close(self) -> None:
        """Remove every join this scope placed on node servers; the scope cannot pull after."""
        if self._closed:
            return
        with self._mutex:
            self._closed = True
            self._closing.set()
            self._drain()
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._remove(self._installed)
            self._installed = []
        self._renewer.join(timeout=self.timeout + 1)
        self._fanout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _here(specs: list[JoinSpec], keys: set[str]) -> set[str]:
    """The keys of the joins in `keys` and of every join above them (a join placed on a node reads
    its children on nodes: one whose child runs in the monitor must run there too)."""
    parent = {key: spec.key for spec in specs for _, key, _ in spec.children}
    here = set()
    for key in keys:
        while key is not None and key not in here:
            here.add(key)
            key = parent.get(key)
    return here


def look(fanout: Fanout, pathmap: Pathmap, entries, timeout: float, skip=(), *, marks: bool = False,
         off: bool = False, threads: bool = False, stacks: bool = False, depth: int = DEPTH) -> Look:
    """What the collectors `entries` (catalogue entries of `pathmap`) and their threads are doing now,
    asked of their nodes through `fanout` in one round (one request each, all at once, within
    `timeout` seconds; nodes in `skip` are not asked): with `marks`, the operations the collectors
    time (EventScope.in_flight_marks), with `off` the collectors switched off, with `threads` where
    the threads are (EventScope.thread_states: CPU time and, with `stacks`, the Python stack). A node
    busy in a C call that holds the GIL cannot answer: it is among the missing after the timeout.
    Nothing is captured on the nodes until this is called."""
    mine = {e.id for e in entries}
    wanted = {e.thread for e in entries if e.thread}
    node_of = {t.name: t.node for t in pathmap.threads}
    collector_nodes = {e.node for e in entries} if marks or off else set()
    thread_nodes = {node_of[t] for t in wanted if t in node_of} if threads else set()
    nodes = sorted((collector_nodes | thread_nodes) - set(skip))
    asking = fanout.round(timeout)
    asked = []
    for node in nodes:
        if node in collector_nodes and marks:
            asked.append(("marks", asking.call(node, INFLIGHT)))
        if node in collector_nodes and off:
            asked.append(("off", asking.call(node, OFF)))
        if node in thread_nodes:
            asked.append(("threads", asking.call(node, THREADS, bool(stacks), int(depth))))
    missing = asking.wait()
    found = Look({}, set(), {}, missing)
    for what, reply in asked:
        value = reply.value if reply.ok else None
        if what == "marks" and isinstance(value, list):
            found.marks.update((row[0], Mark(*row[1:7]) if len(row) == 7 else Mark(row[1], 0, 0, 0, 0, 0))
                               for row in value if row[0] in mine)
        elif what == "off" and isinstance(value, list):
            found.off.update(cid for cid in value if cid in mine)
        elif what == "threads" and isinstance(value, dict):
            found.threads.update((t, ThreadState.from_wire(t, reply.node, data)) for t, data in value.items()
                                 if t in wanted)
        elif reply.answered:
            missing.add(reply.node)
    return found


def _live_run_file(run) -> RunFile | None:
    """The run file of the run `run` names, or None for a pathmap given as such (nothing to follow)."""
    if isinstance(run, Pathmap):
        return None
    run_file = run.run_file if hasattr(run, "run_file") else run   # a paths.Run holds its RunFile
    if not isinstance(run_file, RunFile):
        try:
            run_file = RunFile.find(os.fspath(run_file))
        except (PastSetError, TypeError):
            return None
    return run_file


def _snapshot_of(run) -> tuple[str, int] | None:
    """(the path of the pathmap snapshot of the run `run` names, its `_version`), or None for a
    pathmap given as such (nothing to follow)."""
    run_file = _live_run_file(run)
    if run_file is None:
        return None
    try:
        return run_file.pathmap_file, _version(run_file.pathmap_file)
    except OSError:
        return None


def _run_file_of(run) -> str | None:
    """The path of the run file of the run `run` names (None: a pathmap given as such)."""
    run_file = _live_run_file(run)
    return None if run_file is None else run_file.path


def _version(path: str) -> tuple[int, int]:
    """What tells a rewritten file apart (it is replaced whole: a new inode)."""
    status = os.stat(path)
    return status.st_ino, status.st_mtime_ns


def resolve(run) -> tuple[Pathmap, dict[str, str]]:
    """(pathmap, node endpoints) of what `run` names (what EventScope accepts as its run)."""
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
