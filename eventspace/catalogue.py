"""The virtual event space: every collector of a pathmap, where it sits, and where its trace element lives."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from paths import Pathmap

from . import trace

TRACE_PREFIX = "trace/"  # collector N writes into trace element trace/N (Entry.trace; see Catalogue.by_trace)
SYSTEM_ROLE = "system"       # the role of a node's system summary element (eventspace.system)


@dataclass(frozen=True)
class TreeLayout:
    """What reading a tree's collectors needs of the tree: its `members` (threads, in the
    pathmap's order) and the fan-in of each join that has an arrival collector, by stage."""

    members: tuple[str, ...]
    fan_in: dict[str, int]


@dataclass(frozen=True)
class Entry:
    """One event collector.

    `id` is its id in the run (paths.CollectorPoint.id, from 1), the `collector` field of its
    trace tuples. `role` is where it sits (source, sink, contribute, arrival, departure, or stage for a
    collector named by stage id or written into a path); `stage` the stage it is in front of
    (behind, for departure); `node` the node it runs on; `thread`, `path`, `element`, `tree`
    what it belongs to (None where that does not apply: a sink serves every thread using its
    element). Its events go to trace element `trace` on node `trace_node`. `element_id` is what
    its trace tuples carry in the `element` field: the element's index in the pathmap, or the
    tree's index when `flags` has trace.TREE.
    """

    id: int
    role: str
    stage: str
    node: str
    cluster: str
    thread: str | None
    path: str | None
    element: str | None
    tree: str | None
    element_id: int
    flags: int
    trace: str
    trace_node: str

    def describe(self) -> str:
        """One line naming it, e.g. `source T3/row_3_4 (T3 -> row_3_4) on A`."""
        what = self.path or self.tree or self.stage
        who = f" ({self.thread} -> {self.element})" if self.thread and self.element else ""
        return f"{self.role} {what}{who} on {self.node}"


class Catalogue:
    """Every collector of a pathmap, derived from the pathmap alone (so any process can build it).

    Ids are those `Pathmap.collector_points()` gives (from 1, in its order); the trace element of
    collector i is `trace/i`, kept on the collector's node unless the instrument section names a
    location. `entries` are the collectors. `system` holds one entry more per node, in the
    pathmap's order, numbered after every collector (so that collector ids do not depend on them):
    the node's system summary element (role `system`, eventspace.system), which only views that
    name it select (`role:system`); none where the instrument section says `system: false` (an
    MPI run's pathmap does: it appends collectors as the run goes on). `threads` are the pathmap's threads as (name, node), in order
    (a system record's `element` is 1 + an index into it); `trees` the TreeLayout of each tree
    that has collectors. Look an entry up by id (`catalogue[i]`, `column`, `label`: both kinds) or
    by its trace element's name (`by_trace`), never by taking the name apart.
    """

    def __init__(self, pathmap: Pathmap):
        self.pathmap = pathmap
        pm = pathmap
        element_index = {e.name: i for i, e in enumerate(pm.elements)}
        tree_index = {t.name: i for i, t in enumerate(pm.trees)}
        cluster_of = {n.name: n.cluster for n in pm.nodes}
        location = pm.instrument.location
        entries = []
        for point in pm.collector_points():
            path = pm.path(point.path) if point.path else None
            element = path.element if path else None
            if element is None and point.role in ("sink", "stage"):
                stage = pm.stage(point.stage)
                if stage.type == "element":
                    element = stage.params.get("element")
                else:
                    through = pm.paths_through(point.stage)
                    if len(through) == 1:
                        path, element = through[0], through[0].element
            thread = point.thread or (path.thread if path else None)
            if point.tree is not None:
                element_id, flags = tree_index[point.tree], trace.TREE
            else:
                element_id, flags = element_index.get(element, 0), 0
            trace_node = point.node if location == "local" else location
            entries.append(Entry(point.id, point.role, point.stage, point.node, cluster_of[point.node],
                                 thread, path.name if path else None, element, point.tree,
                                 element_id, flags, f"{TRACE_PREFIX}{point.id}", trace_node))
        self.entries: tuple[Entry, ...] = tuple(entries)
        self.system: tuple[Entry, ...] = tuple(
            Entry(len(entries) + i, SYSTEM_ROLE, "sampler", n.name, n.cluster, None, None, None, None, 0,
                  trace.SYSTEM, f"{TRACE_PREFIX}{len(entries) + i}", n.name)
            for i, n in enumerate(pm.nodes if pm.instrument.system else (), 1))
        self.threads: tuple[tuple[str, str], ...] = tuple((t.name, t.node) for t in pm.threads)
        self.trees: dict[str, TreeLayout] = {
            tree: TreeLayout(tuple(pm.tree(tree).members), {e.stage: pm.fan_in(tree, e.stage) for e in entries
                                                            if e.tree == tree and e.role == "arrival"})
            for tree in dict.fromkeys(e.tree for e in entries if e.tree)}

    def extended(self, pathmap: Pathmap, part: Pathmap) -> Catalogue:
        """The catalogue of `pathmap`, which is this catalogue's pathmap grown by `part` (a pathmap
        over the same nodes and threads): part's elements and trees after its own, part's paths and
        stages among its own, part's instrument rules after its own (eventspace.mpi.generate's
        add_communicator grows a run's pathmap so). Its entries are these, then part's collectors
        numbered on from here; only part's are worked out, so it costs what part holds. Ids never
        change. ValueError for a `pathmap` not grown so, or one with system elements (numbered after
        every collector, they would move)."""
        old = self.pathmap
        if (pathmap.elements[len(old.elements):] != part.elements or pathmap.trees[len(old.trees):] != part.trees
                or pathmap.threads != old.threads or pathmap.nodes != part.nodes
                or pathmap.instrument.collectors[len(old.instrument.collectors):] != part.instrument.collectors
                or pathmap.instrument.location != part.instrument.location):
            raise ValueError(f"pathmap {pathmap.name} is not {old.name} grown by {part.name}'s elements, trees and "
                             "collectors; a growing run may only append collectors")
        if pathmap.instrument.system or part.collectors or self.system:
            raise ValueError(f"pathmap {pathmap.name} has system elements or collector stages; a run that grows "
                             "has neither (their ids would move)")
        added = Catalogue(part)
        shift, elements, trees = len(self.entries), len(old.elements), len(old.trees)
        new = tuple(replace(e, id=e.id + shift, trace=f"{TRACE_PREFIX}{e.id + shift}",
                            element_id=e.element_id + (trees if e.flags & trace.TREE else elements if e.element else 0))
                    for e in added.entries)
        grown = Catalogue.__new__(Catalogue)
        grown.pathmap, grown.entries, grown.system = pathmap, self.entries + new, ()
        grown.threads, grown.trees = self.threads, {**self.trees, **added.trees}
        return grown

    def __len__(self) -> int:
        """How many collectors."""
        return len(self.entries)

    def __iter__(self):
        """The collectors, by id."""
        return iter(self.entries)

    def __getitem__(self, cid: int) -> Entry:
        """The collector (or system element) with id `cid` (from 1); KeyError if there is none."""
        if isinstance(cid, int) and 1 <= cid <= len(self.entries):
            return self.entries[cid - 1]
        if isinstance(cid, int) and 1 <= cid - len(self.entries) <= len(self.system):
            return self.system[cid - len(self.entries) - 1]
        raise KeyError(f"pathmap {self.pathmap.name} has no collector {cid!r} "
                       f"(ids 1..{len(self.entries)}, system elements after them)")

    def system_of(self, node: str) -> Entry:
        """The system summary element of `node`; KeyError if the pathmap has no such node."""
        for entry in self.system:
            if entry.node == node:
                return entry
        raise KeyError(f"pathmap {self.pathmap.name} has no node {node!r}")

    def thread_of(self, element: int) -> str | None:
        """The thread a system record's `element` names (1 + its index in `threads`); None for 0,
        the whole process, or an index past the pathmap's threads."""
        return self.threads[element - 1][0] if 1 <= element <= len(self.threads) else None

    def by_trace(self, name: str) -> Entry:
        """The collector whose trace element is `name`; KeyError if there is none."""
        try:
            return self._by_trace[name]
        except KeyError:
            raise KeyError(f"pathmap {self.pathmap.name} has no collector with trace element {name!r}") from None

    @cached_property
    def _by_trace(self) -> dict[str, Entry]:
        return {entry.trace: entry for entry in (*self.entries, *self.system)}

    def on_node(self, node: str) -> tuple[Entry, ...]:
        """The collectors whose trace elements live on `node`."""
        return self._by_trace_node.get(node, ())

    @cached_property
    def _by_trace_node(self) -> dict[str, tuple[Entry, ...]]:
        out: dict[str, list[Entry]] = {}
        for entry in self.entries:
            out.setdefault(entry.trace_node, []).append(entry)
        return {k: tuple(v) for k, v in out.items()}

    def column(self, attribute: str) -> np.ndarray:
        """An array indexed by collector id of each collector's `attribute` as a small int code
        (index 0 unused), with the codes' names in `names(attribute)`: for grouping batches."""
        return self._columns(attribute)[0]

    def names(self, attribute: str) -> tuple:
        return self._columns(attribute)[1]

    def _columns(self, attribute):
        cache = self.__dict__.setdefault("_column_cache", {})
        if attribute not in cache:
            attr = {"collector": "id"}.get(attribute, attribute)
            values = [None] + [getattr(e, attr) if attr != "all" else "all" for e in self.entries + self.system]
            names = tuple(dict.fromkeys(v for v in values[1:]))
            code = {name: i for i, name in enumerate(names)}
            column = np.array([0] + [code[v] for v in values[1:]], dtype=np.int64)
            cache[attribute] = (column, names)
        return cache[attribute]

    def label(self, records: np.ndarray) -> list[dict]:
        """Records as dicts with the catalogue's names (thread, node, element or tree, role, op; a
        system record's thread is the one its `element` names, None for the whole process)."""
        out = []
        every = self.entries + self.system
        for r in records:
            entry = every[int(r["collector"]) - 1] if 1 <= r["collector"] <= len(every) else None
            thread = entry.thread if entry and entry.role != SYSTEM_ROLE else \
                self.thread_of(int(r["element"])) if entry else None
            out.append({
                "collector": int(r["collector"]), "op": trace.OP_NAMES.get(int(r["op"]), str(r["op"])),
                "flags": int(r["flags"]), "arg": int(r["arg"]), "nbytes": int(r["nbytes"]),
                "t_start": int(r["t_start"]), "t_end": int(r["t_end"]),
                "role": entry.role if entry else None, "thread": thread,
                "node": entry.node if entry else None, "element": entry.element if entry else None,
                "tree": entry.tree if entry else None, "path": entry.path if entry else None,
            })
        return out
