"""Instrumentation: which points of a pathmap carry event collectors, and the id of each."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .sections import DEFAULT_KEEP, Instrument, Selector

# Where on a path a collector sits: `source` in front of the path's first stage, one per path
# (it times the whole operation as the thread sees it); `sink` in front of the path's element
# stage, one per element stage (it sees every operation the element receives).
PATH_ROLES = ("source", "sink")
# Where on a tree: `contribute` between each member and the stage it enters the tree by (one
# per member); `arrival` in front of each join (a contribution arrives); `departure` right after
# each join below the root (the combined operation leaves for the parent).
TREE_ROLES = ("contribute", "arrival", "departure")
ROLES = PATH_ROLES + TREE_ROLES


def roles_of(selector: Selector) -> tuple[str, ...]:
    """The roles a rule picks: `stage` for a rule naming stages; else its `at`, by default
    `source` for a rule without trees and every tree role for a rule with them."""
    if selector.stages:
        return ("stage",)
    if selector.at:
        return selector.at
    return TREE_ROLES if selector.trees else ("source",)


@dataclass(frozen=True)
class CollectorPoint:
    """A place for one event collector: in front of `stage` (or, for `departure`, right after
    it), with what it belongs to. `path` is set for `source`, `tree` for tree roles, `thread`
    for `source` and `contribute`.

    `id` is the collector's id in the run, from 1, given once by `collector_points` and carried
    from there (into each trace tuple's `collector` field, the catalogue, the trace element's
    name); 0 for a point `select` found and nobody has numbered yet.
    """

    role: str
    stage: str
    node: str
    path: str | None = None
    tree: str | None = None
    thread: str | None = None
    id: int = 0


def collector_points(pathmap) -> tuple[CollectorPoint, ...]:
    """Every event collector of a run on `pathmap` (a paths.Pathmap), numbered: the points the
    instrument section selects, in the order of its rules and without repeats, then the stages
    written into paths as collectors (role `stage`). Ids run from 1 in that order (0 means none)."""
    selected = dict.fromkeys(p for selector in pathmap.instrument.collectors for p in select(pathmap, selector))
    written = [CollectorPoint("stage", s.id, s.node) for s in pathmap.collectors]
    return tuple(replace(p, id=cid) for cid, p in enumerate([*selected, *written], 1))


def select(pathmap, selector: Selector) -> tuple[CollectorPoint, ...]:
    """The collector points `selector` picks in `pathmap` (a paths.Pathmap), in pathmap order,
    without repeats, not numbered (see `collector_points`).

    Names the pathmap does not know select nothing (validation reports them).
    """
    points: list[CollectorPoint] = []
    roles = roles_of(selector)
    stages = pathmap.index.stages
    if "stage" in roles:
        for sid in selector.stages:
            if sid in stages:
                points.append(CollectorPoint("stage", sid, stages[sid].node))
        return _unique(points)

    def wanted(names, name):
        return not names or name in names

    def at_node(sid):
        return stages[sid].node if sid in stages else ""

    if any(r in PATH_ROLES for r in roles) and not selector.trees:
        for path in pathmap.paths:
            if not (wanted(selector.paths, path.name) and wanted(selector.threads, path.thread)
                    and wanted(selector.elements, path.element)) or not path.stages:
                continue
            if "source" in roles and wanted(selector.nodes, at_node(path.stages[0])):
                points.append(CollectorPoint("source", path.stages[0], at_node(path.stages[0]),
                                             path=path.name, thread=path.thread))
            if "sink" in roles and wanted(selector.nodes, at_node(path.stages[-1])):
                points.append(CollectorPoint("sink", path.stages[-1], at_node(path.stages[-1])))
    if any(r in TREE_ROLES for r in roles) and not (selector.paths or selector.elements):
        for tree in pathmap.trees:
            if not wanted(selector.trees, tree.name):
                continue
            tree_points = pathmap.tree_points(tree.name)
            if "contribute" in roles:
                for member, sid in tree_points.contribute:
                    if wanted(selector.threads, member) and wanted(selector.nodes, at_node(sid)):
                        points.append(CollectorPoint("contribute", sid, at_node(sid),
                                                     tree=tree.name, thread=member))
            if selector.threads:
                continue  # arrival and departure belong to no one thread
            for role in ("arrival", "departure"):
                if role in roles:
                    for sid in getattr(tree_points, role):
                        if wanted(selector.nodes, at_node(sid)):
                            points.append(CollectorPoint(role, sid, at_node(sid), tree=tree.name))
    return _unique(points)


def _unique(points: list[CollectorPoint]) -> tuple[CollectorPoint, ...]:
    return tuple(dict.fromkeys(points))


PRESETS = ("all", "paths", "trees", "sinks", "ends", "none")


def preset(pathmap, what: str = "all", threads: tuple[str, ...] = (), keep: int = DEFAULT_KEEP,
           location: str = "local") -> Instrument:
    """An instrument section for users who would rather not write one, over `pathmap` (a paths.Pathmap).

    `what`: `all` (a source collector on every path and every point of every tree), `paths`
    (source collectors only), `trees` (tree points only), `sinks` (one collector in front of
    every element), `ends` (`all`, and a collector in front of every element too: what the thread
    saw and what the element received, for every operation), `none`. `threads` narrows it to
    those threads' paths and contributions.
    """
    tree_names = tuple(t.name for t in pathmap.trees)
    rules: list[Selector] = []
    # `all` over a pathmap without paths (a collectives-only app) is its trees' points alone.
    if what == "paths" or (what in ("all", "ends") and pathmap.paths):
        rules.append(Selector(at=("source",), threads=threads))
    if what in ("all", "ends", "trees") and tree_names:
        rules.append(Selector(trees=tree_names, threads=threads,
                              at=("contribute",) if threads else ()))
    if what in ("sinks", "ends"):
        rules.append(Selector(at=("sink",), threads=threads))
    if what not in PRESETS:
        raise ValueError(f"unknown instrumentation {what!r}; use {', '.join(PRESETS[:-1])} or {PRESETS[-1]}")
    return Instrument(keep=keep, location=location, collectors=tuple(rules))
