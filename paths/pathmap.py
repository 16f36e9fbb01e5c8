"""The pathmap: every part of a run, looked up by name, read from and written to YAML, and checked."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import ClassVar
from pathlib import Path as FilePath

from pastset.client import check_grace

from . import instrument, pathmap_yaml, rules
from .document import Document, Origin, PathmapError, Problem, read_text
from .instrument import CollectorPoint
from .registry import JOIN_TYPES
from .sections import (NAME, NAMED, NAMES, SECTION, Clock, ElementSpec, Instrument, Liveness, Node, Path,
                       SecuritySpec, Stage, Thread, Tree, TreePoints, key)


@dataclass(frozen=True, repr=False)
class Pathmap:
    """Everything a run needs: nodes, threads, elements, stages, paths, trees, instrumentation.

    Build one with `Pathmap.load(file)` / `Pathmap.loads(text)` (validated: a PathmapError lists
    every problem), with `paths.generate`, or in code (then `validate()` it). Lookups by name
    raise KeyError for a name the pathmap does not have. Equality ignores where it was read from.
    """

    # Its YAML form, key by key in this order (the file's name names a pathmap without `name`):
    # see paths.sections for what a KeySpec says.
    EXAMPLE: ClassVar[str] = "nodes: {A: {host: 127.0.0.1}}"
    FLOW: ClassVar[bool] = False

    name: str = key(NAME, kw_only=True)
    allow_modules: tuple[str, ...] = key(NAMES, (), kw_only=True)
    clock: Clock = key(SECTION, Clock(), always=True, section=Clock, kw_only=True)
    security: SecuritySpec = key(SECTION, SecuritySpec(), section=SecuritySpec, kw_only=True, doc=(
        "CURVE: node servers accept only clients whose keys are in this directory; traffic is encrypted; "
        "join_endpoints: other addresses scope joins may reach the run's nodes at"))
    liveness: Liveness = key(SECTION, Liveness(), section=Liveness, kw_only=True, doc=(
        "seconds a node that keeps its connection but does not answer (paused, swapping) is waited for"))
    nodes: tuple[Node, ...] = key(NAMED, section=Node, example="{A: {host: 127.0.0.1}}", kw_only=True,
                                  doc="node servers: one process each (port 0: a free one)")
    threads: tuple[Thread, ...] = key(NAMED, (), always=True, section=Thread, example="{T0: {node: A}}", kw_only=True,
                                      doc="application threads and the node whose process runs each")
    elements: tuple[ElementSpec, ...] = key(
        NAMED, (), always=True, section=ElementSpec, example="{row: {node: A, template: [int]}}", kw_only=True,
        doc="tuple elements: node, template, keep (discard threshold) or delta (flow control)")
    stages: tuple[Stage, ...] = key(
        NAMED, (), always=True, section=Stage, example="{s1: {type: remote, node: A}}", kw_only=True,
        doc="stage instances: wrapper type, node, parameters; a stage id shared by paths is one instance")
    paths: tuple[Path, ...] = key(
        NAMED, (), always=True, section=Path, example="{p: {thread: T0, element: e, stages: [s1]}}", kw_only=True,
        doc="from a thread to an element, stage by stage (a remote stage where the path changes node)")
    trees: tuple[Tree, ...] = key(
        NAMED, (), always=True, section=Tree, example="{count: {kind: allreduce, root: r, members: {T0: r}}}",
        kw_only=True, doc="collectives: members enter at a stage, edges lead each stage to its parent, up to the root")
    instrument: Instrument = key(SECTION, Instrument(), always=True, section=Instrument, kw_only=True,
                                 doc="which points carry event collectors, and their trace elements")
    origin: Origin = field(default=Origin(), compare=False, kw_only=True)

    def __repr__(self) -> str:
        return (f"<Pathmap {self.name}: {len(self.nodes)} nodes, {len(self.threads)} threads, "
                f"{len(self.elements)} elements, {len(self.paths)} paths, {len(self.trees)} trees>")

    @property
    def source(self) -> str:
        """The file it was read from, `<string>`, or `<generated>`."""
        return self.origin.source

    # -- reading and writing -----------------------------------------------------------------

    @classmethod
    def load(cls, file: str | os.PathLike) -> Pathmap:
        """Read and validate a pathmap file; raises PathmapError (every problem) or OSError."""
        return cls.loads(read_text(file), source=os.fspath(file))

    @classmethod
    def loads(cls, text: str, source: str = "<string>") -> Pathmap:
        """Read and validate a pathmap from YAML text; `source` names it in problems."""
        doc = Document(text, source)
        pathmap = None if doc.root is None and doc.problems else pathmap_yaml.read(doc, cls)
        problems = list(doc.problems)
        if pathmap is not None:
            # A rule about a key the reader already found wrong would only repeat it.
            told = {p.key for p in doc.problems}
            for problem in pathmap.check():
                if not any(problem.key == k or problem.key.startswith(k + ".")
                           or problem.key.startswith(k + "[") for k in told):
                    problems.append(problem)
        if problems:
            raise PathmapError(problems)
        return pathmap

    def dumps(self, header: str | None = None) -> str:
        """YAML that `loads` reads back to an equal Pathmap; `header` becomes leading comments."""
        return pathmap_yaml.write(self, header)

    def dump(self, file: str | os.PathLike, header: str | None = None) -> None:
        FilePath(file).write_text(self.dumps(header), encoding="utf-8")

    def check(self) -> tuple[Problem, ...]:
        """Every rule the pathmap breaks, located by key path (and line, if read from YAML)."""
        return tuple(self.origin.problem(key, what) for key, what in rules.check(self))

    def validate(self) -> Pathmap:
        """Self, if it breaks no rule; raises PathmapError otherwise."""
        problems = self.check()
        if problems:
            raise PathmapError(problems)
        return self

    def with_grace(self, grace: float | None) -> Pathmap:
        """A copy whose `liveness.grace` is `grace` seconds (a command line's --grace); self for
        None. pastset.BadArgument (a ValueError) if it is not a positive number."""
        if grace is None:
            return self
        return replace(self, liveness=Liveness(check_grace(grace)))

    # -- lookups -----------------------------------------------------------------------------

    @cached_property
    def index(self) -> Index:
        """The pathmap's lookup tables (built once)."""
        return Index(self)

    def node(self, name: str) -> Node:
        return _lookup(self.index.nodes, "node", name, self)

    def thread(self, name: str) -> Thread:
        return _lookup(self.index.threads, "thread", name, self)

    def element(self, name: str) -> ElementSpec:
        return _lookup(self.index.elements, "element", name, self)

    def stage(self, stage_id: str) -> Stage:
        return _lookup(self.index.stages, "stage", stage_id, self)

    def path(self, name: str) -> Path:
        return _lookup(self.index.paths, "path", name, self)

    def tree(self, name: str) -> Tree:
        return _lookup(self.index.trees, "tree", name, self)

    @property
    def clusters(self) -> tuple[str, ...]:
        """Cluster names, in the order their first node appears."""
        return tuple(dict.fromkeys(n.cluster for n in self.nodes))

    def nodes_in(self, cluster: str) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.cluster == cluster)

    def threads_on(self, node: str) -> tuple[Thread, ...]:
        return tuple(t for t in self.threads if t.node == node)

    def elements_on(self, node: str) -> tuple[ElementSpec, ...]:
        return tuple(e for e in self.elements if e.node == node)

    def stages_on(self, node: str) -> tuple[Stage, ...]:
        return tuple(s for s in self.stages if s.node == node)

    def paths_of(self, thread: str) -> tuple[Path, ...]:
        return self.index.paths_of.get(thread, ())

    def path_to(self, thread: str, element: str) -> Path:
        """The path by which `thread` reaches `element` (a thread has at most one per element)."""
        return _lookup(self.index.routes, "path", (thread, element), self)

    def paths_through(self, stage_id: str) -> tuple[Path, ...]:
        """The paths that share the stage instance `stage_id`."""
        return self.index.paths_through.get(stage_id, ())

    def next_stage(self, stage_id: str) -> str | None:
        """The stage `stage_id` forwards to (on a path or up a tree); None at an end."""
        return self.index.next.get(stage_id)

    @property
    def collectors(self) -> tuple[Stage, ...]:
        """The stages written into the pathmap as event collectors (type `collector`)."""
        return tuple(s for s in self.stages if s.type == "collector")

    def tree_points(self, tree: str) -> TreePoints:
        t = self.tree(tree)
        stages = self.index.stages
        joins = tuple(s for s in t.stage_ids if s in stages and stages[s].type in JOIN_TYPES)
        return TreePoints(contribute=tuple(t.members.items()), arrival=joins,
                          departure=tuple(s for s in joins if s != t.root))

    def fan_in(self, tree: str, stage_id: str) -> int:
        """Contributions `stage_id` receives per round of `tree`: one per member entering there,
        one per join below it, and what any other stage below it (a remote) passes on."""
        t = self.tree(tree)
        stages = self.index.stages
        count, seen, todo = 0, set(), [stage_id]
        while todo:  # iterative, and guarded, so that a broken tree cannot loop
            stage = todo.pop()
            if stage in seen:
                continue
            seen.add(stage)
            count += len(t.entrants(stage))
            for child in t.children(stage):
                if child in stages and stages[child].type in JOIN_TYPES:
                    count += 1
                else:
                    todo.append(child)
        return count

    def collector_points(self) -> tuple[CollectorPoint, ...]:
        """Every event collector of a run, each with its id (see `paths.instrument.collector_points`)."""
        return self._collector_points

    @cached_property
    def _collector_points(self) -> tuple[CollectorPoint, ...]:
        # Found once: a node, its catalogue and its collectors each ask (0.3 s apiece at 19,601 points).
        return instrument.collector_points(self)

    def summary(self) -> dict[str, int]:
        """How many of each thing the pathmap holds, by plural name."""
        return {
            "nodes": len(self.nodes), "clusters": len(self.clusters),
            "threads": len(self.threads), "elements": len(self.elements),
            "stages": len(self.stages), "paths": len(self.paths), "trees": len(self.trees),
            "collectors": len(self.collector_points()),
        }


class Index:
    """Lookup tables of one Pathmap, by name (the first of duplicate names wins; validation
    reports them): `nodes`, `threads`, `elements`, `stages` (by id), `paths`, `trees`; `routes`
    by (thread, element); `paths_of` a thread and `paths_through` a stage; `next`, the stage
    each stage forwards to on a path or up a tree. Read them; never change them."""

    def __init__(self, pm: Pathmap):
        self.nodes = _first(pm.nodes, "name")
        self.threads = _first(pm.threads, "name")
        self.elements = _first(pm.elements, "name")
        self.stages = _first(pm.stages, "id")
        self.paths = _first(pm.paths, "name")
        self.trees = _first(pm.trees, "name")
        paths_of: dict[str, list[Path]] = {}
        through: dict[str, list[Path]] = {}
        self.routes: dict[tuple[str, str], Path] = {}
        self.next: dict[str, str] = {}
        for path in pm.paths:
            paths_of.setdefault(path.thread, []).append(path)
            self.routes.setdefault((path.thread, path.element), path)
            for sid in dict.fromkeys(path.stages):
                through.setdefault(sid, []).append(path)
            for a, b in zip(path.stages, path.stages[1:]):
                self.next.setdefault(a, b)
        for tree in pm.trees:
            for child, parent in tree.edges.items():
                self.next.setdefault(child, parent)
        self.paths_of = {k: tuple(v) for k, v in paths_of.items()}
        self.paths_through = {k: tuple(v) for k, v in through.items()}


def _first(items, attr: str) -> dict:
    out = {}
    for item in items:
        out.setdefault(getattr(item, attr), item)
    return out


def _lookup(table: dict, what: str, name, pathmap: Pathmap):
    try:
        return table[name]
    except KeyError:
        raise KeyError(f"pathmap {pathmap.name} has no {what} {name!r}") from None
