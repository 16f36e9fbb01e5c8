"""The element table of one node server: its elements by name and id, who created them, and "did you mean"."""

from __future__ import annotations

import difflib
import itertools
import threading
from bisect import bisect_left

from .budget import MemoryBudget
from .checks import check_bounds
from .element import Element
from .typed import TypedElement
from .errors import BadArgument, LimitExceeded, TemplateMismatch, UnknownElement
from .protocol import Limits
from .ring import BinaryElement, RingSlab, ring_slots
from .template import Template


class ElementTable:
    """The elements one server hosts, by name and by id, within its `Limits`.

    `find_all` is the one way from a reference (a name, an id, or an Element) to an element.
    A remote client may create at most `max_elements_per_client` elements (its share counts what
    it created that still exists); the table as a whole holds at most `max_elements`.
    Thread-safe.
    """

    def __init__(self, server: str, limits: Limits, budget: MemoryBudget):
        self.server = server
        self.limits = limits
        self.budget = budget
        # The table mutex must be held whenever the table changes.
        self._mutex = threading.Lock()
        self._by_name: dict[str, Element] = {}
        self._by_id: dict[int, Element] = {}
        self._ids = itertools.count(1)
        self._creators: dict[int, object] = {}   # element id -> the remote client that created it
        self._created: dict[object, int] = {}    # remote client -> elements it created that exist
        # The names, sorted, for "did you mean" (_close_names): names entered since are sorted in
        # when many have come or a lookup needs them; a delete makes the list stale.
        self._sorted: list[str] = []
        self._unsorted: list[str] = []
        self._sorted_stale = False

    def __len__(self) -> int:
        return len(self._by_name)

    # -- finding -------------------------------------------------------------------------------

    def named(self, name: str) -> Element:
        """The element called `name`; UnknownElement (with close names) if there is none."""
        element = self._by_name.get(name) if name.__class__ is str else None
        if element is None:
            raise UnknownElement(self.unknown(name))
        return element

    def find_all(self, refs) -> list[Element]:
        """The elements `refs` name, in order: each a name, an id, or an Element (taken as it is).
        UnknownElement for the first that names none."""
        by_name, by_id = self._by_name, self._by_id
        found = [by_name.get(ref) if ref.__class__ is str else (ref if isinstance(ref, Element) else by_id.get(ref))
                 for ref in refs]
        if None in found:
            ref = refs[found.index(None)]
            raise UnknownElement(self.unknown(ref) if isinstance(ref, str)
                                 else f"no element with id {ref!r} on server {self.server} (deleted?)")
        return found

    def find(self, ref) -> Element:
        """`find_all` of one reference."""
        return self.find_all((ref,))[0]

    def page(self, start: str | None, count: int) -> tuple[list[Element], str | None]:
        """Up to `count` elements in name order, from the first named `start` or after (None: the
        first), and the name of the one after them (None if there is none): a listing in pages,
        each costing what its elements do, however many there are."""
        with self._mutex:
            if self._sorted_stale or self._unsorted:
                self._sort_names()
            names = self._sorted
            at = 0 if start is None else bisect_left(names, start)
            page = names[at:at + count + 1]
            after = page.pop() if len(page) > count else None
            return [self._by_name[name] for name in page], after

    def snapshot(self) -> list[Element]:
        """Every element, sorted by name."""
        with self._mutex:
            return sorted(self._by_name.values(), key=lambda e: e.name)

    # -- changing ------------------------------------------------------------------------------

    def enter(self, name, template: Template, keep, delta, creator) -> Element:
        """Bind to (or create) element `name` for `creator` (a remote client, held to its share;
        None: an in-process caller). See `TupleServer.enter`."""
        self.check_name(name)
        check_bounds(keep, delta)
        with self._mutex:
            element = self._by_name.get(name)
            if element is None:
                if len(self._by_name) >= self.limits.max_elements:
                    raise LimitExceeded(
                        f"server {self.server} already hosts {self.limits.max_elements} elements "
                        "(Limits.max_elements); delete some or raise the limit"
                    )
                if creator is not None and self._created.get(creator, 0) >= self.limits.max_elements_per_client:
                    raise LimitExceeded(
                        f"this client (one connection) created {self._created[creator]} elements on server "
                        f"{self.server} that still exist, its share (Limits.max_elements_per_client = "
                        f"{self.limits.max_elements_per_client}); delete some of them, or raise the limit"
                    )
                element = make_element(name, template, keep, delta, next(self._ids), budget=self.budget)
                self._add(element, creator)
                return element
        if element.template != template:
            raise TemplateMismatch(
                f"element {name} exists with template {element.template}, not {template}"
            )
        for what, asked, has in (("keep", keep, element.keep), ("delta", delta, element.delta())):
            if asked is not None and asked != has:
                raise TemplateMismatch(f"element {name} exists with {what}={has}, not {asked}")
        return element

    def enter_rings(self, names, template: Template, keep: int) -> list[Element]:
        """New binary elements whose rings are rows of one slab (see `TupleServer.enter_rings`)."""
        if not template.is_binary:
            raise TemplateMismatch(f"rings need a binary template, not {template}")
        if keep is None:
            raise BadArgument("rings are bounded: give keep, a positive whole number of tuples")
        check_bounds(keep, None)
        names = list(names)
        for name in names:
            self.check_name(name)
        ring = ring_slots(keep, None) * template.record_size
        self.budget.check_ring(ring, f"the ring of element {names[0] if names else '-'}")
        made = []
        with self._mutex:
            if len(self._by_name) + len(names) > self.limits.max_elements:
                raise LimitExceeded(f"server {self.server} would host more than {self.limits.max_elements} "
                                    "elements (Limits.max_elements); delete some or raise the limit")
            taken = [n for n in names if n in self._by_name]
            if taken or len(set(names)) != len(names):
                raise TemplateMismatch(f"elements {', '.join(taken) or 'named twice'} exist already; "
                                       "rings are entered once, all new")
            # The slab's bytes are taken at once; each element gives its row back when deleted.
            self.budget.take(ring * len(names), f"{len(names)} rings of {ring:,} bytes")
            try:
                slab = RingSlab(template, keep, len(names))
                for row, name in enumerate(names):
                    made.append(make_element(name, template, keep, None, next(self._ids), slab, row, self.budget))
            except BaseException:
                for element in made:
                    element.mark_deleted()
                self.budget.give(ring * (len(names) - len(made)))
                raise
            for element in made:
                self._add(element, None)
        return made

    def delete(self, name: str) -> Element:
        """Take element `name` out of the table (the caller deletes it); UnknownElement if absent."""
        with self._mutex:
            element = self._by_name.pop(name, None) if name.__class__ is str else None
            if element is not None:
                del self._by_id[element.id]
                creator = self._creators.pop(element.id, None)
                if creator is not None:
                    left = self._created[creator] - 1
                    if left:
                        self._created[creator] = left
                    else:
                        del self._created[creator]
                self._sorted_stale = True
        if element is None:
            raise UnknownElement(self.unknown(name))
        return element

    def _add(self, element: Element, creator) -> None:
        """Put a new element in the table (mutex held)."""
        self._by_name[element.name] = element
        self._by_id[element.id] = element
        if creator is not None:
            self._creators[element.id] = creator
            self._created[creator] = self._created.get(creator, 0) + 1
        unsorted = self._unsorted
        unsorted.append(element.name)
        # Sorted in once they are a quarter as many as the sorted ones: a lookup never sorts many.
        if len(unsorted) > 1024 + len(self._sorted) // 4 and not self._sorted_stale:
            self._sort_names()

    # -- names ---------------------------------------------------------------------------------

    def check_name(self, name) -> None:
        """BadArgument unless `name` is a non-empty string; LimitExceeded past `Limits.max_name`."""
        if not isinstance(name, str) or not name:
            raise BadArgument(f"an element name is a non-empty string, got {name!r}")
        if len(name) > self.limits.max_name:
            raise LimitExceeded(
                f"element name of {len(name)} characters exceeds the limit of {self.limits.max_name}"
            )

    def unknown(self, name) -> str:
        """What UnknownElement says of `name`: with the closest names there are, if any are close."""
        if not isinstance(name, str) or len(name) > self.limits.max_name:
            # No element has such a name; and comparing megabytes would hold the loop for seconds.
            return f"no element named {name!r:.80}; enter it first"
        close = difflib.get_close_matches(name, self._close_names(name), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; enter it first"
        return f"no element named {name!r}{hint}"

    def _close_names(self, name: str) -> list[str]:
        """The names next to `name` in sorted order, nearest first, as many as a "did you mean"
        may compare: a typo most often keeps the start of a name, and a suggestion must cost the
        server's loop a few milliseconds however many elements it hosts, never a search of all."""
        with self._mutex:
            if self._sorted_stale or self._unsorted:
                self._sort_names()
            names = self._sorted
            above = bisect_left(names, name)
            below = above - 1
            close: list[str] = []
            work = 0
            while len(close) < _SUGGEST_NAMES and work < _SUGGEST_WORK and (below >= 0 or above < len(names)):
                for i in (above, below):
                    if 0 <= i < len(names):
                        close.append(names[i])
                        work += len(names[i]) * len(name)
                above += 1
                below -= 1
        return close

    def _sort_names(self) -> None:
        """Bring the sorted names up to date (mutex held)."""
        if self._sorted_stale:
            self._sorted = sorted(self._by_name)
            self._sorted_stale = False
        else:
            self._sorted += self._unsorted
            self._sorted.sort()   # a sorted run and a short one: merged, not sorted again
        self._unsorted = []


# A "did you mean" compares at most this many names, and names of at most this many characters in
# all times the length of the name asked for (difflib's work grows with both lengths).
_SUGGEST_NAMES = 200
_SUGGEST_WORK = 400_000


def make_element(name: str, template: Template, keep=None, delta=None, eid=0, slab=None, row=0,
                 budget: MemoryBudget | None = None) -> Element:
    """The element variant for `template` (binary templates get a ring, a row of `slab` if given),
    its memory taken from `budget` (LimitExceeded if it cannot be)."""
    check_bounds(keep, delta)
    if template.is_binary:
        return BinaryElement(name, template, keep, delta, eid, slab, row, budget)
    return TypedElement(name, template, keep, delta, eid, budget)


def read_once(keys: list, read) -> list:
    """`[read(k) for k in keys]`, calling `read` once for a key listed more than once (a batch read
    that names an element twice reads it once)."""
    if len(set(keys)) == len(keys):
        return [read(k) for k in keys]
    done: dict = {}
    out = []
    for k in keys:
        if k not in done:
            done[k] = read(k)
        out.append(done[k])
    return out
