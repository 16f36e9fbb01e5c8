"""Gather joins: the inner stages of an event scope's tree, run in a monitor or inside a node server."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from pastset import PastSetError
from pastset import protocol as p

from . import trace
from .catalogue import TRACE_PREFIX, Catalogue
from .stages import ScopeStage, compile_stages

PULL = "eventspace.scope.pull"
INSTALL = "eventspace.scope.install"
REMOVE = "eventspace.scope.remove"
RENEW = "eventspace.scope.renew"
LIST = "eventspace.scope.list"

MODES = ("latest", "stream", "backlog")
_END = 1 << 62  # read_range's hi for "everything held"
_NONE: frozenset = frozenset()  # a leaf read that fails leaves no other node unreached


@dataclass
class Pulled:
    """What one pull of a join brought: records, how many were discarded before they were read
    (stream mode), which nodes did not answer (`missing`) and which of those are gone (their
    connection closed; the others are not answering), which nodes' events did not come because a
    join between them and this one did not answer (`unreached`: they were not asked, so nothing
    is known of them), and per tree level (seconds, tuples, bytes in)."""

    records: np.ndarray
    discarded: int = 0
    missing: set[str] = field(default_factory=set)
    levels: dict[int, list] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    unreached: set[str] = field(default_factory=set)

    def wire(self) -> list:
        return [trace.encode(self.records), self.discarded, sorted(self.missing),
                {str(k): v for k, v in self.levels.items()}, sorted(self.gone), sorted(self.unreached)]

    @classmethod
    def from_wire(cls, reply) -> Pulled:
        data, discarded, missing, levels, gone, unreached = reply
        return cls(trace.decode(data), discarded, set(missing), {int(k): v for k, v in levels.items()},
                   set(gone), set(unreached))

    def merge(self, other: Pulled) -> None:
        """Count in what a child join brought (its records are the caller's to keep)."""
        self.discarded += other.discarded
        self.missing |= other.missing
        self.gone |= other.gone
        self.unreached |= other.unreached
        self.merge_levels(other.levels)

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


class Join:
    """A gather join: pulls its leaves and child joins (concurrently or one by one), then applies
    its stages. `local` is the pastset server whose elements it may read in memory (the node it
    runs on) and `joins` the other joins in the same process, by key; everything else is asked
    for through `fanout`.
    """

    def __init__(self, spec: JoinSpec, catalogue: Catalogue, local=None, joins=None):
        self.spec = spec
        self.catalogue = catalogue
        self.local = local
        self.joins = joins if joins is not None else {}
        self.apply = compile_stages([ScopeStage.parse(s, catalogue.pathmap.allow_modules) for s in spec.stages],
                                    catalogue)
        self.cursors = dict(spec.cursors)
        self.lease_until = 0.0
        # How to cut merged replies, by the names list asked for; the names encoded, by the lists.
        self._parts: dict = {}

    def pull(self, fanout) -> Pulled:
        """Pull this join and, in the same round of requests, every join below it in this process."""
        requests: list = []
        finish = self._gather(requests)
        nbytes = 0
        missing: set[str] = set()
        unreached: set[str] = set()
        if requests:
            sequential = self.spec.concurrency == "sequential"
            sent = ([(r[:3], [(r[3], None)], r[4]) for r in requests] if sequential
                    else _merged(requests, self._parts))
            before = fanout.bytes_received
            replies, missing = fanout.request([request for request, _, _ in sent], self.spec.timeout,
                                              sequential=sequential)
            nbytes = fanout.bytes_received - before
            for reply, ((node, _, _), handlers, below) in zip(replies, sent):
                if reply is None or isinstance(reply, PastSetError):
                    # No answer, or not with data (a removed join, a deleted element): the node is
                    # missing, and the nodes a child join there would have asked are unreached.
                    missing.add(node)
                    unreached |= below
                    continue
                for handle, part in handlers:
                    handle(reply if part is None else (part.of(reply) if isinstance(part, _Mine) else reply[part]))
        out = finish()
        out.missing |= missing
        out.gone |= fanout.gone(missing)
        out.unreached |= unreached
        if nbytes:
            out.add_level(self.spec.level, 0.0, 0, nbytes)
        return out

    def _gather(self, requests: list):
        """Read local leaves now, add (node, op, args, handler, nodes unreached if it fails) for the
        rest to `requests`, and return the function that combines everything once the replies are in."""
        started = time.perf_counter()
        spec = self.spec
        out = Pulled(trace.empty())
        parts: list[np.ndarray] = []
        for node, names in spec.leaves.items():
            if self.local is not None and node == spec.node:
                parts.append(self._read_local(names, out))
            else:
                requests.append((*self._leaf_request(node, names),
                                 lambda reply, node=node, names=names: parts.append(
                                     self._leaf_reply(node, names, reply, out)), _NONE))
        below = []
        for node, key, nodes in spec.children:
            child = self.joins.get(key) if node == spec.node else None
            if child is not None:
                below.append(child._gather(requests))
            else:
                requests.append((node, p.CALL, (PULL, [key]),
                                 lambda reply: parts.append(self._child_reply(reply, out)), set(nodes) - {node}))

        def finish() -> Pulled:
            for child_finish in below:
                pulled = child_finish()
                parts.append(pulled.records)
                out.merge(pulled)
            records = trace.concat(parts)
            out.records = self.apply(records)
            out.add_level(spec.level, time.perf_counter() - started, len(out.records), 0)
            return out

        return finish

    # -- leaves --------------------------------------------------------------------------------

    def _read_local(self, names, out: Pulled) -> np.ndarray:
        server, mode = self.local, self.spec.mode
        if mode == "latest":
            try:  # one vectorised read when the trace elements share a slab (they do on a node)
                return trace.decode(server.latest_records(names, 1))
            except PastSetError:
                pass  # one is gone: read them one by one below, skipping it
        chunks = []
        node = self.spec.node
        for name in names:
            try:
                element = server.element(name)
            except PastSetError:
                continue
            if mode == "latest":
                chunks.append(element.latest_records(1))
            elif mode == "backlog":
                chunks.append(element.read_range(0, _END)[1])
            else:
                key = f"{node}/{name}"
                cursor = self.cursors.get(key)
                start, data = element.read_range(cursor or 0, _END)
                self._advance(key, cursor, start, data, out)
                chunks.append(data)
        return trace.decode(b"".join(chunks))

    def _leaf_request(self, node, names):
        if self.spec.mode == "latest":
            return node, p.LATEST_RECORDS, (names, 1)
        if self.spec.mode == "backlog":
            return node, p.RANGE_MANY, (names, [0] * len(names), _END)
        return node, p.RANGE_MANY, (names, [self.cursors.get(f"{node}/{n}", 0) for n in names], _END)

    def _leaf_reply(self, node, names, reply, out: Pulled) -> np.ndarray:
        if isinstance(reply, bytes):  # latest mode: the newest record of each, already one batch
            return trace.decode(reply)
        if isinstance(reply, np.ndarray):  # the same, cut out of a reply merged with other joins'
            return reply
        chunks = []
        stream = self.spec.mode == "stream"
        for name, (start, data) in zip(names, reply):
            if stream:
                key = f"{node}/{name}"
                self._advance(key, self.cursors.get(key), start, data, out)
            chunks.append(data)
        return trace.decode(b"".join(chunks))

    def _advance(self, key: str, cursor: int | None, start: int, data: bytes, out: Pulled) -> None:
        """Stream mode: move a cursor past what was read; what the ring dropped between the cursor
        and `start` counts as discarded (nothing for a cursor not set yet: the stream starts here)."""
        if cursor is not None:
            out.discarded += start - cursor
        self.cursors[key] = start + len(data) // trace.SIZE

    @staticmethod
    def _child_reply(reply, out: Pulled) -> np.ndarray:
        pulled = Pulled.from_wire(reply)
        out.merge(pulled)
        return pulled.records


# LATEST_MANY (names, n), RANGE_MANY (names, los, hi), LATEST_RECORDS (names, n): per-element
# lists, then one value; such reads to one node merge into one request.
_BATCH_READS = (p.LATEST_MANY, p.RANGE_MANY, p.LATEST_RECORDS)


def _merged(requests: list, parts: dict) -> list:
    """The requests of one round with the leaf reads that go to the same node merged into one
    (a kary tree in the monitor has a leaf join per K trace elements; one request per join
    would cost a message each way per K elements). Returns [((node, op, args), [(handler, part)],
    nodes unreached if it fails)]:
    each handler gets its `part` of the merged reply (a slice of a list reply, or for
    LATEST_RECORDS its own collectors' records, cut by a _Mine cached in `parts`), or all of it
    for part None. A merged read that fails fails for every join in it (the node is reported
    missing).
    """
    groups: dict[tuple, list] = {}
    order: list = []
    for request in requests:
        node, op, args, _, _ = request
        key = (node, op, args[-1]) if op in _BATCH_READS else (id(request),)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(request)
    sent: list = []
    for key in order:
        group = groups[key]
        node, op, _, handle, below = group[0]
        if op not in _BATCH_READS:
            sent.append((group[0][:3], [(handle, None)], below))
            continue
        # The names are the same every round: encoded once.
        names = _packed_names([args[0] for _, _, args, _, _ in group], parts)
        lists = [[] for _ in group[0][2][1:-1]]
        handlers = []
        start = 0
        for _, _, args, handle, _ in group:
            for mine, theirs in zip(lists, args[1:-1]):
                mine.extend(theirs)
            if len(group) == 1:
                handlers.append((handle, None))
            elif op == p.LATEST_RECORDS:
                part = parts.get(id(args[0]))
                if part is None:
                    part = parts[id(args[0])] = _Mine(args[0])
                handlers.append((handle, part))
            else:
                handlers.append((handle, slice(start, start + len(args[0]))))
            start += len(args[0])
        sent.append(((node, op, (names, *lists, group[0][2][-1])), handlers, _NONE))
    return sent


def _packed_names(lists: list, cache: dict) -> p.Packed:
    """The names of `lists` (a join spec's own lists, alive as long as the join) run together
    and msgpack-encoded, once per join: a monitor pulling hundreds of trace elements would
    otherwise spend most of its time encoding their names again on every pull."""
    key = tuple(id(names) for names in lists)
    packed = cache.get(key)
    if packed is None:
        packed = cache[key] = p.Packed([name for names in lists for name in names])
    return packed


class _Mine:
    """The part of a merged LATEST_RECORDS reply (a batch of trace records) that one join asked for."""

    def __init__(self, names):
        self.ids = np.array([int(n[len(TRACE_PREFIX):]) for n in names], dtype=np.uint32)

    def of(self, reply: bytes) -> np.ndarray:
        records = trace.decode(reply)
        return records[np.isin(records["collector"], self.ids)]
