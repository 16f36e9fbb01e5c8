"""The pathmap: nodes, threads, elements, stages, paths, trees and instrumentation, read from YAML."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path as FilePath

import networkx as nx
import pastset
import yaml
from pastset.client import GRACE, check_grace
from pastset.security import default as default_security

from . import rules
from .document import Document, Origin, PathmapError, Problem, read_text
from .instrument import CollectorPoint, Instrument, Selector, select
from .registry import JOIN_TYPES

# The format is described, with a commented example, in pathmaps/example-toy.yaml.


@dataclass(frozen=True)
class Node:
    """A node server process: where it listens (port 0: a free one, picked at start) and the
    cluster it belongs to. `clock_offset_ns` shifts its clock, to test clock synchronisation."""

    name: str
    host: str = "127.0.0.1"
    port: int = 0
    cluster: str = "default"
    clock_offset_ns: int = 0


@dataclass(frozen=True)
class Thread:
    """An application thread, run inside the process of `node`."""

    name: str
    node: str


@dataclass(frozen=True)
class ElementSpec:
    """A tuple element on `node`. `template` is a tuple of field types (int, float, str, bytes,
    bool, any) or a binary struct format starting with '='. `keep` (discard all but the newest
    n) and `delta` (moves block while n tuples are held) are tuple counts, at most one set."""

    name: str
    node: str
    template: tuple[str, ...] | str
    keep: int | None = None
    delta: int | None = None


@dataclass(frozen=True)
class Stage:
    """One stage instance: a wrapper of `type` running on `node`. `params` hold plain values
    (numbers, text, booleans, lists of them). A stage id used by several paths is one instance."""

    id: str
    type: str
    node: str
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Path:
    """The route from a thread to an element: stage ids, first on the thread's node, last the
    element's `element` stage; where consecutive stages change node, the first is `remote`."""

    name: str
    thread: str
    element: str
    stages: tuple[str, ...]


@dataclass(frozen=True)
class Tree:
    """A collective over member threads, its stages joined child -> parent up to `root`.

    `members` maps each member thread (in order) to the stage it enters the tree by, on the
    member's own node; `edges` maps each stage below the root to its parent. An edge between
    two nodes starts at a `remote` stage. `shape` records how it was laid out (`flat`,
    `kary:K`, `knomial:K`, `per-node`, `per-cluster`, or `custom` for a hand-made tree).
    """

    name: str
    kind: str
    root: str
    members: dict[str, str]
    edges: dict[str, str]
    shape: str = "custom"

    @cached_property
    def stage_ids(self) -> tuple[str, ...]:
        """Every stage of the tree: the root, then the edges' ends, then the entry stages."""
        ends = [s for edge in self.edges.items() for s in edge]
        return tuple(dict.fromkeys([self.root, *ends, *self.members.values()]))

    def parent(self, stage: str) -> str | None:
        return self.edges.get(stage)

    def children(self, stage: str) -> tuple[str, ...]:
        """The stages whose edges lead into `stage`."""
        return self._below[0].get(stage, ())

    def entrants(self, stage: str) -> tuple[str, ...]:
        """The members that enter the tree at `stage`."""
        return self._below[1].get(stage, ())

    @cached_property
    def _below(self) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
        children: dict[str, list[str]] = {}
        for child, parent in self.edges.items():
            children.setdefault(parent, []).append(child)
        entrants: dict[str, list[str]] = {}
        for member, stage in self.members.items():
            entrants.setdefault(stage, []).append(member)
        return ({k: tuple(v) for k, v in children.items()},
                {k: tuple(v) for k, v in entrants.items()})

    def route(self, member: str) -> tuple[str, ...]:
        """The stages a member's contribution climbs, entry stage first, root last (a broken
        tree's route stops where it leaves the tree or would repeat a stage)."""
        stage = self.members[member]
        seen: list[str] = []
        while stage is not None and stage not in seen:
            seen.append(stage)
            stage = self.edges.get(stage)
        return tuple(seen)

    def graph(self) -> nx.DiGraph:
        """The stages as a networkx DiGraph with an edge from each child to its parent."""
        graph = nx.DiGraph()
        graph.add_nodes_from(self.stage_ids)
        graph.add_edges_from(self.edges.items())
        return graph


@dataclass(frozen=True)
class TreePoints:
    """A tree's collector points (see paths.instrument): `contribute` as (member, entry stage)
    pairs, `arrival` the joins, `departure` the joins below the root."""

    contribute: tuple[tuple[str, str], ...]
    arrival: tuple[str, ...]
    departure: tuple[str, ...]


@dataclass(frozen=True)
class Clock:
    """Clock synchronisation: `samples` NTP-style exchanges per node (the one with the least
    delay counts), a second round for `drift`, offsets relative to `reference` (default: the
    first node)."""

    samples: int = 8
    drift: bool = False
    reference: str | None = None


@dataclass(frozen=True)
class Liveness:
    """How long, in seconds, a node whose connection is open but who does not answer (paused,
    swapping, a busy host) is waited for, by the launcher, the other nodes and monitors, before
    the run gives up on it. A node whose process ended or whose connection closed is gone at
    once, whatever the grace."""

    grace: float = GRACE


@dataclass(frozen=True)
class SecuritySpec:
    """CURVE for the run: `keys` is a key directory (`eventspace keys generate DIR`) that every
    node serves and connects with; None: the process's keys ($EVENTSPACE_KEYS), or plaintext.
    A relative `keys` in a pathmap file is read relative to the file's folder."""

    keys: str | None = None

    def load(self) -> pastset.Security:
        """The keys to serve and connect with: the directory's, else the process's
        (`pastset.security.default`). AuthError if they are not usable."""
        return pastset.Security.load(self.keys) if self.keys is not None else default_security()


@dataclass(frozen=True, repr=False)
class Pathmap:
    """Everything a run needs: nodes, threads, elements, stages, paths, trees, instrumentation.

    Build one with `Pathmap.load(file)` / `Pathmap.loads(text)` (validated: a PathmapError lists
    every problem), with `paths.generate`, or in code (then `validate()` it). Lookups by name
    raise KeyError for a name the pathmap does not have. Equality ignores where it was read from.
    """

    name: str
    nodes: tuple[Node, ...]
    threads: tuple[Thread, ...] = ()
    elements: tuple[ElementSpec, ...] = ()
    stages: tuple[Stage, ...] = ()
    paths: tuple[Path, ...] = ()
    trees: tuple[Tree, ...] = ()
    instrument: Instrument = Instrument()
    allow_modules: tuple[str, ...] = ()
    clock: Clock = Clock()
    security: SecuritySpec = SecuritySpec()
    liveness: Liveness = Liveness()
    origin: Origin = field(default=Origin(), compare=False)

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
        pathmap = None if doc.root is None and doc.problems else _read(doc, _default_name(source))
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
        return _write(self, header)

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
    def _index(self) -> _Index:
        return _Index(self)

    def node(self, name: str) -> Node:
        return _lookup(self._index.nodes, "node", name, self)

    def thread(self, name: str) -> Thread:
        return _lookup(self._index.threads, "thread", name, self)

    def element(self, name: str) -> ElementSpec:
        return _lookup(self._index.elements, "element", name, self)

    def stage(self, stage_id: str) -> Stage:
        return _lookup(self._index.stages, "stage", stage_id, self)

    def path(self, name: str) -> Path:
        return _lookup(self._index.paths, "path", name, self)

    def tree(self, name: str) -> Tree:
        return _lookup(self._index.trees, "tree", name, self)

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
        return self._index.paths_of.get(thread, ())

    def path_to(self, thread: str, element: str) -> Path:
        """The path by which `thread` reaches `element` (a thread has at most one per element)."""
        return _lookup(self._index.routes, "path", (thread, element), self)

    def paths_through(self, stage_id: str) -> tuple[Path, ...]:
        """The paths that share the stage instance `stage_id`."""
        return self._index.paths_through.get(stage_id, ())

    def next_stage(self, stage_id: str) -> str | None:
        """The stage `stage_id` forwards to (on a path or up a tree); None at an end."""
        return self._index.next.get(stage_id)

    @property
    def collectors(self) -> tuple[Stage, ...]:
        """The stages written into the pathmap as event collectors (type `collector`)."""
        return tuple(s for s in self.stages if s.type == "collector")

    def tree_points(self, tree: str) -> TreePoints:
        t = self.tree(tree)
        joins = tuple(s for s in t.stage_ids
                      if s in self._index.stages and self._index.stages[s].type in JOIN_TYPES)
        return TreePoints(contribute=tuple(t.members.items()), arrival=joins,
                          departure=tuple(s for s in joins if s != t.root))

    def fan_in(self, tree: str, stage_id: str) -> int:
        """Contributions `stage_id` receives per round of `tree`: one per member entering there,
        one per join below it, and what any other stage below it (a remote) passes on."""
        t = self.tree(tree)
        stages = self._index.stages
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
        """Every point the instrument section selects, in the order of its rules, no repeats."""
        points = [p for selector in self.instrument.collectors for p in select(self, selector)]
        return tuple(dict.fromkeys(points))

    def summary(self) -> dict[str, int]:
        """How many of each thing the pathmap holds, by plural name."""
        return {
            "nodes": len(self.nodes), "clusters": len(self.clusters),
            "threads": len(self.threads), "elements": len(self.elements),
            "stages": len(self.stages), "paths": len(self.paths), "trees": len(self.trees),
            "collectors": len(self.collector_points()) + len(self.collectors),
        }


class _Index:
    """Lookup tables of one Pathmap (the first of duplicate names wins; validation reports them)."""

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


def _default_name(source: str) -> str:
    stem = FilePath(source).stem
    return stem if stem and not source.startswith("<") else "pathmap"


# -- reading -------------------------------------------------------------------------------------

_TOP_KEYS = ("name", "allow_modules", "clock", "security", "liveness", "nodes", "threads", "elements", "stages",
             "paths", "trees", "instrument")


def _read(doc: Document, default_name: str) -> Pathmap:
    top = doc.fields(doc.root, (), _TOP_KEYS, required={"nodes": "nodes: {A: {host: 127.0.0.1}}"},
                     example="nodes: {A: {host: 127.0.0.1}}")
    if doc.root is None:
        doc.fail(("nodes",), None, "the pathmap is empty; it needs at least `nodes: {A: {host: 127.0.0.1}}`")
    return Pathmap(
        name=top.name("name", default_name) or default_name,
        allow_modules=top.names("allow_modules"),
        clock=_read_clock(doc, top.node("clock")),
        security=_read_security(doc, top.node("security")),
        liveness=_read_liveness(doc, top.node("liveness")),
        nodes=tuple(_read_node(doc, name, node) for name, node in
                    doc.named(top.node("nodes"), ("nodes",), "{A: {host: 127.0.0.1}}")),
        threads=tuple(_read_thread(doc, name, node) for name, node in
                      doc.named(top.node("threads"), ("threads",), "{T0: {node: A}}")),
        elements=tuple(_read_element(doc, name, node) for name, node in
                       doc.named(top.node("elements"), ("elements",), "{row: {node: A, template: [int]}}")),
        stages=tuple(_read_stage(doc, name, node) for name, node in
                     doc.named(top.node("stages"), ("stages",), "{s1: {type: remote, node: A}}")),
        paths=tuple(_read_path(doc, name, node) for name, node in
                    doc.named(top.node("paths"), ("paths",), "{p: {thread: T0, element: e, stages: [s1]}}")),
        trees=tuple(_read_tree(doc, name, node) for name, node in
                    doc.named(top.node("trees"), ("trees",), "{count: {kind: allreduce, root: r, members: {T0: r}}}")),
        instrument=_read_instrument(doc, top.node("instrument")),
        origin=doc.origin,
    )


def _read_node(doc: Document, name: str, node) -> Node:
    f = doc.fields(node, ("nodes", name), ("host", "port", "cluster", "clock_offset_ns"),
                   example="{host: 127.0.0.1, port: 0, cluster: c1}")
    return Node(name, host=f.text("host", "127.0.0.1"), port=f.integer("port", 0),
                cluster=f.name("cluster", "default") or "default",
                clock_offset_ns=f.integer("clock_offset_ns", 0))


def _read_thread(doc: Document, name: str, node) -> Thread:
    f = doc.fields(node, ("threads", name), ("node",), required={"node": "node: A"},
                   example="{node: A}")
    return Thread(name, f.name("node"))


def _read_element(doc: Document, name: str, node) -> ElementSpec:
    key = ("elements", name)
    f = doc.fields(node, key, ("node", "template", "keep", "delta"),
                   required={"node": "node: A", "template": "template: [int, bytes]"},
                   example="{node: A, template: [int, bytes], delta: 2}")
    template: tuple[str, ...] | str = ()
    spec = f.node("template")
    if spec is not None:
        if isinstance(spec, yaml.SequenceNode):
            template = f.names("template")
        else:
            template = f.text("template", "")
    return ElementSpec(name, f.name("node"), template, keep=f.integer("keep", None),
                       delta=f.integer("delta", None))


def _read_stage(doc: Document, sid: str, node) -> Stage:
    f = doc.fields(node, ("stages", sid), ("type", "node", "params"),
                   required={"type": "type: remote", "node": "node: A"},
                   example="{type: buffer, node: A, params: {size: 16}}")
    return Stage(sid, f.name("type"), f.name("node"), f.params("params"))


def _read_path(doc: Document, name: str, node) -> Path:
    f = doc.fields(node, ("paths", name), ("thread", "element", "stages"),
                   required={"thread": "thread: T0", "element": "element: row",
                             "stages": "stages: [row/element]"},
                   example="{thread: T0, element: row, stages: [row/element]}")
    return Path(name, f.name("thread"), f.name("element"), f.names("stages"))


def _read_tree(doc: Document, name: str, node) -> Tree:
    key = ("trees", name)
    f = doc.fields(node, key, ("kind", "shape", "root", "members", "edges"),
                   required={"kind": "kind: allreduce", "root": "root: count/root",
                             "members": "members: {T0: count/root}"},
                   example="{kind: allreduce, root: count/root, members: {T0: count/root}}")
    members = {m: doc.name(v, key + ("members", m)) for m, v in
               doc.named(f.node("members"), key + ("members",), "{T0: count/root}")}
    edges = {c: doc.name(v, key + ("edges", c)) for c, v in
             doc.named(f.node("edges"), key + ("edges",), "{count/A: count/root}")}
    return Tree(name, f.name("kind"), f.name("root"), members, edges, f.text("shape", "custom"))


_SELECTOR_KEYS = ("at", "paths", "threads", "nodes", "elements", "trees", "stages")


def _read_instrument(doc: Document, node) -> Instrument:
    key = ("instrument",)
    f = doc.fields(node, key, ("keep", "location", "collectors"),
                   example="{keep: 200, location: local, collectors: [{at: [source]}]}")
    selectors = []
    for item_key, item in doc.items(f.node("collectors"), key + ("collectors",), "[{at: [source]}]"):
        s = doc.fields(item, item_key, _SELECTOR_KEYS, example="{threads: [T0], at: [source]}")
        selectors.append(Selector(**{k: s.names(k) for k in _SELECTOR_KEYS}))
    return Instrument(keep=f.integer("keep", 200), location=f.name("location", "local") or "local",
                      collectors=tuple(selectors))


def _read_clock(doc: Document, node) -> Clock:
    f = doc.fields(node, ("clock",), ("samples", "drift", "reference"),
                   example="{samples: 8, drift: false}")
    return Clock(samples=f.integer("samples", 8), drift=f.boolean("drift", False),
                 reference=f.name("reference", None) or None)


def _read_liveness(doc: Document, node) -> Liveness:
    f = doc.fields(node, ("liveness",), ("grace",), example="{grace: 30}")
    value = f.node("grace")
    if value is None:
        return Liveness()
    key = ("liveness", "grace")
    grace = doc.scalar(value, key)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)):
        if grace is not None:
            doc.fail(key, value, f"expected a number of seconds, got {value.value!r}; write e.g. grace: 30")
        return Liveness()
    return Liveness(grace)


def _read_security(doc: Document, node) -> SecuritySpec:
    if node is None:
        return SecuritySpec()
    f = doc.fields(node, ("security",), ("keys",), required={"keys": "keys: path/to/keydir"},
                   example="{keys: path/to/keydir}")
    keys = f.text("keys", "") if "keys" in f else ""
    if not keys:
        return SecuritySpec("" if "keys" in f else None)
    keys = os.path.expanduser(keys)
    if not os.path.isabs(keys) and not doc.source.startswith("<"):
        # Relative to the pathmap's folder, and absolute from here on: a launcher's snapshot of
        # the pathmap, read from elsewhere, must name the same directory.
        keys = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(doc.source)), keys))
    return SecuritySpec(keys)


# -- writing -------------------------------------------------------------------------------------

class _Flow(dict):
    """A mapping written on one line: `{type: remote, node: A}`."""


class _FlowList(list):
    """A list written on one line: `[int, bytes]`."""


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
    pass


_Dumper.add_representer(_Flow, lambda d, data: d.represent_mapping(
    "tag:yaml.org,2002:map", data, flow_style=True))
_Dumper.add_representer(_FlowList, lambda d, data: d.represent_sequence(
    "tag:yaml.org,2002:seq", data, flow_style=True))

_SECTION_COMMENTS = {
    "security": "CURVE: node servers accept only clients whose keys are in this directory; traffic is encrypted",
    "liveness": "seconds a node that keeps its connection but does not answer (paused, swapping) is waited for",
    "nodes": "node servers: one process each (port 0: a free one)",
    "threads": "application threads and the node whose process runs each",
    "elements": "tuple elements: node, template, keep (discard threshold) or delta (flow control)",
    "stages": "stage instances: wrapper type, node, parameters; a stage id shared by paths is one instance",
    "paths": "from a thread to an element, stage by stage (a remote stage where the path changes node)",
    "trees": "collectives: members enter at a stage, edges lead each stage to its parent, up to the root",
    "instrument": "which points carry event collectors, and their trace elements",
}


def _write(pm: Pathmap, header: str | None) -> str:
    data: dict = {"name": pm.name}
    if pm.allow_modules:
        data["allow_modules"] = _FlowList(pm.allow_modules)
    clock = _Flow(samples=pm.clock.samples, drift=pm.clock.drift)
    if pm.clock.reference is not None:
        clock["reference"] = pm.clock.reference
    data["clock"] = clock
    if pm.security.keys is not None:
        data["security"] = _Flow(keys=pm.security.keys)
    if pm.liveness != Liveness():
        data["liveness"] = _Flow(grace=pm.liveness.grace)
    nodes = {}
    for n in pm.nodes:
        entry = _Flow(host=n.host, port=n.port, cluster=n.cluster)
        if n.clock_offset_ns:
            entry["clock_offset_ns"] = n.clock_offset_ns
        nodes[n.name] = entry
    data["nodes"] = nodes
    data["threads"] = {t.name: _Flow(node=t.node) for t in pm.threads}
    elements = {}
    for e in pm.elements:
        entry = _Flow(node=e.node, template=e.template if isinstance(e.template, str)
                      else list(e.template))
        if e.keep is not None:
            entry["keep"] = e.keep
        if e.delta is not None:
            entry["delta"] = e.delta
        elements[e.name] = entry
    data["elements"] = elements
    stages = {}
    for s in pm.stages:
        entry = _Flow(type=s.type, node=s.node)
        if s.params:
            entry["params"] = dict(s.params)
        stages[s.id] = entry
    data["stages"] = stages
    data["paths"] = {p.name: _Flow(thread=p.thread, element=p.element, stages=list(p.stages))
                     for p in pm.paths}
    data["trees"] = {t.name: {"kind": t.kind, "shape": t.shape, "root": t.root,
                              "members": dict(t.members), "edges": dict(t.edges)}
                     for t in pm.trees}
    data["instrument"] = {
        "keep": pm.instrument.keep, "location": pm.instrument.location,
        "collectors": [_Flow((k, list(getattr(s, k))) for k in _SELECTOR_KEYS if getattr(s, k))
                       for s in pm.instrument.collectors],
    }
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=160)
    lines = [f"# {line}".rstrip() for line in header.splitlines()] if header else []
    for line in body.splitlines():
        section = line.split(":", 1)[0]
        if section in _SECTION_COMMENTS and not line.startswith(" "):
            lines += ["", f"# {_SECTION_COMMENTS[section]}"]
        lines.append(line)
    return "\n".join(lines) + "\n"
