"""Binary elements: records packed in a preallocated ring of bytes, rows of a slab; the ring appender.

The ring appender contract (version 1; in C, pastset/ring_c/pastset_ring.h, which says it in full):
an append writes the record into slot `last mod cap`, then moves `_last` past it, then `_first` up to
`keep` behind; then, if threads sleep on the element or a node server parked requests on it, signals
its change under its mutex. It takes the mutex for all of that, unless it is the only writer of the
element (`single_writer`: the mutex only to signal), or its caller holds it (`move`). Readers may
assume a record below `_last` is whole; one racing a single writer checks `_first` again after
copying (`Element._read_held`).

The append is written once in C (`Appender`, from pastset._ring: what every append runs, from Python
or, through its `contract` capsule, from the compiled collector) and once in Python (`_APPEND`: the
same steps, the reference the C one is tested against, and what runs where the C part is not built).
"""

from __future__ import annotations

import mmap
import textwrap
from struct import error as struct_error

from .budget import MemoryBudget
from .checks import check_timeout
from .element import WOULD_BLOCK, Cursors, Element
from .errors import TemplateMismatch
from .template import Template

try:
    from ._ring import CONTRACT_VERSION, HELD, LOCKED, SINGLE_WRITER, Appender, cursors
except ImportError:   # not built (no compiler at install): appends run the Python reference
    Appender = CONTRACT_VERSION = cursors = None

# `keep` for a ring without one: an append never discards.
_NO_KEEP = 1 << 62


class BinaryElement(Cursors, Element):
    """An element of a binary template: records live packed in a preallocated ring of bytes.

    The ring holds `keep` (or `delta`) records when bounded and doubles when an unbounded
    element fills it. No Python object exists per tuple; batch reads return one `bytes`.
    Every append, by `move` or by an `appender`, runs the one ring append (see the module's doc).
    """

    _INITIAL_CAPACITY = 64

    def __init__(self, name: str, template: Template, keep: int | None = None, delta: int | None = None,
                 eid: int = 0, slab: RingSlab | None = None, row: int = 0, budget: MemoryBudget | None = None):
        # A ring may be a row of a RingSlab shared with other elements (see RingSlab).
        self.slab, self._row = slab, row
        super().__init__(name, template, keep, delta, eid, budget)

    def _init_storage(self):
        st = self.template._struct
        self._size = st.size
        self._pack_into = st.pack_into
        self._unpack_from = st.unpack_from
        self._fixed = self.keep is not None or self._delta is not None
        self._cap = ring_slots(self.keep, self._delta) if self._fixed else self._INITIAL_CAPACITY
        if self.slab is not None:
            self._cap = self.slab.slots
            self._ring = self.slab.ring(self._row)
            # taken from the budget with the whole slab, by whoever made it (TupleServer.enter_rings)
            self.held_charge = self._cap * self._size
            self._charged += self.held_charge
        else:
            nbytes = self._cap * self._size
            if self._fixed:
                self._budget.check_ring(nbytes, f"the ring of element {self.name}")
            self._take(nbytes, f"the ring of element {self.name}")
            self.held_charge = nbytes
            self._ring = _new_ring(nbytes)
        self._checked = _as_they_are   # checked as they are packed
        self._bind()

    def _bind(self):
        """(Re)build what appends under the mutex, for the current ring; and whether `move` may
        take its short way (a ring bounded by keep alone, of an element not deleted)."""
        self._put = _appender(self, _HELD, _NO_KEEP if self.keep is None else self.keep)
        self._short = self.keep is not None and self._delta is None and not self._deleted

    def move(self, values, timeout: float | None = None) -> int:
        """Append one record; as `Element.move`. The common case (a ring bounded by keep, nobody
        waiting) takes a short way: it is the hot path."""
        if timeout is not None:
            check_timeout(timeout)
        with self.mutex:
            if self._short and not self._sleepers and not self._parked:
                try:
                    return self._put(*values)
                except TypeError:   # not a sequence, or not as many values as fields
                    raise self.template._mismatch(values) from None
            index = self._try_move(values)
            if index is WOULD_BLOCK:
                index = self._block(self._try_move, (values,), timeout, "move")
            return index

    def latest_records(self, n: int = 1) -> bytes:
        """The newest `n` records as one bytes (fewer if fewer are held); never blocks.

        The batch form of `latest` without the start index: what a monitor pulling the newest
        event of many trace elements needs, at the least cost per element.
        """
        with self.mutex:
            self._check_alive()
            return self._read_held(newest=n)[1]

    def appender(self, single_writer: bool = False):
        """A function appending one record given as its field values, returning its index.

        It takes exactly one positional argument per field (`append(*values)` for a tuple);
        values that do not fit the template raise TemplateMismatch, as `move` does.
        For a bounded ring (`keep`, no `delta`) and a writer that appends often (an event
        collector): everything it touches is bound once, so an append is a lock, one
        `pack_into` and two stores. Other elements get `move`.

        `single_writer=True` is for a caller that is the only one appending to this element
        (a collector on one thread's path): the append then takes the mutex only to wake
        waiters. It publishes `last` once the record is whole and writes a slot no kept record
        is in, and readers check `first` again after copying, so none returns a record
        overwritten under it. A second concurrent appender (or `move`) would lose records.
        """
        if self.keep is None or self._delta is not None:
            return lambda *values: self.move(values)
        return _appender(self, _SINGLE_WRITER if single_writer else _LOCKED, self.keep)

    def reference_appender(self, single_writer: bool = False):
        """`appender(single_writer)` as the Python reference writes it (`_APPEND`), whether the C part
        is built or not: what the C append is tested against."""
        kind = _SINGLE_WRITER if single_writer else _LOCKED
        return _appender_maker(len(self.template.fields), kind)(
            self, self.mutex, self._pack_into, self._ring, self._cap, self._size, self.keep)

    def move_record(self, record: bytes) -> int:
        """Append one already-packed record (exactly `template.record_size` bytes)."""
        return self.move(self.template.unpack(record))

    # -- storage hooks -----------------------------------------------------------------------

    def _append(self, values) -> int:
        if not self._fixed and self._last - self._first >= self._cap:
            self._resize(self._cap * 2)
        try:
            return self._put(*values)
        except TypeError:   # not a sequence, or not as many values as fields
            raise self.template._mismatch(values) from None

    def _get(self, index):
        return self._unpack_from(self._ring, (index % self._cap) * self._size)

    def _peek(self, index):
        while True:
            found = super()._peek(index)
            if found is WOULD_BLOCK or found[0] >= self._first:
                return found
            # A single writer overwrote the record while it was read (see `appender`): read the
            # new first one, or for an index asked for, report it discarded (`Expired`).

    def _drop_to(self, new_first):
        self._first = new_first

    def _read(self, lo, hi):
        if hi <= lo:
            return b""
        size, cap, ring = self._size, self._cap, self._ring
        a = (lo % cap) * size
        b = a + (hi - lo) * size
        if b <= len(ring):
            return bytes(ring[a:b])
        return bytes(ring[a:]) + bytes(ring[: b - len(ring)])

    def _span_bytes(self, lo, hi):
        return (hi - lo) * self._size

    def _nbytes(self):
        return (self._last - self._first) * self._size

    def _free_storage(self):
        # An appender may still write to the ring: it goes with the element's last reference.
        self._short = False

    def _resize(self, capacity):
        capacity = max(capacity, self._last - self._first)
        nbytes, had = capacity * self._size, self.held_charge
        if nbytes > had:   # asked first: a refused resize changes nothing
            self._take(nbytes - had, f"the ring of element {self.name}")
        self.slab = None  # the ring leaves its slab, if it was in one
        held = self._read(self._first, self._last)
        self._cap = capacity
        self._ring = _new_ring(nbytes)
        a = (self._first % capacity) * self._size
        split = min(len(held), len(self._ring) - a)
        self._ring[a:a + split] = held[:split]
        self._ring[: len(held) - split] = held[split:]
        if nbytes < had:
            self._give(had - nbytes)
        self.held_charge = nbytes
        self._bind()

    def _bound_to(self, keep, delta):
        # A bounded ring only grows: it is reallocated only when it could not hold the new bound.
        capacity = ring_slots(keep, delta)
        if not self._fixed or capacity > self._cap:
            self._budget.check_ring(max(capacity, self._last - self._first) * self._size,
                                    f"the ring of element {self.name}")
            self._resize(capacity)
        self._fixed = True
        self._short = False   # delta is set now: every move checks it

    def _peek_match(self, pattern):
        raise TemplateMismatch(f"element {self.name}: Linda matching needs a typed template")


def _as_they_are(values):
    return values


# Appends are generated code, one function per field count and kind, shared by every element:
# they take one named parameter per field, since CPython specialises calls to functions with exact
# positional parameters, while a `*values` function takes the generic call path and builds two
# tuples (a fifth of an append); and the many trace elements of a node run one code object
# (benchmarks/collector_bench.py).
_APPENDER_MAKERS: dict[tuple[int, str], object] = {}

# What an append does (the Python reference; see the module's doc): the record, then `last` past it, then `first`
# up to `keep` behind. The slot written never holds a kept record (the ring has a spare one), so a
# record that fails to pack half way damages nothing, and a reader racing a lock-free writer can
# tell (`_peek`).
_APPEND = """\
last = element._last
try:
    pack_into(ring, (last % cap) * size, {names})
except (TypeError, struct_error):
    raise element.template._mismatch(({names},)) from None
element._last = last + 1
if last + 1 - element._first > keep:
    element._first = last + 1 - keep
"""
# The kinds of append: under the element's mutex, which the caller holds (`move`); taking the
# mutex (an appender); lock-free for one writer only: waiters count themselves before they check
# `last` (`_block`), so one that this writer does not see has seen the record.
_HELD = "{append}"
_LOCKED = "with mutex:\n{indented}    if element._sleepers or element._parked:\n        element._signal_change()\n"
_SINGLE_WRITER = "{append}if element._sleepers or element._parked:\n    with mutex:\n        element._signal_change()\n"
# The same kinds, as pastset._ring.Appender takes them.
_MODES = {} if Appender is None else {_HELD: HELD, _LOCKED: LOCKED, _SINGLE_WRITER: SINGLE_WRITER}


def _appender(element: BinaryElement, kind: str, keep: int):
    """An append of `kind` into `element`'s ring as it is now: pastset._ring's, or where that is not
    built, the Python reference."""
    if Appender is not None:
        return Appender(element, _MODES[kind], len(element.template.fields), element._pack_into,
                        element._ring, element._cap, element._size, keep, element.mutex,
                        element._signal_change, element.template._mismatch)
    return _appender_maker(len(element.template.fields), kind)(
        element, element.mutex, element._pack_into, element._ring, element._cap, element._size, keep)


def _appender_maker(fields: int, kind: str):
    """The function that makes an append of `kind` for records of `fields` fields (see
    `BinaryElement.appender`)."""
    maker = _APPENDER_MAKERS.get((fields, kind))
    if maker is None:
        names = ", ".join(f"f{i}" for i in range(fields))
        append = _APPEND.format(names=names)
        body = kind.format(append=append, indented=textwrap.indent(append, "    "))
        source = (
            f"def make(element, mutex, pack_into, ring, cap, size, keep):\n"
            f"    def append({names}):\n"
            f"{textwrap.indent(body, '        ')}"
            f"        return last\n"
            f"    return append\n"
        )
        scope = {"struct_error": struct_error}
        exec(source, scope)  # noqa: S102 - the source above, with field names made here, nothing else
        maker = _APPENDER_MAKERS[(fields, kind)] = scope["make"]
    return maker


def _new_ring(nbytes: int):
    """A ring of `nbytes` zero bytes. A big one is an anonymous map, whose pages the system zeroes
    as they are first written: a bytearray would write all of them now, holding up the server's loop
    for as long as that takes (tens of milliseconds a 64 MiB ring)."""
    return bytearray(nbytes) if nbytes < _MAPPED_RING else mmap.mmap(-1, nbytes)


# CONTRACT_VERSION: the version of the ring appender contract an appender's `contract` capsule holds
# (pastset_ring.h), or None where pastset's C part is not built (appenders then have no contract).

# Rings of at least this many bytes are anonymous maps (see _new_ring).
_MAPPED_RING = 1 << 20


def ring_slots(keep: int | None, delta: int | None) -> int:
    """The slots of a bounded ring: `delta` when flow control bounds it first (a move waits
    before it could overwrite a held record), else `keep` plus a spare one, so that the slot an
    append writes never holds a kept record."""
    if delta is not None and (keep is None or delta <= keep):
        return delta
    return keep + 1


class RingSlab:
    """The rings of many binary elements of one template and one `keep`, as the rows of one numpy
    array, so that the newest record of all of them is one vectorised read (`newest`) instead of
    a locked read per element: what a monitor pulling hundreds of trace elements at once needs.

    Each element still owns its row (its own lock, first and last); an element whose ring is
    reallocated (its delta raised) leaves the slab.
    """

    def __init__(self, template: Template, keep: int, count: int):
        import numpy as np

        self.template, self.keep, self.size = template, keep, template.record_size
        self.slots = ring_slots(keep, None)
        self.array = np.zeros((count, self.slots, self.size), dtype=np.uint8)

    def ring(self, row: int) -> memoryview:
        """Row `row` as a writable buffer of `slots` records."""
        return memoryview(self.array[row]).cast("B")

    def newest(self, elements, counted: bool = False):
        """The newest record of each element (all rows of this slab), in order, skipping the empty
        ones; with `counted`, (how many records each gave, as little-endian u32s, the records).
        Reads each element's bounds without its lock: a record is written before its element's
        `last` moves past it, so a record read is always a whole one; while the read runs, an
        element that wraps its ring may give a newer record than its `last`."""
        import numpy as np

        count = len(elements)
        rows = np.fromiter([e._row for e in elements], np.intp, count)
        if cursors is not None:
            lasts, firsts = np.empty(count, np.int64), np.empty(count, np.int64)
            cursors(elements, lasts, firsts)
        else:
            lasts = np.fromiter([e._last for e in elements], np.int64, count)
            firsts = np.fromiter([e._first for e in elements], np.int64, count)
        held = lasts > firsts
        if not held.all():
            rows, lasts = rows[held], lasts[held]
        records = self.array[rows, (lasts - 1) % self.slots].tobytes()
        return (held.astype("<u4").tobytes(), records) if counted else records
