"""Gather joins: the inner stages of an event scope's tree, run in a monitor or inside a node server."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields

import numpy as np

from pastset import BadArgument, LimitExceeded
from pastset.deferred import Deferred

from . import trace
from .catalogue import Catalogue
from .hosted import PULL
from .ignored import Ignored, check, decoded
from .stages import ScopeStage, StageError, compile_stages

MODES = ("latest", "stream", "backlog")
CONCURRENCY = ("concurrent", "sequential")
_END = 1 << 62  # read_range's hi for "everything held"
_NONE: frozenset = frozenset()  # a leaf read that fails leaves no other node unreached


@dataclass
class Pulled:
    """What one pull of a join brought: records, how many were discarded before they were read
    (stream mode), which nodes did not answer (`missing`) and which of those are gone (their
    connection closed; the others are not answering), which nodes' events did not come because a
    join between them and this one did not answer (`unreached`: they were not asked, so nothing
    is known of them), per tree level (seconds, tuples, bytes in), and the records left out
    because they did not pass eventspace.ignored's check (`ignored`, by reason)."""

    records: np.ndarray
    discarded: int = 0
    missing: set[str] = field(default_factory=set)
    levels: dict[int, list] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    unreached: set[str] = field(default_factory=set)
    ignored: Ignored = field(default_factory=Ignored)

    def wire(self) -> list:
        return [trace.encode(self.records), self.discarded, sorted(self.missing),
                {str(k): v for k, v in self.levels.items()}, sorted(self.gone), sorted(self.unreached),
                dict(self.ignored)]

    @classmethod
    def from_wire(cls, reply, catalogue: Catalogue) -> Pulled:
        """A child join's reply; its records pass `check` here too (what it left out is counted
        in). ValueError or TypeError for a reply that is not a join's."""
        data, discarded, missing, levels, gone, unreached, ignored = reply
        out = cls(trace.empty(), int(discarded), set(missing), {int(k): list(v) for k, v in levels.items()},
                  set(gone), set(unreached))
        out.ignored.merge(ignored)
        out.records = decoded(data, catalogue, out.ignored)
        return out

    def merge(self, other: Pulled) -> None:
        """Count in what a child join brought (its records are the caller's to keep)."""
        self.discarded += other.discarded
        self.missing |= other.missing
        self.gone |= other.gone
        self.unreached |= other.unreached
        self.merge_levels(other.levels)
        self.ignored.merge(other.ignored)

    def add_level(self, level: int, seconds: float, tuples: int, nbytes: int) -> None:
        mine = self.levels.setdefault(level, [0.0, 0, 0])
        mine[0] += seconds
        mine[1] += tuples
        mine[2] += nbytes

    def merge_levels(self, levels: dict) -> None:
        for level, (seconds, tuples, nbytes) in levels.items():
            self.add_level(int(level), seconds, tuples, nbytes)


@dataclass
class JoinSpec:
    """One join of a scope's tree, as plain data (it travels to node servers when placed `near`).

    `node` is where it runs (None: in the monitor). `leaves` maps a node to the trace elements
    there that the join reads itself; `children` lists the joins below it as [node, key, nodes]:
    `nodes` are those whose trace elements the child's subtree reads (unreached if it does not
    answer).
    """

    key: str
    level: int
    node: str | None
    leaves: dict[str, list[str]]
    children: list[list]
    stages: list[str]
    mode: str
    concurrency: str
    timeout: float
    endpoints: dict[str, str]
    cursors: dict[str, int] = field(default_factory=dict)   # "node/element" -> next index (stream; absent:
                                                            # start where the ring is at the first read)

    def wire(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def placed(cls, wire, node: str, catalogue: Catalogue, limits: JoinLimits) -> JoinSpec:
        """The join `wire` describes (what `wire()` gives), checked to run on node `node` of the run
        `catalogue` describes, as a client of that node may have sent anything: one error for the
        first field that is not as a scope sends it (BadArgument), or over `limits` (LimitExceeded
        naming the limit). Its leaves are the catalogue's own names (each a trace element of the run
        on the node it is listed under, once); its children, nodes of the run."""
        if not isinstance(wire, dict):
            raise BadArgument(f"a scope join is a map of {', '.join(_FIELDS)}, got {type(wire).__name__}")
        key = _text(wire.get("key"), "key", limits.max_key, "JoinLimits.max_key")
        check = _Check(key, limits)
        unknown = sorted(map(str, set(wire) - set(_FIELDS)))
        missing = [f for f in _FIELDS if f not in wire and f != "cursors"]
        if unknown or missing:
            check.fail(f"unknown fields {unknown}" if unknown else f"missing fields {missing}")
        nodes = {n.name for n in catalogue.pathmap.nodes}
        level = wire["level"]
        if type(level) is not int or not 0 <= level < limits.max_levels:
            check.limit("level", level, f"a whole number from 0 below {limits.max_levels}", "max_levels",
                        type(level) is int and level > 0)
        if wire["node"] != node:
            check.fail(f"it is placed on node {node} but names node {wire['node']!r}")
        leaves = check.leaves(wire["leaves"], nodes, catalogue)
        children = check.children(wire["children"], nodes)
        stages = check.stages(wire["stages"], catalogue.pathmap.allow_modules)
        mode, concurrency = wire["mode"], wire["concurrency"]
        if mode not in MODES:
            check.fail(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if concurrency not in CONCURRENCY:
            check.fail(f"unknown concurrency {concurrency!r}; use one of {', '.join(CONCURRENCY)}")
        timeout = check.seconds("timeout", wire["timeout"], limits.max_timeout, "max_timeout")
        endpoints = check.endpoints(wire["endpoints"], nodes)
        cursors = check.cursors(wire.get("cursors", {}), leaves)
        return cls(key, level, node, leaves, children, stages, mode, concurrency, timeout, endpoints, cursors)


@dataclass(frozen=True)
class JoinLimits:
    """What a node accepts of a scope join that a client places on it (`JoinSpec.placed`,
    eventspace.space.NodeSpace.install); each breach is a LimitExceeded naming the limit.

    A join reads at most `max_leaves` trace elements (each one of the run's, on the node it is
    listed under, once) and pulls at most `max_children` joins below it, whose levels are
    greater than its own (a tree has at most `max_levels`; so no join is its own descendant, on
    one node or across nodes); it applies at most `max_stages` stages of at most `max_stage`
    characters each; a pull waits at most `max_timeout` seconds for its children, and a lease
    runs at most `max_lease` seconds without renewal. A node holds at most `max_joins` joins,
    `max_joins_per_client` of them placed by one client (connection), and each is counted in the
    node's memory budget (pastset.Limits.max_memory) while it is there.

    The defaults hold every tree a scope lays out over the repository's largest run with room to
    spare (the paper's layout: 1,841 trace elements on 8 nodes, trees a few levels deep).
    """

    max_joins: int = 10_000
    max_joins_per_client: int = 1_000
    max_key: int = 256                 # characters of a join's key
    max_levels: int = 64
    max_leaves: int = 100_000
    max_children: int = 256
    max_stages: int = 16
    max_stage: int = 4096              # characters of one stage (a filter's expression)
    max_timeout: float = 60.0          # seconds
    max_lease: float = 600.0           # seconds

    def lease(self, lease) -> float:
        """`lease` if it is a number of seconds above 0 and at most `max_lease`; else one error."""
        return _Check(None, self).seconds("lease", lease, self.max_lease, "max_lease")


_FIELDS = tuple(f.name for f in fields(JoinSpec))
_NOT_EVER = 1 << 63   # a stream cursor past this names no record a ring ever held


def _text(value, what: str, most: int, limit: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadArgument(f"a scope join's {what} is a text, got {value!r:.60}")
    if len(value) > most:
        raise LimitExceeded(f"a scope join's {what} of {len(value):,} characters is over {most} ({limit})")
    return value


class _Check:
    """The checks of one placed join's fields; every error names the join and the field."""

    def __init__(self, key: str | None, limits: JoinLimits):
        self.key = key
        self.limits = limits
        self.named = "a scope join" if key is None else f"scope join {key!r}"

    def fail(self, what: str):
        raise BadArgument(f"{self.named}: {what}")

    def limit(self, field: str, value, expected: str, limit: str, over: bool):
        """The error of a field that is not `expected`: a LimitExceeded naming JoinLimits.`limit` if
        it is `over` it, else BadArgument."""
        message = f"{self.named}: {field} must be {expected}, got {value!r:.60}"
        if over:
            raise LimitExceeded(f"{message} (JoinLimits.{limit})")
        raise BadArgument(message)

    def seconds(self, field: str, value, most: float, limit: str) -> float:
        number = type(value) in (int, float)
        if not number or not (0 < value <= most):
            self.limit(field, value, f"a number of seconds above 0 and at most {most:g}", limit,
                       number and not math.isnan(value) and value > most)
        return float(value)

    def count(self, field: str, value, most: int, limit: str):
        """`value`, a list of at most `most` items."""
        if not isinstance(value, list):
            self.fail(f"{field} must be a list, got {type(value).__name__}")
        if len(value) > most:
            raise LimitExceeded(f"{self.named}: {len(value):,} {field} is over {most:,} "
                                f"(JoinLimits.{limit})")
        return value

    def leaves(self, leaves, nodes: set[str], catalogue: Catalogue) -> dict[str, list[str]]:
        limits = self.limits
        if not isinstance(leaves, dict) or len(leaves) > len(nodes):
            self.fail(f"leaves must map nodes of this run to lists of their trace elements, got {leaves!r:.60}")
        total = sum(len(names) if isinstance(names, list) else 0 for names in leaves.values())
        if total > limits.max_leaves:
            raise LimitExceeded(f"{self.named}: {total:,} leaves is over {limits.max_leaves:,} "
                                "(JoinLimits.max_leaves)")
        out: dict[str, list[str]] = {}
        for node, names in leaves.items():
            if node not in nodes:
                self.fail(f"leaves: {node!r} is not a node of this run")
            if not isinstance(names, list):
                self.fail(f"leaves of {node}: a list of trace element names, got {type(names).__name__}")
            mine = out[node] = []
            for name in names:
                try:
                    entry = catalogue.by_trace(name)
                except (KeyError, TypeError):
                    entry = None
                if entry is None or entry.trace_node != node:
                    self.fail(f"leaves of {node}: {name!r:.60} is not a trace element of node {node}")
                mine.append(entry.trace)
            if len(set(mine)) != len(mine):
                self.fail(f"leaves of {node}: a trace element is named twice")
        return out

    def children(self, children, nodes: set[str]) -> list[list]:
        self.count("children", children, self.limits.max_children, "max_children")
        out, seen = [], set()
        for child in children:
            if not (isinstance(child, list) and len(child) == 3 and isinstance(child[2], list)):
                self.fail(f"children: each child is [node, key, [nodes below it]], got {child!r:.60}")
            node, key, below = child
            if not isinstance(node, str) or node not in nodes:
                self.fail(f"children: {node!r:.60} is not a node of this run")
            _text(key, "child's key", self.limits.max_key, "JoinLimits.max_key")
            if key == self.key:
                self.fail("a join cannot be its own child")
            if (node, key) in seen:
                self.fail(f"children: {key!r} on {node} is named twice")
            seen.add((node, key))
            if len(below) > len(nodes) or not all(isinstance(n, str) and n in nodes for n in below):
                self.fail(f"children: the nodes below {key!r} must be nodes of this run, each once")
            out.append([node, key, list(dict.fromkeys(below))])
        return out

    def stages(self, stages, allow_modules) -> list[str]:
        limits = self.limits
        self.count("stages", stages, limits.max_stages, "max_stages")
        for text in stages:
            if not isinstance(text, str):
                self.fail(f"stages: each stage is a text, got {text!r:.60}")
            if len(text) > limits.max_stage:
                raise LimitExceeded(f"{self.named}: a stage of {len(text):,} characters is over "
                                    f"{limits.max_stage:,} (JoinLimits.max_stage)")
            try:
                ScopeStage.parse(text, allow_modules)
            except StageError as exc:
                self.fail(str(exc))
        return list(stages)

    def endpoints(self, endpoints, nodes: set[str]) -> dict[str, str]:
        if not isinstance(endpoints, dict) or len(endpoints) > len(nodes):
            self.fail(f"endpoints must map nodes of this run to addresses, got {endpoints!r:.60}")
        for node, endpoint in endpoints.items():
            if node not in nodes or not isinstance(endpoint, str) or len(endpoint) > self.limits.max_key:
                self.fail(f"endpoints: {node!r:.40} -> {endpoint!r:.60} is not a node of this run and an address")
        return dict(endpoints)

    def cursors(self, cursors, leaves: dict[str, list[str]]) -> dict[str, int]:
        read = {f"{node}/{name}" for node, names in leaves.items() for name in names}
        if not isinstance(cursors, dict) or len(cursors) > len(read):
            self.fail(f"cursors must map its leaves (node/trace element) to indices, got {cursors!r:.60}")
        for name, index in cursors.items():
            if name not in read:
                self.fail(f"cursors: {name!r:.60} is not one of its leaves (node/trace element)")
            if type(index) is not int or not 0 <= index < _NOT_EVER:
                self.fail(f"cursors: the cursor of {name} must be an index from 0, got {index!r:.40}")
        return dict(cursors)


class GatherJoin:
    """A gather join: pulls its leaves and child joins (concurrently or one by one), then applies
    its stages. Everything it reads goes through one round of a `pastset.Fanout` (a join placed
    `near` reaches its own node's trace elements through the fan-out's `local://` endpoint of
    that node: direct calls, no socket). `joins` are the other joins in the same process, by key:
    a child among them is pulled in the same round rather than asked for by a hosted call.
    """

    def __init__(self, spec: JoinSpec, catalogue: Catalogue, joins=None, clock=None, started: int = 0):
        self.spec = spec
        self.catalogue = catalogue
        self.joins = joins if joins is not None else {}
        # A join placed on a node (`clock`: that node's clock, `started`: when the node started on
        # it) reads its own node's trace elements where their collectors time: a record of them
        # cannot start before the node did, nor end after it is read.
        self._clock = clock
        self._started = started
        self._timed_here = np.zeros(len(catalogue.entries) + len(catalogue.system) + 1, dtype=bool)
        for entry in catalogue.entries + catalogue.system:
            self._timed_here[entry.id] = entry.node == spec.node and entry.trace_node == spec.node
        self.apply = compile_stages([ScopeStage.parse(s, catalogue.pathmap.allow_modules) for s in spec.stages],
                                    catalogue)
        self.cursors = dict(spec.cursors)
        # Placed on a node (eventspace.space.NodeSpace.install): where it reaches the nodes it reads,
        # its lease (seconds, and until when), who placed it and the bytes the node counts for it.
        self.endpoints: dict[str, str] = {}
        self.lease = self.lease_until = 0.0
        self.owner: tuple | None = None
        self.charge = 0
        # The names each leaf read asks for, one list per node, the same objects pull after pull:
        # the fan-out encodes them once.
        self._los = {node: [0] * len(names) for node, names in spec.leaves.items()}
        # Nodes whose newest records (latest mode) are read element by element: one of their trace
        # elements was found holding records of another size (see _leaf_reply).
        self._element_by_element: set[str] = set()

    def pull(self, fanout) -> Pulled:
        """Pull this join and, in the same round of requests, every join below it in this process."""
        return self.start(fanout).wait()

    def start(self, fanout) -> Deferred:
        """`pull` without waiting: the round's requests are sent, and the Deferred (its
        exchange) gives the Pulled once their replies are in (see pastset.deferred)."""
        pulls = fanout.round(self.spec.timeout, sequential=self.spec.concurrency == "sequential")
        asked: list = []   # (Reply, what to do with its value, nodes unreached if it fails)
        finish = self._gather(pulls, asked, {self.spec.key})
        before = fanout.bytes_received
        return pulls.start().then(lambda missing: self._combine(fanout, asked, finish, missing, before))

    def _combine(self, fanout, asked: list, finish, missing: set[str], before: int) -> Pulled:
        """The Pulled of a round whose replies are in (or given up)."""
        nbytes = fanout.bytes_received - before
        missing = set(missing)
        unreached: set[str] = set()
        for reply, handle, below in asked:
            if not (reply.ok and _handled(handle, reply.value)):
                # No answer, or not with data (a removed join, a deleted element, a reply that is
                # not a join's): the node is missing, and the nodes a child join there would
                # have asked are unreached.
                missing.add(reply.node)
                unreached |= below
        out = finish()
        out.missing |= missing
        out.gone |= fanout.gone(missing)
        out.unreached |= unreached
        if nbytes:
            out.add_level(self.spec.level, 0.0, 0, nbytes)
        return out

    def _gather(self, pulls, asked: list, gathered: set[str]):
        """Add this join's reads and its remote children's pulls to round `pulls` (and to `asked`),
        and return the function that combines everything once the round's replies are in. A child
        in this process is gathered in the same round, once (`gathered`: the keys so far), and only
        if it is below this join (BadArgument otherwise: no pull comes back to a join it passed)."""
        started = time.perf_counter()
        spec = self.spec
        out = Pulled(trace.empty())
        parts: list[np.ndarray] = []
        for node, names in spec.leaves.items():
            reply = self._leaf_read(pulls, node, names)
            asked.append((reply, lambda value, node=node, names=names: parts.append(
                self._leaf_reply(node, names, value, out)), _NONE))
        below = []
        for node, key, nodes in spec.children:
            child = self.joins.get(key) if node == spec.node else None
            if child is not None:
                if child.spec.level <= spec.level or key in gathered:
                    raise BadArgument(f"scope join {key!r} (level {child.spec.level}) is not below join {spec.key!r} "
                                      f"(level {spec.level}), or is reached twice: a join's children are on greater "
                                      "levels, each under one join")
                gathered.add(key)
                below.append(child._gather(pulls, asked, gathered))
            else:
                asked.append((pulls.call(node, PULL, key, spec.level),
                              lambda value: parts.append(self._child_reply(value, out)), set(nodes) - {node}))

        def finish() -> Pulled:
            for child_finish in below:
                pulled = child_finish()
                records, ignored = check(pulled.records, self.catalogue)
                parts.append(records)
                out.merge(pulled)
                out.ignored.merge(ignored)
            records = trace.concat(parts)
            try:
                out.records = self.apply(records)
            except ValueError as exc:   # a stage that cannot be computed on these records (a filter's)
                raise BadArgument(f"scope join {spec.key!r}: {exc}") from None
            out.add_level(spec.level, time.perf_counter() - started, len(out.records), 0)
            return out

        return finish

    # -- leaves --------------------------------------------------------------------------------

    def _leaf_read(self, pulls, node: str, names: list):
        mode = self.spec.mode
        if mode == "latest":
            if node in self._element_by_element:
                return pulls.latest_many(node, names, 1)
            return pulls.latest_records(node, names, 1)
        los = self._los[node]
        if mode == "stream":
            cursors = self.cursors
            los[:] = [cursors.get(f"{node}/{name}", 0) for name in names]
        return pulls.range_many(node, names, los, _END)

    def _leaf_reply(self, node, names, value, out: Pulled) -> np.ndarray:
        """The records of one node's leaf read that pass eventspace.ignored's check (anyone who may
        write an element may write into a trace element): the others are counted, not read."""
        catalogue, ignored = self.catalogue, out.ignored
        clock = (self._started, self._clock(), self._timed_here) if node == self.spec.node and self._clock else None
        if value.__class__ is bytes:  # latest mode: the newest record of each, already one batch
            if len(value) % trace.SIZE:
                # One of them is not a trace element any more (made again with another template),
                # so the batch cannot be cut into records: from now on, read them one by one.
                self._element_by_element.add(node)
            return decoded(value, catalogue, ignored, from_rings=True, clock=clock)
        if self.spec.mode == "stream":
            for name, (start, data) in zip(names, value):
                key = f"{node}/{name}"
                self._advance(key, self.cursors.get(key), start, data, out)
        if all(len(data) % trace.SIZE == 0 for _, data in value):
            return decoded(b"".join([data for _, data in value]), catalogue, ignored, from_rings=True, clock=clock)
        return trace.concat([decoded(data, catalogue, ignored, from_rings=True, clock=clock) for _, data in value])

    def _advance(self, key: str, cursor: int | None, start: int, data: bytes, out: Pulled) -> None:
        """Stream mode: move a cursor past what was read; what the ring dropped between the cursor
        and `start` counts as discarded (nothing for a cursor not set yet: the stream starts here,
        nor for an element whose indices went back: it was deleted and made again)."""
        if cursor is not None and start > cursor:
            out.discarded += start - cursor
        self.cursors[key] = start + len(data) // trace.SIZE

    def _child_reply(self, reply, out: Pulled) -> np.ndarray:
        pulled = Pulled.from_wire(reply, self.catalogue)
        out.merge(pulled)
        return pulled.records


def _handled(handle, value) -> bool:
    """Whether `handle` took a reply's value: a reply that is not what was asked for (a child
    join's of another version, or something else under its key) counts as no answer."""
    try:
        handle(value)
    except (ValueError, TypeError, KeyError, AttributeError):
        return False
    return True
