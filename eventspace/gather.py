"""Gather joins: the inner stages of an event scope's tree, run in a monitor or inside a node server."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from pastset.deferred import Deferred

from . import trace
from .catalogue import Catalogue
from .hosted import PULL
from .ignored import Ignored, check, decoded
from .stages import ScopeStage, compile_stages

MODES = ("latest", "stream", "backlog")
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
        self.lease_until = 0.0
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
        finish = self._gather(pulls, asked)
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

    def _gather(self, pulls, asked: list):
        """Add this join's reads and its remote children's pulls to round `pulls` (and to `asked`),
        and return the function that combines everything once the round's replies are in."""
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
                below.append(child._gather(pulls, asked))
            else:
                asked.append((pulls.call(node, PULL, key),
                              lambda value: parts.append(self._child_reply(value, out)), set(nodes) - {node}))

        def finish() -> Pulled:
            for child_finish in below:
                pulled = child_finish()
                records, ignored = check(pulled.records, self.catalogue)
                parts.append(records)
                out.merge(pulled)
                out.ignored.merge(ignored)
            records = trace.concat(parts)
            out.records = self.apply(records)
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
