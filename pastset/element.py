"""Elements: ordered, append-only logs of tuples of one template, with blocking reads and flow control."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from time import monotonic

from .budget import MemoryBudget
from .checks import check_bounds, check_index, check_pattern, check_timeout
from .errors import Expired, TemplateMismatch, Timeout, UnknownElement
from .template import Template

try:   # a binary element's cursors, at a layout C relies on (pastset/ring_c/pastset_ring.h)
    from ._ring import Cursors
except ImportError:   # not built (no compiler at install): the same four attributes as slots
    class Cursors:
        __slots__ = ("_first", "_last", "_sleepers", "_parked")

# Returned by `attempt` when the operation would have to wait.
WOULD_BLOCK = object()
# The blocking operations, as `attempt` knows them.
MOVE, OBSERVE, FIND = range(3)
# What one element costs besides its data: the object, its mutex and conditions, its table entries
# (measured with tracemalloc: about 2.3 KB); its template is counted apart (Template.nbytes).
_ELEMENT_BYTES = 2048


@dataclass(frozen=True)
class ElementInfo:
    """A snapshot of one element, as `eventspace ps stat` shows it. `nbytes` is the data it holds: the
    records of a binary element; the str and bytes fields of a typed one's tuples, and what the
    objects of their `any` fields take."""

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

    Variants differ only in their storage hooks (`_init_storage`, `_checked`, `_append`, `_get`, `_drop_to`,
    `_read`, `_span_bytes`, `_nbytes`, `_free_storage`, `_bound_to`, `_peek_match`, `_take_out`),
    as in `queue.Queue`: `pastset.typed.TypedElement` stores typed tuples in a deque,
    `pastset.ring.BinaryElement` packed records in a ring.

    A node server answers blocking requests without a thread per waiter through `attempt`,
    `commit` and `park` (see there).

    Memory: an element takes what it holds from its server's `MemoryBudget` before allocating it
    (its own objects when made, a ring when made or resized, a typed element's tuples as they are
    moved) and gives it all back when deleted; what would pass the budget raises LimitExceeded and
    changes nothing.
    """

    # What an append reads and writes (_first, _last, _sleepers, _parked) is in each kind's base: a
    # binary element's `Cursors`, at the layout pastset's ring appender contract names
    # (pastset/ring_c/pastset_ring.h); a typed element's own slots. Everything else is in __dict__.
    __slots__ = ("__dict__", "__weakref__")

    slab = None  # the RingSlab whose row holds a binary element's ring, if any

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
        self.held_charge = 0
        # The mutex must be held whenever first, last or the storage is read or mutated, with
        # one exception: a binary element's single-writer appender (see BinaryElement.appender).
        # Both conditions below share it.
        self.mutex = threading.Lock()
        self._changed = threading.Condition(self.mutex)
        self._sleepers = 0      # threads waiting on _changed
        # Requests a node server parked on this element, and how it wants to hear of a change
        # while any are parked (see `park`).
        self._parked = 0
        self._on_change = None
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
            check_timeout(timeout)
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
            check_timeout(timeout)
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
                check_bounds(self.keep, n)
                self._bound_to(self.keep, n)
                self._delta = n
                self._signal_change()
            return self._delta

    def axe(self, index: int) -> int:
        """Discard every tuple up to and including `index` (at most up to `last()`); returns the new first."""
        check_index(index)
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
        check_index(lo)
        check_index(hi)
        with self.mutex:
            self._check_alive()
            return self._read_held(lo, hi)

    def latest(self, n: int = 1) -> tuple[int, list | bytes]:
        """The newest `n` held tuples (fewer if fewer are held), as (start, items); never blocks."""
        check_index(n)
        with self.mutex:
            self._check_alive()
            return self._read_held(newest=n)

    def find(self, pattern, remove: bool = False, timeout: float | None = None) -> tuple:
        """Linda-style matching: the oldest held tuple matching `pattern` (removed if `remove`).

        `pattern` has one entry per field: `(0, value)` matches that value, `(1, type_name)`
        matches any value of that field type ('any' matches everything). Typed elements only.
        """
        pattern = self.check_pattern(pattern)
        if timeout is not None:
            check_timeout(timeout)
        with self.mutex:
            item = self._try_find(pattern, remove)
            if item is WOULD_BLOCK:
                item = self._block(self._try_find, (pattern, remove), timeout, "find")
            return item

    def info(self) -> ElementInfo:
        with self.mutex:
            return ElementInfo(self.name, str(self.template), self._first, self._last,
                               self.keep, self._delta, self._nbytes())

    def check_pattern(self, pattern) -> tuple:
        """`pattern` checked for `find` (TemplateMismatch for a binary element or a bad entry)."""
        if self.template.is_binary:
            raise TemplateMismatch(f"element {self.name}: Linda matching needs a typed template")
        return check_pattern(pattern, self.template)

    def read_size(self, lo: int = 0, hi: int | None = None, newest: int | None = None) -> int:
        """About the bytes of data `read_range(lo, hi)` (hi None: all) or `latest(newest)` would
        return now: what a reply of it will carry. Expired for an index that is not valid."""
        for index in (lo, hi, newest):
            if index is not None:
                check_index(index)
        with self.mutex:
            last = self._last
            if newest is not None:
                lo = last - newest
            start = min(max(lo, self._first), last)
            return self._span_bytes(start, max(start, last if hi is None else min(hi, last)))

    def __repr__(self) -> str:
        return f"<Element {self.name} {self.template} first={self._first} last={self._last}>"

    # -- what a node server uses to answer blocking requests without a thread per waiter -----
    # All with the mutex held.

    def attempt(self, kind: int, arg):
        """Try a blocking operation once, without waiting and without consuming anything.

        MOVE (arg: the values) returns the new tuple's index; OBSERVE (arg: an index, or None for
        the first held) and FIND (arg: a checked pattern) return (index, tuple). WOULD_BLOCK when
        it would have to wait; errors as the operation raises them. A consuming observe or a
        removing find is finished by `commit` once its reply is on its way, so that a consumer
        that vanished meanwhile takes nothing.
        """
        if kind == MOVE:
            return self._try_move(arg)
        if kind == OBSERVE:
            return self._peek(arg)
        return self._peek_match(arg)

    def commit(self, index: int) -> None:
        """Remove tuple `index`, which `attempt` found (the first one, or for typed elements any held one)."""
        if index == self._first:
            self._drop_to(index + 1)
        else:
            self._take_out(index)
        self._signal_change()

    def park(self, on_change) -> None:
        """Count one more request parked on this element; `on_change(element)` is called, mutex
        held, by whichever thread changes it while any is parked."""
        self._parked += 1
        self._on_change = on_change

    def unpark(self) -> None:
        """One parked request was answered or dropped."""
        self._parked -= 1

    @property
    def parked(self) -> int:
        """How many requests a node server has parked on this element."""
        return self._parked

    def mark_deleted(self) -> None:
        """What the server's table calls once it removed this element: every waiter wakes with
        UnknownElement, later calls raise it, and its memory goes back to the budget."""
        with self.mutex:
            self._deleted = True
            self._signal_change()
            self._free_storage()
            self._give(self._charged)

    # -- one try of each blocking operation (mutex held), shared by `_block` and `attempt` ------

    def _try_move(self, values):
        if self._deleted:
            raise UnknownElement(f"element {self.name} was deleted")
        # A typed tuple that can never be moved is refused now, not after waiting for room.
        values = self._checked(values)
        if self._delta is not None and self._last - self._first >= self._delta:
            return WOULD_BLOCK
        index = self._append(values)
        if self._sleepers or self._parked:
            self._signal_change()
        return index

    def _try_observe(self, index):
        found = self._peek(index)
        if found is not WOULD_BLOCK and index is None:
            self.commit(found[0])
        return found

    def _try_find(self, pattern, remove):
        found = self._peek_match(pattern)
        if found is WOULD_BLOCK:
            return found
        if remove:
            self.commit(found[0])
        return found[1]

    def _peek(self, index):
        """(index, tuple) for `observe(index)` without consuming anything."""
        if self._deleted:
            raise UnknownElement(f"element {self.name} was deleted")
        if index is None:
            index = self._first
            if index >= self._last:
                return WOULD_BLOCK
            return index, self._get(index)
        check_index(index)
        if index < self._first:
            raise Expired(f"element {self.name}: tuple {index} was discarded (first held is {self._first})")
        if index >= self._last:
            return WOULD_BLOCK
        return index, self._get(index)

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

    # -- waiting -------------------------------------------------------------------------------

    def _block(self, attempt, args, timeout, what):
        """Retry `attempt` each time the element changes, until it succeeds or `timeout` passes."""
        deadline = None if check_timeout(timeout) is None else monotonic() + timeout
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
        if self._parked:
            self._on_change(self)

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

    # -- storage hooks: what each variant stores and how (mutex held) ------------------------------

    def _init_storage(self):
        raise NotImplementedError

    def _peek_match(self, pattern):
        """(index, tuple) of the oldest held tuple matching a checked `pattern`, or WOULD_BLOCK."""
        raise NotImplementedError

    def _take_out(self, index):
        """Remove held tuple `index`, not the first, out of order (a Linda `in_`)."""
        raise NotImplementedError
