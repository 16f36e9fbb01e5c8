"""Typed elements: tuples of msgpack-encodable fields, held in a deque, matched Linda-style."""

from __future__ import annotations

from collections import deque
from itertools import islice

from .element import WOULD_BLOCK, Element
from .errors import Expired, LimitExceeded, UnknownElement

# Marks a slot whose tuple a Linda `in_` removed out of order.
_TAKEN = object()
# A typed element takes its tuples' bytes from the memory budget ahead of need, in steps of at least
# this many, and gives back only what it holds twice over: most moves touch no shared lock.
_GRAIN = 4096


class TypedElement(Element):
    """An element of a typed template (see `Element`): each move checks every field
    (TemplateMismatch naming it); `find` matches held tuples Linda-style."""

    # Its cursors and waiter counts as slots (as Python ints: nothing in C appends to a typed element)
    __slots__ = ("_first", "_last", "_sleepers", "_parked")

    # -- storage hooks: a deque whose item 0 has index `first` --------------------------------

    def _init_storage(self):
        self._items = deque()
        self._sizes = deque()       # the bytes each held tuple costs: its payload and its objects
        self._held_bytes = 0        # their sum
        # The objects a held tuple costs besides its payload (Template.checked): the tuple, one
        # object of up to 9 bytes of payload per field, two deque slots.
        self._tuple_bytes = 64 + 41 * len(self.template.fields)
        # The values as `_append` takes them, checked against the template (TemplateMismatch
        # naming the field): (the tuple, its payload in bytes).
        self._checked = self.template.checked

    def _append(self, checked) -> int:
        """Store one checked tuple at index `last`, publish it, and discard down to `keep`; its index:
        the steps of the ring append (pastset/ring.py's module doc), on a deque. The budget is asked
        first, so that a refused move changes nothing."""
        values, nbytes = checked
        nbytes += self._tuple_bytes
        held = self._held_bytes + nbytes
        if held > self.held_charge:
            self._hold(held, f"a move into element {self.name}")
        self._items.append(values)
        self._sizes.append(nbytes)
        self._held_bytes = held
        last = self._last
        self._last = last + 1
        if self.keep is not None and last + 1 - self._first > self.keep:
            self._drop_to(last + 1 - self.keep)
        return last

    def _hold(self, need: int, what: str) -> None:
        """Make the budget cover `need` bytes of held data, with room for more if it has it (or
        give back what is covered beyond that room)."""
        target = need + (need >> 3) + _GRAIN
        if target <= self.held_charge:
            self._give(self.held_charge - target)
        else:
            try:
                self._take(target - self.held_charge, what)
            except LimitExceeded:
                self._take(need - self.held_charge, what)   # no room to spare: just what it needs
                target = need
        self.held_charge = target

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
        if self.held_charge > 2 * held + 2 * _GRAIN:
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
        # the payload of the held tuples, as `Template.checked` counts it (a tuple a Linda `in_` took
        # out of order until it is dropped): what the budget holds, less the objects of each tuple
        return self._held_bytes - len(self._sizes) * self._tuple_bytes

    def _free_storage(self):
        self._items.clear()
        self._sizes.clear()
        self._held_bytes = 0

    def _bound_to(self, keep, delta):
        pass  # a deque needs no preallocation


    def _peek_match(self, pattern):
        if self._deleted:
            raise UnknownElement(f"element {self.name} was deleted")
        for offset, item in enumerate(self._items):
            if item is not _TAKEN and _matches(pattern, item):
                return self._first + offset, item
        return WOULD_BLOCK

    def _take_out(self, index):
        self._items[index - self._first] = _TAKEN


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
