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

    Two implementations with these same semantics: the compiled one (eventspace/collector_c/, a
    vectorcall object that appends through pastset's ring appender contract) and the pure-Python closure `collecting` makes,
    which is the reference and the fallback (EVENTSPACE_PURE=1, or no compiler at install;
    NodeSpace chooses).
    Both write the same records, byte for byte but for the times, on the same clock.
    """

    type_name = "collector"

    def __init__(self, stage_id, params, node):
        super().__init__(stage_id, params, node)
        space = NodeSpace.of(node)
        self.entry_info = space.catalogue[params["id"]]
        self._space = space
        self._append = space.appender(self.entry_info)
        self._page, self._at = space.enrol(self.entry_info.id)
        self._size_of = _payload_size(node.pathmap, self.entry_info.element, space.compiled)

    def __call__(self, code, args):
        # The slow form, for callers that hold the instance; linked paths call `entry()`'s closure.
        return self.entry()(code, args)

    def entry(self):
        """The collecting callable (the hot path): compiled, or a closure with everything it needs in cells."""
        space, size_of = self._space, self._size_of
        cid, eid, flags = self.entry_info.id, self.entry_info.element_id, self.entry_info.flags
        failed = flags | trace.ERROR
        if space.compiled is not None:
            return space.compiled.Collect(
                self.next, space.compiled.TableSlot(self._page, self._at), cid, eid, flags, failed, size_of,
                self._append, space.clock_offset_ns, op.MOVE, op.OBSERVE, _COLLECTIVES_MASK)
        return collecting(self.next, self._page, self._at, cid, eid, flags, failed, size_of, self._append, space.clock)


def collecting(nxt, page, at, cid, eid, flags, failed, size_of, append, clock):
    """The pure collecting callable `collect(code, args)`, with everything it needs in cells: the
    reference that the compiled `Collect` (eventspace/collector_c/), given the same arguments but
    the clock's offset and the operation codes, must agree with (tests/eventspace/test_compiled_fuzz.py).
    Its switch and in-flight start are slot `at` of `page` (eventspace.table.Page). `size_of` is a
    function of a tuple, or a number: every tuple's size."""
    switches, starts = page.switches, page.starts
    if not callable(size_of):
        size_of = _fixed(size_of)
    MOVE, OBSERVE, COLLECTIVES = op.MOVE, op.OBSERVE, op.COLLECTIVES
    # itertools.count's next() is atomic: a round's callers all take their number before any
    # caller of the next round can (the next round needs every one of them to have returned).
    rounds = itertools.count()

    def collect(code, args):
        if not switches[at]:
            if code in COLLECTIVES:   # rounds are counted while off too: they stay aligned across members
                next(rounds)
            return nxt(code, args)
        t0 = clock()
        starts[at] = t0
        try:
            result = nxt(code, args)
        except BaseException:
            starts[at] = 0
            append(code, failed, cid, eid, 0, 0, t0, clock())
            raise
        t1 = clock()
        starts[at] = 0
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


# Bit c set: operation code c is a collective (what the compiled collector tests `code` against).
_COLLECTIVES_MASK = sum(1 << code for code in op.COLLECTIVES)
assert max(op.COLLECTIVES) < 64


def _payload_size(pathmap, element: str | None, compiled=None):
    """The bytes one tuple of `element` takes on the wire (pastset.Template.sizer): a number when all
    take the same (a binary template's record size; 0 without an element), else a function of the
    tuple (a typed template's msgpack encoding's length): with the compiled collector module, its
    TypedSize over the template's fields where none is `any` (the compiled collector then measures
    a tuple without a call), else the template's Python function."""
    if element is None:
        return 0
    spec = pathmap.element(element).template
    template = Template.of(spec if isinstance(spec, str) else list(spec))
    if template.is_binary:
        return template.record_size
    size = template.sizer()
    typed = getattr(compiled, "TypedSize", None)
    if typed is not None and all(field in _SIZE_KINDS for field in template.fields):
        return typed("".join(_SIZE_KINDS[field] for field in template.fields).encode(), size)
    return size


# A typed template's fields as the compiled TypedSize names them (`any` is measured by encoding it).
_SIZE_KINDS = {"int": "i", "float": "f", "str": "s", "bytes": "b", "bool": "?"}


def _fixed(size: int):
    return lambda values: size
