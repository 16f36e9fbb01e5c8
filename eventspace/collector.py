"""Event collectors: wrappers that time each operation and append one trace tuple to their trace element."""

from __future__ import annotations

import itertools

from paths import Wrapper
from paths import operation as op
from pastset import Template

from . import trace
from .space import NodeSpace

_U32 = 0xFFFFFFFF


class Collector(Wrapper):
    """The `collector` wrapper: clock, forward, clock, append (op, flags, collector, element, arg,
    nbytes, t_start, t_end) to its own trace element. Nothing else: no decoding, no sending
    (lazy event processing); consumers read the trace element when they choose to.

    `arg` is the tuple index a move got or an observe read; for a collective it is the
    collector's own count of the collectives it has seen (so a member's contribute records
    number the tree's rounds, and an arrival's count divided by the join's fan-in does); 0 for
    other operations. `nbytes` is the size of the tuple moved or observed as it crosses the wire (its msgpack
    encoding, or its record for a binary template; see pastset.Template.sizer); times are
    the node's monotonic clock in nanoseconds. An operation that raises is recorded with flag trace.ERROR, then re-raised.
    While an operation is under way, the node's in-flight table holds its start time under the
    collector's id (0 otherwise): a thread blocked in an observe or a collective shows there,
    long before its record is written. Switched off, the collector only forwards.
    A collector that only its own thread calls (source, contribute) appends to a local trace
    element without taking its lock (NodeSpace.appender).
    """

    type_name = "collector"

    def __init__(self, stage_id, params, node):
        super().__init__(stage_id, params, node)
        space = NodeSpace.of(node)
        self.entry_info = space.catalogue[params["id"]]
        self._append = space.appender(self.entry_info)
        self._on = space.switch(self.entry_info.id)
        self._clock = space.clock
        self._inflight = space.inflight
        self._size_of = _payload_size(node.pathmap, self.entry_info.element)

    def __call__(self, code, args):
        # The slow form, for callers that hold the instance; linked paths call `entry()`'s closure.
        return self.entry()(code, args)

    def entry(self):
        """The collecting function, with everything it needs in closure cells (the hot path)."""
        nxt, append, on, clock, size_of = self.next, self._append, self._on, self._clock, self._size_of
        inflight = self._inflight
        cid, eid, flags = self.entry_info.id, self.entry_info.element_id, self.entry_info.flags
        failed = flags | trace.ERROR
        MOVE, OBSERVE, COLLECTIVES = op.MOVE, op.OBSERVE, op.COLLECTIVES
        # itertools.count's next() is atomic: a round's callers all take their number before any
        # caller of the next round can (the next round needs every one of them to have returned).
        rounds = itertools.count()

        def collect(code, args):
            if not on[0]:
                return nxt(code, args)
            t0 = clock()
            inflight[cid] = t0
            try:
                result = nxt(code, args)
            except BaseException:
                inflight[cid] = 0
                append(code, failed, cid, eid, 0, 0, t0, clock())
                raise
            t1 = clock()
            inflight[cid] = 0
            if code == MOVE:
                append(code, flags, cid, eid, (result or 0) & _U32, size_of(args[0]), t0, t1)
            elif code == OBSERVE:
                append(code, flags, cid, eid, result[0] & _U32, size_of(result[1]), t0, t1)
            elif code in COLLECTIVES:
                append(code, flags, cid, eid, next(rounds) & _U32, 0, t0, t1)
            else:
                append(code, flags, cid, eid, 0, 0, t0, t1)
            return result

        return collect


def _payload_size(pathmap, element: str | None):
    """A function giving the bytes one tuple of `element` takes on the wire (pastset.Template.sizer):
    its record size for a binary template, its msgpack encoding's length for a typed one."""
    if element is None:
        return _zero
    spec = pathmap.element(element).template
    return Template.of(spec if isinstance(spec, str) else list(spec)).sizer()


def _zero(values) -> int:
    return 0
