"""Elements: ordered, append-only logs of tuples of one template, with blocking reads and flow control."""

from __future__ import annotations

import mmap
import textwrap
import threading
from collections import deque
from dataclasses import dataclass
from itertools import islice
from struct import error as struct_error
from time import monotonic

from .budget import MemoryBudget
from .errors import BadArgument, Expired, LimitExceeded, TemplateMismatch, Timeout, UnknownElement
from .template import Template

# Returned by the `_try_*` forms when the operation would have to wait.
WOULD_BLOCK = object()
# Marks a slot whose tuple a Linda `in_` removed out of order.
_TAKEN = object()
# What one element costs besides its data: the object, its mutex and conditions, its table entries
# (measured with tracemalloc: about 2.3 KB); its template is counted apart (Template.nbytes).
_ELEMENT_BYTES = 2048
# A typed element takes its tuples' bytes from the memory budget ahead of need, in steps of at least
# this many, and gives back only what it holds twice over: most moves touch no shared lock.
_GRAIN = 4096


@dataclass(frozen=True)
class ElementInfo:
    """A snapshot of one element, as `eventspace ps stat` shows it."""

    name: str
    template: str
    first: int
    last: int
    keep: int | None
    delta: int | None
    nbytes: int

    @property
    def held(self) -> int:
        return self.last - self.first


class Element:
    """The ordered log of the tuples of one template, addressed by name.

    Indices start at 0 and only grow. `first()` is the index of the oldest tuple still held
    (the next one a consuming `observe()` returns); `last()` is the index the next `move`
    will get, so `last() - first()` tuples are held. Tuples below `first()` are gone: read
    by index they raise `Expired`.

    Bounds, fixed when the element is entered:
      keep=n   never blocks; after a move, tuples older than the newest n are discarded.
      delta=n  flow control; `move` blocks while n tuples are held.

    Blocking operations take `timeout` in seconds: None waits for ever, 0 only tries once;
    when it passes they raise `Timeout`. Deleting the element wakes every waiter with
    `UnknownElement`.

    Variants differ only in their storage hooks (`_init_storage`, `_put`, `_get`, `_drop_to`,
    `_read`, `_span_bytes`, `_nbytes`), as in `queue.Queue`.

    Memory: an element takes what it holds from its server's `MemoryBudget` before allocating it
    (its own objects when made, a ring when made or resized, a typed element's tuples as they are
    moved) and gives it all back when deleted; what would pass the budget raises LimitExceeded and
    changes nothing.
    """

    def __init__(self, name: str, template: Template, keep: int | None = None,
                 delta: int | None = None, eid: int = 0, budget: MemoryBudget | None = None):
        self.name = name
        self.template = template
        self.keep = keep
        self.id = eid
        self._delta = delta
        self._budget = budget if budget is not None else MemoryBudget()
        self._charged = 0       # bytes this element holds of the budget
        # Of them, the bytes for its data (a typed element's tuples, a binary one's ring): also an
        # upper bound of the data one read of it returns, which the server checks replies against.
        self._held_charge = 0
        # The mutex must be held whenever first, last or the storage is read or mutated, with
        # one exception: a binary element's single-writer appender (see BinaryElement.appender).
        # Both conditions below share it.
        self.mutex = threading.Lock()
        self._changed = threading.Condition(self.mutex)
        self._sleepers = 0      # threads waiting on _changed
        # Remote requests parked on this element by the node server, and how the server
        # wants to hear of a change while any are parked (called with the mutex held).
        self.parked = 0
        self.on_change = None
        self._first = 0
        self._last = 0
        self._deleted = False
        self._take(_ELEMENT_BYTES + template.nbytes, f"element {name}")
        try:
            self._init_storage()
        except BaseException:
            self._give(self._charged)
            raise

    # -- the public API ----------------------------------------------------------------------

    def move(self, values, timeout: float | None = None) -> int:
        """Append one tuple; returns its index. Blocks only under `delta` flow control."""
        if timeout is not None:
            _check_timeout(timeout)
        with self.mutex:
            index = self._try_move(values)
            if index is WOULD_BLOCK:
                index = self._block(self._try_move, (values,), timeout, "move")
            return index

    def observe(self, index: int | None = None, timeout: float | None = None) -> tuple:
        """Read one tuple.

        Without an index: the tuple at `first()`, and `first` advances past it (a consuming
        cursor shared by every caller). With an index: that tuple, and nothing moves.
        Blocks until the tuple exists; a discarded index raises `Expired`.
        """
        return self.observe_indexed(index, timeout)[1]

    def observe_indexed(self, index: int | None = None, timeout: float | None = None) -> tuple[int, tuple]:
        """As `observe`, returning (index, tuple): which tuple a consuming observe read."""
        if timeout is not None:
            _check_timeout(timeout)
        with self.mutex:
            found = self._try_observe(index)
            if found is WOULD_BLOCK:
                found = self._block(self._try_observe, (index,), timeout, "observe")
            return found

    def first(self) -> int:
        """Index of the oldest tuple still held (== last() when none is held)."""
        with self.mutex:
            self._check_alive()
            return self._first

    def last(self) -> int:
        """Index the next move will get: the number of tuples ever moved."""
        with self.mutex:
            self._check_alive()
            return self._last

    def delta(self, n: int | None = None) -> int | None:
        """The flow-control bound; with `n`, set it first (waking movers it now admits)."""
        with self.mutex:
            self._check_alive()
            if n is not None:
                _check_bound("delta", n)
                self._bound_to(ring_slots(self.keep, n))
                self._delta = n
                self._signal_change()
            return self._delta

    def axe(self, index: int) -> int:
        """Discard every tuple up to and including `index` (at most up to `last()`); returns the new first."""
        _check_index(index)
        with self.mutex:
            self._check_alive()
            new_first = min(index + 1, self._last)
            if new_first > self._first:
                self._drop_to(new_first)
                self._signal_change()
            return self._first

    def read_range(self, lo: int, hi: int) -> tuple[int, list | bytes]:
        """The held tuples with lo <= index < hi, never blocking.

        Returns (start, items): `start` is the index of the first item returned (above `lo`
        when tuples were discarded). Items are a list of tuples for typed templates and one
        `bytes` of concatenated records for binary ones.
        """
        _check_index(lo)
        _check_index(hi)
        with self.mutex:
            self._check_alive()
            return self._read_held(lo, hi)

    def latest(self, n: int = 1) -> tuple[int, list | bytes]:
        """The newest `n` held tuples (fewer if fewer are held), as (start, items); never blocks."""
        _check_index(n)
        with self.mutex:
            self._check_alive()
            return self._read_held(newest=n)

    def find(self, pattern, remove: bool = False, timeout: float | None = None) -> tuple:
        """Linda-style matching: the oldest held tuple matching `pattern` (removed if `remove`).

        `pattern` has one entry per field: `(0, value)` matches that value, `(1, type_name)`
        matches any value of that field type ('any' matches everything). Typed elements only.
        """
        if self.template.is_binary:
            raise TemplateMismatch(f"element {self.name}: Linda matching needs a typed template")
        pattern = _check_pattern(pattern, self.template)
        if timeout is not None:
            _check_timeout(timeout)
        with self.mutex:
            item = self._try_find(pattern, remove)
            if item is WOULD_BLOCK:
                item = self._block(self._try_find, (pattern, remove), timeout, "find")
            return item

    def info(self) -> ElementInfo:
        with self.mutex:
            return ElementInfo(self.name, str(self.template), self._first, self._last,
                               self.keep, self._delta, self._nbytes())

    def __repr__(self) -> str:
        return f"<Element {self.name} {self.template} first={self._first} last={self._last}>"

    # -- non-blocking attempts, shared by local waiting and the server's parked requests ----
    # Each is called with the mutex held and returns WOULD_BLOCK instead of waiting.

    def _try_move(self, values):
        if self._deleted:
            raise UnknownElement(f"element {self.name} was deleted")
        # A tuple that can never be moved is refused now, not after waiting for room.
        values, nbytes = self.template.checked(values)
        last = self._last
        if self._delta is not None and last - self._first >= self._delta:
            return WOULD_BLOCK
        self._put(values, last, nbytes)
        self._last = last + 1
        if self.keep is not None and last + 1 - self._first > self.keep:
            self._drop_to(last + 1 - self.keep)
        if self._sleepers or self.parked:
            self._signal_change()
        return last

    def _try_observe(self, index):
        found = self._peek(index)
        if found is WOULD_BLOCK:
            return found
        if index is None:
            self._remove(found[0])
        return found

    def _try_find(self, pattern, remove):
        found = self._peek_match(pattern)
        if found is WOULD_BLOCK:
            return found
        if remove:
            self._remove(found[0])
        return found[1]

    # Reads are split from removal so that the node server can remove a tuple only once its
    # reply was handed to a connected peer: a consumer that vanished loses nothing.

    def _read_held(self, lo: int = 0, hi: int | None = None, newest: int | None = None):
        """(start, items) of the held tuples with lo <= index < hi (hi None: all), or of the
        `newest` ones; mutex held. Copied again if a single writer, which appends without the
        mutex (BinaryElement.appender), overwrote any of them during the copy."""
        while True:
            last = self._last
            if newest is not None:
                lo = last - newest
            start = min(max(lo, self._first), last)
            items = self._read(start, max(start, last if hi is None else min(hi, last)))
            if start >= self._first:
                return start, items

    def _read_size(self, lo: int = 0, hi: int | None = None, newest: int | None = None) -> int:
        """About the bytes of data `_read_held` with the same arguments would return now (what a
        reply of it will carry); LimitExceeded-free, Expired for an index that is not valid."""
        for index in (lo, hi, newest):
            if index is not None:
                _check_index(index)
        with self.mutex:
            last = self._last
            if newest is not None:
                lo = last - newest
            start = min(max(lo, self._first), last)
            return self._span_bytes(start, max(start, last if hi is None else min(hi, last)))

    def _peek(self, index):
        """(index, tuple) for `observe(index)` without consuming anything."""
        if self._deleted:
            raise UnknownElement(f"element {self.name} was deleted")
        if index is None:
            index = self._first
            if index >= self._last:
                return WOULD_BLOCK
            return index, self._get(index)
        _check_index(index)
        if index < self._first:
            raise Expired(f"element {self.name}: tuple {index} was discarded (first held is {self._first})")
        if index >= self._last:
            return WOULD_BLOCK
        return index, self._get(index)

    def _peek_match(self, pattern):
        if self._deleted:
            raise UnknownElement(f"element {self.name} was deleted")
        for offset, item in enumerate(self._items):
            if item is not _TAKEN and _matches(pattern, item):
                return self._first + offset, item
        return WOULD_BLOCK

    def _remove(self, index):
        """Discard tuple `index` (the first one, or for typed elements any held one)."""
        if index == self._first:
            self._drop_to(index + 1)
        else:
            self._items[index - self._first] = _TAKEN
        self._signal_change()

    # -- waiting -------------------------------------------------------------------------------

    def _block(self, attempt, args, timeout, what):
        """Retry `attempt` each time the element changes, until it succeeds or `timeout` passes."""
        deadline = None if _check_timeout(timeout) is None else monotonic() + timeout
        # Counted as a sleeper before each attempt, not after it: a single writer (which appends
        # without the mutex) either published before the attempt, or sees the count and wakes us.
        self._sleepers += 1
        try:
            while True:
                result = attempt(*args)
                if result is not WOULD_BLOCK:
                    return result
                remaining = None
                if deadline is not None:
                    remaining = deadline - monotonic()
                    if remaining <= 0:
                        raise Timeout(f"{what} on element {self.name} timed out after {timeout}s")
                self._changed.wait(remaining)
        finally:
            self._sleepers -= 1

    def _signal_change(self):
        if self._sleepers:
            self._changed.notify_all()
        if self.parked:
            self.on_change(self)

    def _delete(self):
        with self.mutex:
            self._deleted = True
            self._signal_change()
            self._free_storage()
            self._give(self._charged)

    # -- the memory budget (mutex held, or the element not yet shared) -----------------------------

    def _take(self, nbytes: int, what: str) -> None:
        self._budget.take(nbytes, what)
        self._charged += nbytes

    def _give(self, nbytes: int) -> None:
        self._budget.give(nbytes)
        self._charged -= nbytes

    def _check_alive(self):
        if self._deleted:
            raise UnknownElement(f"element {self.name} was deleted")

    # -- storage hooks (typed storage: a deque whose item 0 has index `first`) -----------------

    def _init_storage(self):
        self._items = deque()
        self._sizes = deque()       # the bytes each held tuple costs: its payload and its objects
        self._held_bytes = 0        # their sum
        # The objects a held tuple costs besides its payload (Template.checked): the tuple, one
        # object of up to 9 bytes of payload per field, two deque slots.
        self._tuple_bytes = 64 + 41 * len(self.template.fields)

    def _put(self, values, index, nbytes):
        # checked by _try_move; the budget is asked first, so that a refused move changes nothing
        nbytes += self._tuple_bytes
        held = self._held_bytes + nbytes
        if held > self._held_charge:
            self._hold(held, f"a move into element {self.name}")
        self._items.append(values)
        self._sizes.append(nbytes)
        self._held_bytes = held

    def _hold(self, need: int, what: str) -> None:
        """Make the budget cover `need` bytes of held data, with room for more if it has it (or
        give back what is covered beyond that room)."""
        target = need + (need >> 3) + _GRAIN
        if target <= self._held_charge:
            self._give(self._held_charge - target)
        else:
            try:
                self._take(target - self._held_charge, what)
            except LimitExceeded:
                self._take(need - self._held_charge, what)   # no room to spare: just what it needs
                target = need
        self._held_charge = target

    def _get(self, index):
        item = self._items[index - self._first]
        if item is _TAKEN:
            raise Expired(f"element {self.name}: tuple {index} was taken by a Linda in_")
        return item

    def _drop_to(self, new_first):
        items, sizes = self._items, self._sizes
        held = self._held_bytes
        for _ in range(new_first - self._first):
            items.popleft()
            held -= sizes.popleft()
        # A slot taken out of order never becomes `first`.
        while items and items[0] is _TAKEN:
            items.popleft()
            held -= sizes.popleft()
            new_first += 1
        self._first = new_first
        self._held_bytes = held
        if self._held_charge > 2 * held + 2 * _GRAIN:
            self._hold(held, "")

    def _read(self, lo, hi):
        base = self._first
        return [None if item is _TAKEN else item
                for item in (self._items[i - base] for i in range(lo, hi))]

    def _span_bytes(self, lo, hi):
        # the payload, and for each tuple a few bytes of msgpack framing and 9 for each field
        held = sum(islice(self._sizes, lo - self._first, hi - self._first))
        return held - (hi - lo) * (self._tuple_bytes - 2 - 9 * len(self.template.fields))

    def _nbytes(self):
        return sum(len(v) for item in self._items if item is not _TAKEN
                   for v in item if isinstance(v, (bytes, str)))

    def _free_storage(self):
        self._items.clear()
        self._sizes.clear()
        self._held_bytes = 0

    def _bound_to(self, capacity):
        pass  # a deque needs no preallocation


class BinaryElement(Element):
    """An element of a binary template: records live packed in a preallocated ring of bytes.

    The ring holds `keep` (or `delta`) records when bounded and doubles when an unbounded
    element fills it. No Python object exists per tuple; batch reads return one `bytes`.
    """

    _INITIAL_CAPACITY = 64

    def __init__(self, name: str, template: Template, keep: int | None = None, delta: int | None = None,
                 eid: int = 0, slab: RingSlab | None = None, row: int = 0, budget: MemoryBudget | None = None):
        # A ring may be a row of a RingSlab shared with other elements (see RingSlab).
        self._slab, self._row = slab, row
        super().__init__(name, template, keep, delta, eid, budget)

    def _init_storage(self):
        st = self.template._struct
        self._size = st.size
        self._pack_into = st.pack_into
        self._unpack_from = st.unpack_from
        self._fixed = self.keep is not None or self._delta is not None
        self._cap = ring_slots(self.keep, self._delta) if self._fixed else self._INITIAL_CAPACITY
        if self._slab is not None:
            self._cap = self._slab.slots
            self._ring = self._slab.ring(self._row)
            # taken from the budget with the whole slab, by whoever made it (TupleServer.enter_rings)
            self._held_charge = self._cap * self._size
            self._charged += self._held_charge
        else:
            nbytes = self._cap * self._size
            if self._fixed:
                self._budget.check_ring(nbytes, f"the ring of element {self.name}")
            self._take(nbytes, f"the ring of element {self.name}")
            self._held_charge = nbytes
            self._ring = _new_ring(nbytes)

    def move(self, values, timeout: float | None = None) -> int:
        """Append one record; as `Element.move`. The common case runs inline: it is the hot path."""
        if timeout is not None:
            _check_timeout(timeout)
        with self.mutex:
            last = self._last
            if (self._fixed and self._delta is None and not self._deleted
                    and not self._sleepers and not self.parked):
                try:
                    self._pack_into(self._ring, (last % self._cap) * self._size, *values)
                except (TypeError, struct_error):
                    raise self.template._mismatch(values) from None
                self._last = last + 1
                if last + 1 - self._first > self.keep:
                    self._first = last + 1 - self.keep
                return last
            index = self._try_move(values)
            if index is WOULD_BLOCK:
                index = self._block(self._try_move, (values,), timeout, "move")
            return index

    def _try_move(self, values):
        if self._deleted:
            raise UnknownElement(f"element {self.name} was deleted")
        last = self._last
        if self._delta is not None and last - self._first >= self._delta:
            return WOULD_BLOCK
        if not self._fixed and last - self._first >= self._cap:
            self._resize(self._cap * 2)
        try:
            self._pack_into(self._ring, (last % self._cap) * self._size, *values)
        except (TypeError, struct_error):
            raise self.template._mismatch(values) from None
        self._last = last + 1
        if self.keep is not None and last + 1 - self._first > self.keep:
            self._first = last + 1 - self.keep
        if self._sleepers or self.parked:
            self._signal_change()
        return last

    def latest_records(self, n: int = 1) -> bytes:
        """The newest `n` records as one bytes (fewer if fewer are held); never blocks.

        The batch form of `latest` without the start index: what a monitor pulling the newest
        event of many trace elements needs, at the least cost per element.
        """
        with self.mutex:
            if self._deleted:
                raise UnknownElement(f"element {self.name} was deleted")
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
        return _appender_maker(len(self.template.fields), single_writer)(
            self, self.mutex, self._pack_into, self._ring, self._cap, self._size, self.keep)

    def move_record(self, record: bytes) -> int:
        """Append one already-packed record (exactly `template.record_size` bytes)."""
        return self.move(self.template.unpack(record))

    def _put(self, values, index):
        raise AssertionError("BinaryElement writes in _try_move")

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
        pass  # an appender may still write to the ring: it goes with the element's last reference

    def _resize(self, capacity):
        capacity = max(capacity, self._last - self._first)
        nbytes, had = capacity * self._size, self._held_charge
        if nbytes > had:   # asked first: a refused resize changes nothing
            self._take(nbytes - had, f"the ring of element {self.name}")
        self._slab = None  # the ring leaves its slab, if it was in one
        held = self._read(self._first, self._last)
        self._cap = capacity
        self._ring = _new_ring(nbytes)
        a = (self._first % capacity) * self._size
        split = min(len(held), len(self._ring) - a)
        self._ring[a:a + split] = held[:split]
        self._ring[: len(held) - split] = held[split:]
        if nbytes < had:
            self._give(had - nbytes)
        self._held_charge = nbytes

    def _bound_to(self, capacity):
        # A bounded ring only grows: it is reallocated only when it could not hold the new bound.
        if not self._fixed or capacity > self._cap:
            self._budget.check_ring(max(capacity, self._last - self._first) * self._size,
                                    f"the ring of element {self.name}")
            self._resize(capacity)
        self._fixed = True

    def _peek_match(self, pattern):
        raise TemplateMismatch(f"element {self.name}: Linda matching needs a typed template")


# Appenders take one named parameter per field: CPython specialises calls to functions with
# exact positional parameters, while a `*values` function takes the generic call path and builds
# two tuples (a fifth of an append). Their code is made once per field count and shared, so that
# the many trace elements of a node run one code object (benchmarks/collector_bench.py).
_APPENDER_MAKERS: dict[tuple[int, bool], object] = {}

# What an append does: the record, then `last` past it, then `first` up to `keep` behind. The
# slot written never holds a kept record (the ring has a spare one), so a record that fails to
# pack half way damages nothing, and a reader racing a lock-free writer can tell (`_peek`).
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
_LOCKED = "with mutex:\n{append}    if element._sleepers or element.parked:\n        element._signal_change()\n"
# Lock-free (one writer only): waiters count themselves before they check `last` (`_block`), so
# one that this writer does not see has seen the record.
_SINGLE_WRITER = "{append}if element._sleepers or element.parked:\n    with mutex:\n        element._signal_change()\n"


def _appender_maker(fields: int, single_writer: bool):
    """The function that makes an appender for records of `fields` fields (see `BinaryElement.appender`)."""
    maker = _APPENDER_MAKERS.get((fields, single_writer))
    if maker is None:
        names = ", ".join(f"f{i}" for i in range(fields))
        append = _APPEND.format(names=names)
        if single_writer:
            body = _SINGLE_WRITER.format(append=append)
        else:
            body = _LOCKED.format(append=textwrap.indent(append, "    "))
        source = (
            f"def make(element, mutex, pack_into, ring, cap, size, keep):\n"
            f"    def append({names}):\n"
            f"{textwrap.indent(body, '        ')}"
            f"        return last\n"
            f"    return append\n"
        )
        scope = {"struct_error": struct_error}
        exec(source, scope)  # noqa: S102 - the source above, with field names made here, nothing else
        maker = _APPENDER_MAKERS[(fields, single_writer)] = scope["make"]
    return maker


def _new_ring(nbytes: int):
    """A ring of `nbytes` zero bytes. A big one is an anonymous map, whose pages the system zeroes
    as they are first written: a bytearray would write all of them now, holding up the server's loop
    for as long as that takes (tens of milliseconds a 64 MiB ring)."""
    return bytearray(nbytes) if nbytes < _MAPPED_RING else mmap.mmap(-1, nbytes)


# Rings of at least this many bytes are anonymous maps (see _new_ring).
_MAPPED_RING = 1 << 20


def ring_slots(keep: int | None, delta: int | None) -> int:
    """The slots of a bounded ring: `delta` when flow control bounds it first (a move waits
    before it could overwrite a held record), else `keep` plus a spare one, so that the slot an
    append writes never holds a kept record."""
    if delta is not None and (keep is None or delta <= keep):
        return delta
    return keep + 1


def make_element(name: str, template: Template, keep=None, delta=None, eid=0, slab=None, row=0,
                 budget: MemoryBudget | None = None) -> Element:
    """The element variant for `template` (binary templates get a ring, a row of `slab` if given),
    its memory taken from `budget` (LimitExceeded if it cannot be)."""
    if keep is not None:
        _check_bound("keep", keep)
    if delta is not None:
        _check_bound("delta", delta)
    if template.is_binary:
        return BinaryElement(name, template, keep, delta, eid, slab, row, budget)
    return Element(name, template, keep, delta, eid, budget)


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

    def newest(self, elements) -> bytes:
        """The newest record of each element (all rows of this slab), in order, skipping the empty
        and the deleted ones. Reads each element's bounds without its lock: a record is written
        before its element's `last` moves past it, so a record read is always a whole one; while
        the read runs, an element that wraps its ring may give a newer record than its `last`."""
        import numpy as np

        count = len(elements)
        rows = np.fromiter([e._row for e in elements], np.intp, count)
        lasts = np.fromiter([e._last for e in elements], np.int64, count)
        firsts = np.fromiter([e._first for e in elements], np.int64, count)
        held = lasts > firsts
        if not held.all():
            rows, lasts = rows[held], lasts[held]
        return self.array[rows, (lasts - 1) % self.slots].tobytes()


def _check_bound(what, n):
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise BadArgument(f"{what} must be a positive integer (or None), got {n!r}")


# The longest timeout, in seconds (a year): NaN, infinity and anything longer are refused (None
# waits for ever), as a deadline past it cannot be turned into a socket or condition timeout.
MAX_TIMEOUT = 365 * 24 * 3600


def _check_timeout(timeout):
    """The timeout, if it is None or 0 to MAX_TIMEOUT seconds; BadArgument otherwise."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 <= timeout <= MAX_TIMEOUT):
        raise BadArgument(f"timeout must be None (for ever) or 0 to {MAX_TIMEOUT} seconds, got {timeout!r}")
    return timeout


def _check_index(index):
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise Expired(f"index {index!r} is not valid: indices are integers from 0")


def _check_pattern(pattern, template):
    if not isinstance(pattern, (list, tuple)) or len(pattern) != len(template.fields):
        raise TemplateMismatch(f"a pattern needs {len(template.fields)} entries for {template}")
    checked = []
    for i, entry in enumerate(pattern):
        if not isinstance(entry, (list, tuple)) or len(entry) != 2 or entry[0] not in (0, 1):
            raise TemplateMismatch(f"pattern entry {i}: expected (0, value) or (1, type name), got {entry!r}")
        kind, value = entry
        if kind == 1 and value not in ("any", "int", "float", "str", "bytes", "bool"):
            raise TemplateMismatch(f"pattern entry {i}: unknown type {value!r}")
        checked.append((kind, value))
    return tuple(checked)


_PATTERN_TYPES = {"int": int, "float": (float, int), "str": str, "bytes": bytes, "bool": bool}


def _matches(pattern, item) -> bool:
    for (kind, want), value in zip(pattern, item):
        if kind == 0:
            if value != want or (type(value) is bool) != (type(want) is bool):
                return False
        elif want != "any":
            if not isinstance(value, _PATTERN_TYPES[want]) or (want != "bool" and isinstance(value, bool)):
                return False
    return True

