"""A node's collector table: each collector's switch, in-flight start, mark and drain bound, by id."""

from __future__ import annotations

from array import array

from .recorder import NEVER

PAGE = 64    # collector ids a page holds (a small run fits in one; 1,841 collectors take 29)


class Page:
    """The table's slots of PAGE consecutive collector ids; a collector's slot is index `at` of each.

    `switches[at]`: 1 collects, 0 only forwards. `starts[at]`: the start (ns, node clock) of the
    operation the collector is timing now, 0 when none. `marks[at]`: what a collector that marks its
    operations (an MPI call) knew when the one under way began, the (op, flags, element, arg,
    nbytes) of eventspace.space.Mark, read only while `starts[at]` is not 0 (it may be left behind
    afterwards); 0 for a collector that never marks. `bounds[at]`: the index of its trace element at
    which the collector calls its spill (eventspace.recorder), NEVER for one nobody records.

    A page never grows or moves: compiled collectors hold its buffers and write their slots in
    place (one store each, atomic under the GIL). A mark is written before its start, so that a
    reader that finds the start the same after reading the mark has the mark of that operation.
    """

    __slots__ = ("switches", "starts", "marks", "bounds")

    def __init__(self):
        self.switches = bytearray(b"\x01") * PAGE
        self.starts = array("q", bytes(8 * PAGE))
        self.marks: list[int | tuple] = [0] * PAGE
        self.bounds = array("q", [NEVER]) * PAGE


class CollectorTable:
    """The collector table of one node, by collector id (system elements' ids among them): pages
    of PAGE ids, one more appended whenever the run's ids outgrow them (an MPI run's communicators
    do). Pages already handed out stay where they are."""

    def __init__(self, ids: int):
        self.pages: list[Page] = []
        self.grow(ids)

    def __len__(self) -> int:
        return len(self.pages) * PAGE

    def grow(self, ids: int) -> None:
        """Room for ids 0 .. ids - 1 (switched on, nothing in flight); nothing moves."""
        while len(self) < ids:
            self.pages.append(Page())

    def place(self, cid: int) -> tuple[Page, int]:
        """(page, index in it) of collector `cid`'s slot; IndexError beyond the table."""
        if cid < 0:
            raise IndexError(f"collector id {cid} is not in the table")
        return self.pages[cid // PAGE], cid % PAGE

    def switch(self, cid: int) -> bool:
        """Whether collector `cid` collects (True) or only forwards (False)."""
        page, at = self.place(cid)
        return bool(page.switches[at])

    def set(self, cid: int, on: bool) -> None:
        page, at = self.place(cid)
        page.switches[at] = on

    def in_flight(self) -> list[list[int]]:
        """[collector id, start ns] of every operation under way now, followed by its mark's other
        five fields (see Page) for a collector that marks them."""
        rows = []
        for first, page in zip(range(0, len(self), PAGE), self.pages):
            starts, marks = page.starts, page.marks
            for at, t0 in enumerate(starts):
                if t0:
                    mark = marks[at]
                    row = [first + at, t0, *mark] if mark else [first + at, t0]
                    if starts[at] == t0:   # else that operation ended while the mark was read
                        rows.append(row)
        return rows
