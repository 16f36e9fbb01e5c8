"""Instrumentation: which points of a pathmap carry event collectors, and where their traces go."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .pathmap import Pathmap

# Where on a path a collector sits: `source` in front of the path's first stage, one per path
# (it times the whole operation as the thread sees it); `sink` in front of the path's element
# stage, one per element stage (it sees every operation the element receives).
PATH_ROLES = ("source", "sink")
# Where on a tree: `contribute` between each member and the stage it enters the tree by (one
# per member); `arrival` in front of each join (a contribution arrives); `departure` right after
# each join below the root (the combined operation leaves for the parent).
TREE_ROLES = ("contribute", "arrival", "departure")
ROLES = PATH_ROLES + TREE_ROLES


@dataclass(frozen=True)
class Selector:
    """One rule of the instrument section: which collector points it picks.

    `at` names roles; path roles pick from the paths, tree roles from the trees. Each non-empty
    name list narrows the choice (an item matches if it is in the list): `paths`, `threads`
    (the path's thread, or the contributing member: a rule naming threads picks no arrival or
    departure points), `elements`, `trees`, and `nodes` (the node the point's stage runs on).
    `stages` instead names stage ids outright (role `stage`: a collector in front of that
    stage) and stands alone. `at` defaults to `source` for a rule without trees and to every
    tree role for a rule with them.
    """

    at: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    threads: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    elements: tuple[str, ...] = ()
    trees: tuple[str, ...] = ()
    stages: tuple[str, ...] = ()

    @property
    def roles(self) -> tuple[str, ...]:
        if self.stages:
            return ("stage",)
        if self.at:
            return self.at
        return TREE_ROLES if self.trees else ("source",)


@dataclass(frozen=True)
class Instrument:
    """The instrument section. `keep` is each trace element's discard threshold (tuples);
    `location` is where trace elements live: `local` (the collector's own node) or a node name."""

    keep: int = 200
    location: str = "local"
    collectors: tuple[Selector, ...] = ()


@dataclass(frozen=True)
class CollectorPoint:
    """A place for one event collector: in front of `stage` (or, for `departure`, right after
    it), with what it belongs to. `path` is set for `source`, `tree` for tree roles, `thread`
    for `source` and `contribute`."""

    role: str
    stage: str
    node: str
    path: str | None = None
    tree: str | None = None
    thread: str | None = None


def select(pathmap: Pathmap, selector: Selector) -> tuple[CollectorPoint, ...]:
    """The collector points `selector` picks in `pathmap`, in pathmap order, without repeats.

    Names the pathmap does not know select nothing (validation reports them).
    """
    points: list[CollectorPoint] = []
    roles = selector.roles
    stages = pathmap._index.stages
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


def preset(pathmap: Pathmap, what: str = "all", threads: tuple[str, ...] = (), keep: int = 200,
           location: str = "local") -> Instrument:
    """An instrument section for users who would rather not write one.

    `what`: `all` (a source collector on every path and every point of every tree), `paths`
    (source collectors only), `trees` (tree points only), `sinks` (one collector in front of
    every element), `none`. `threads` narrows it to those threads' paths and contributions.
    """
    tree_names = tuple(t.name for t in pathmap.trees)
    rules: list[Selector] = []
    # `all` over a pathmap without paths (a collectives-only app) is its trees' points alone.
    if what == "paths" or (what == "all" and pathmap.paths):
        rules.append(Selector(at=("source",), threads=threads))
    if what in ("all", "trees") and tree_names:
        rules.append(Selector(trees=tree_names, threads=threads,
                              at=("contribute",) if threads else ()))
    if what == "sinks":
        rules.append(Selector(at=("sink",), threads=threads))
    if what not in ("all", "paths", "trees", "sinks", "none"):
        raise ValueError(f"unknown instrumentation {what!r}; use all, paths, trees, sinks or none")
    return Instrument(keep=keep, location=location, collectors=tuple(rules))
