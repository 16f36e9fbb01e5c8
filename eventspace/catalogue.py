"""The virtual event space: every collector of a pathmap, where it sits, and where its trace element lives."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from paths import Pathmap

from . import trace

TRACE_PREFIX = "trace/"  # collector N writes into trace element trace/N (Entry.trace; see Catalogue.by_trace)


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
    location. Look a collector up by id (`catalogue[i]`) or by its trace element's name
    (`by_trace`), never by taking the name apart.
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

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def __getitem__(self, cid: int) -> Entry:
        """The collector with id `cid` (from 1); KeyError if there is none."""
        if not isinstance(cid, int) or not 1 <= cid <= len(self.entries):
            raise KeyError(f"pathmap {self.pathmap.name} has no collector {cid!r} "
                           f"(ids 1..{len(self.entries)})")
        return self.entries[cid - 1]

    def by_trace(self, name: str) -> Entry:
        """The collector whose trace element is `name`; KeyError if there is none."""
        try:
            return self._by_trace[name]
        except KeyError:
            raise KeyError(f"pathmap {self.pathmap.name} has no collector with trace element {name!r}") from None

    @cached_property
    def _by_trace(self) -> dict[str, Entry]:
        return {entry.trace: entry for entry in self.entries}

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
            values = [None] + [getattr(e, attr) if attr != "all" else "all" for e in self.entries]
            names = tuple(dict.fromkeys(v for v in values[1:]))
            code = {name: i for i, name in enumerate(names)}
            column = np.array([0] + [code[v] for v in values[1:]], dtype=np.int64)
            cache[attribute] = (column, names)
        return cache[attribute]

    def label(self, records: np.ndarray) -> list[dict]:
        """Records as dicts with the catalogue's names (thread, node, element or tree, role, op)."""
        out = []
        for r in records:
            entry = self.entries[int(r["collector"]) - 1] if 1 <= r["collector"] <= len(self.entries) else None
            out.append({
                "collector": int(r["collector"]), "op": trace.OP_NAMES.get(int(r["op"]), str(r["op"])),
                "flags": int(r["flags"]), "arg": int(r["arg"]), "nbytes": int(r["nbytes"]),
                "t_start": int(r["t_start"]), "t_end": int(r["t_end"]),
                "role": entry.role if entry else None, "thread": entry.thread if entry else None,
                "node": entry.node if entry else None, "element": entry.element if entry else None,
                "tree": entry.tree if entry else None, "path": entry.path if entry else None,
            })
        return out
