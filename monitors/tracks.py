"""Timelines for exported events: a track per thread and per element or tree on each node, plus overflow lanes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eventspace.catalogue import Catalogue, Entry

UNKNOWN_NODE = "(unknown)"

_CHUNK = 1 << 16   # intervals laid out at a time

# Display order of the kinds of track inside one node.
_KIND_ORDER = {"thread": 0, "element": 1, "tree": 2, "stage": 3, "collector": 4}


@dataclass(frozen=True)
class Track:
    """One timeline. `node` is the process it belongs to; `name` the thread it shows, or
    `element E`, `tree T`, `stage S` for events no one thread owns (sinks, tree arrivals and
    departures), or `collector N` for a collector the catalogue does not know. `lane` 0 is the
    track itself; lane k > 0 holds events that would not nest in lanes below it."""

    node: str
    kind: str
    name: str
    thread: str | None = None
    lane: int = 0

    @property
    def label(self) -> str:
        return self.name if not self.lane else f"{self.name} (overlap {self.lane})"


@dataclass(frozen=True)
class Layout:
    """Where each record goes: `tracks` in display order (node by node, each track followed by
    its overflow lanes), `nodes` in display order, and `of[i]`, the index in `tracks` of record i."""

    nodes: tuple[str, ...]
    tracks: tuple[Track, ...]
    of: np.ndarray


def layout(records: np.ndarray, catalogue: Catalogue, starts, ends) -> Layout:
    """The tracks for `records` (a trace.DTYPE array) whose intervals, in the exporter's own
    time unit, are `starts[i]`..`ends[i]` (integers, ends >= starts).

    A thread's events go on the thread's track in its own node's process (the node its source
    and contribute collectors run on), whichever node recorded them; events of collectors with
    no thread go on the node's `element E` / `tree T` / `stage S` track. On one track, slices
    must nest or not overlap: an event that would overlap another partially goes on the first
    overflow lane where it nests (`lanes`). Deterministic: the same input gives the same layout.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    home = _thread_nodes(catalogue.entries)
    node_rank: dict[str, int] = {}
    for entry in catalogue.entries:
        node_rank.setdefault(home[entry.thread] if entry.thread else entry.node, len(node_rank))

    # Each record's base track, by its collector: numpy columns, not a list per record.
    cids = np.unique(records["collector"]) if len(records) else np.empty(0, dtype=np.uint32)
    bases: list[Track] = []
    base_code: dict[Track, int] = {}
    first_seen: dict[Track, int] = {}
    code_of = np.empty(len(cids), dtype=np.int64)
    for k, cid in enumerate(cids.tolist()):
        base = _base_track(_entry(catalogue, cid), cid, home)
        if base not in base_code:
            base_code[base] = len(bases)
            bases.append(base)
        first_seen.setdefault(base, cid)
        code_of[k] = base_code[base]
    group = code_of[np.searchsorted(cids, records["collector"])] if len(records) else np.empty(0, dtype=np.int64)
    by_group = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[by_group], np.arange(len(bases) + 1))

    def order(track: Track):
        node = node_rank.get(track.node, len(node_rank))
        return (node, track.node, _KIND_ORDER[track.kind], first_seen[track], track.name)

    tracks: list[Track] = []
    of = np.zeros(len(records), dtype=np.int64)
    for base in sorted(bases, key=order):
        k = base_code[base]
        members = by_group[bounds[k]:bounds[k + 1]]
        lane_of = lanes(starts[members], ends[members])
        first = len(tracks)
        tracks.extend(Track(base.node, base.kind, base.name, base.thread, lane)
                      for lane in range(int(lane_of.max()) + 1))
        of[members] = first + lane_of
    nodes = tuple(dict.fromkeys(t.node for t in tracks))
    return Layout(nodes, tuple(tracks), of)


def with_nodes(lay: Layout, nodes) -> Layout:
    """`lay` with the `nodes` it has no track on added after its own (processes that show only
    counters), in the order given."""
    extra = tuple(n for n in dict.fromkeys(nodes) if n not in lay.nodes)
    return Layout(lay.nodes + extra, lay.tracks, lay.of) if extra else lay


def lanes(starts, ends) -> np.ndarray:
    """Lane of each interval [starts[i], ends[i]] so that, in every lane, intervals nest or do
    not overlap (touching ends do not overlap). Intervals are taken by start, longest first, then
    by position; each goes on the lowest lane where it fits inside the innermost open interval
    (or where none is open). A nesting input stays in lane 0."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    order = np.lexsort((np.arange(len(starts)), -ends, starts))
    stacks: list[list[int]] = []   # per lane: ends of the open intervals, outermost first
    out = np.zeros(len(starts), dtype=np.int64)
    for lo in range(0, len(order), _CHUNK):   # the Python values of one chunk at a time
        chunk = order[lo:lo + _CHUNK]
        placed = []
        for start, end in zip(starts[chunk].tolist(), ends[chunk].tolist()):
            for lane, stack in enumerate(stacks):
                while stack and stack[-1] <= start:
                    stack.pop()
                if not stack or stack[-1] >= end:
                    break
            else:
                lane, stack = len(stacks), []
                stacks.append(stack)
            stack.append(end)
            placed.append(lane)
        out[chunk] = placed
    return out


def _thread_nodes(entries) -> dict[str, str]:
    """Each thread's node: where its source and contribute collectors run (a path's first stage
    and a member's tree entry are on the thread's own node); else where any of its collectors run."""
    home: dict[str, str] = {}
    for entry in entries:
        if entry.thread and entry.role in ("source", "contribute"):
            home.setdefault(entry.thread, entry.node)
    for entry in entries:
        if entry.thread:
            home.setdefault(entry.thread, entry.node)
    return home


def _entry(catalogue: Catalogue, cid: int) -> Entry | None:
    return catalogue.entries[cid - 1] if 1 <= cid <= len(catalogue.entries) else None


def _base_track(entry: Entry | None, cid: int, home: dict[str, str]) -> Track:
    if entry is None:
        return Track(UNKNOWN_NODE, "collector", f"collector {cid}")
    if entry.thread:
        return Track(home[entry.thread], "thread", entry.thread, entry.thread)
    if entry.tree:
        return Track(entry.node, "tree", f"tree {entry.tree}")
    if entry.element:
        return Track(entry.node, "element", f"element {entry.element}")
    return Track(entry.node, "stage", f"stage {entry.stage}")
