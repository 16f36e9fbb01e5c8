"""The generators' three inputs: the cluster map, the application map, the application-to-cluster map."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import ClassVar

from yaml.nodes import ScalarNode, SequenceNode

from .document import Document, Origin, PathmapError, read_text, suggest
from .pathmap_yaml import read_section
from .registry import TREE_KINDS
from .rules.keys import key_problems
from .rules.values import template_problem
from .sections import INTEGER, NAME, NAMES, TEMPLATE, Node, bound_problems, key

# The formats are fixed (users and tests write their own): docs/pathmaps.md describes each, with an
# example (examples/ownprogram/app.yaml, cluster.yaml and mapping.yaml).

RULES = ("block", "round-robin")


def _parse(text: str, source: str, read):
    doc = Document(text, source)
    model = read(doc) if doc.root is not None or not doc.problems else None
    if doc.problems:
        raise PathmapError(doc.problems)
    return model


def _read_file(cls, file: str | os.PathLike):
    return cls.loads(read_text(file), source=os.fspath(file))


@dataclass(frozen=True)
class ClusterMap:
    """Clusters and their nodes: each a pathmap Node (name, host, port, cluster), in file order."""

    nodes: tuple[Node, ...]
    origin: Origin = field(default=Origin(), compare=False, repr=False)

    @property
    def clusters(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.cluster for n in self.nodes))

    @classmethod
    def load(cls, file: str | os.PathLike) -> ClusterMap:
        """Read a cluster map file; raises PathmapError listing every problem, or OSError."""
        return _read_file(cls, file)

    @classmethod
    def loads(cls, text: str, source: str = "<string>") -> ClusterMap:
        return _parse(text, source, _read_cluster_map)


def _read_cluster_map(doc: Document) -> ClusterMap:
    example = "clusters: {c1: {nodes: {A: {host: 127.0.0.1}}}}"
    top = doc.fields(doc.root, (), ("clusters",), required={"clusters": example}, example=example)
    nodes: list[Node] = []
    first: dict[str, tuple[str, int]] = {}
    for cluster, cnode in doc.named(top.node("clusters"), ("clusters",), "{c1: {nodes: {A: {host: 127.0.0.1}}}}"):
        ckey = ("clusters", cluster)
        c = doc.fields(cnode, ckey, ("nodes",), required={"nodes": "nodes: {A: {host: 127.0.0.1}}"},
                       example="{nodes: {A: {host: 127.0.0.1}}}")
        entries = doc.named(c.node("nodes"), ckey + ("nodes",), "{A: {host: 127.0.0.1}}")
        if "nodes" in c and not entries:
            doc.fail(ckey + ("nodes",), c.node("nodes"), "no nodes; a cluster needs at least one, "
                                                          "e.g. nodes: {A: {host: 127.0.0.1}}")
        for name, nnode in entries:
            key = ckey + ("nodes", name)
            # A pathmap's node (paths.sections.Node), of which a cluster map writes the host and port.
            node = read_section(doc, nnode, key, Node, name, keys=("host", "port"),
                                example="{host: 127.0.0.1, port: 0}", cluster=cluster)
            for problem_key, problem in key_problems(node, key):
                doc.fail(problem_key, None, problem)
            if name in first:
                other, line = first[name]
                doc.fail(key, None, f"node {name} is already in cluster {other} (line {line}); "
                                    "a node belongs to one cluster: rename one of them")
                continue
            first[name] = (cluster, doc.origin.line(key) or 0)
            nodes.append(node)
    if doc.root is not None and "clusters" in top and not nodes:
        doc.fail(("clusters",), top.node("clusters"), f"no nodes; write e.g. {example}")
    return ClusterMap(tuple(nodes), doc.origin)


@dataclass(frozen=True)
class AppElement:
    """An element of the application: its template, flow control, and the threads that use it
    (the first user's node is its default home). Its keys are a pathmap element's
    (paths.sections.ElementSpec), its name written as a key, and its users."""

    EXAMPLE: ClassVar[str] = "{name: row_0_1, template: [bytes], delta: 2, users: [T0, T1]}"

    name: str = key(NAME, example="row_0_1")
    template: tuple[str, ...] | str = key(TEMPLATE, example="[bytes]")
    keep: int | None = key(INTEGER, None, kw_only=True)
    delta: int | None = key(INTEGER, None, kw_only=True)
    users: tuple[str, ...] = key(NAMES, ())


@dataclass(frozen=True)
class AppTree:
    """A collective of the application and its member threads."""

    name: str
    kind: str
    members: tuple[str, ...]


@dataclass(frozen=True)
class AppMap:
    """An application: its threads, the elements they use, the trees they join."""

    threads: tuple[str, ...]
    elements: tuple[AppElement, ...] = ()
    trees: tuple[AppTree, ...] = ()
    origin: Origin = field(default=Origin(), compare=False, repr=False)

    @classmethod
    def load(cls, file: str | os.PathLike) -> AppMap:
        """Read an application map file; raises PathmapError listing every problem, or OSError."""
        return _read_file(cls, file)

    @classmethod
    def loads(cls, text: str, source: str = "<string>") -> AppMap:
        return _parse(text, source, _read_app_map)


def _read_app_map(doc: Document) -> AppMap:
    top = doc.fields(doc.root, (), ("threads", "elements", "trees"),
                     required={"threads": "threads: 16"}, example="threads: 16")
    threads = _read_threads(doc, top.node("threads"))
    known = set(threads)
    elements, names = [], {}
    for key, item in doc.items(top.node("elements"), ("elements",), "[{name: e, template: [bytes], users: [T0]}]"):
        element = read_section(doc, item, key, AppElement)
        name = element.name
        if name in names:
            doc.fail(key + ("name",), None, f"duplicate element {name!r} (first at "
                                            f"{names[name]}); give each element its own name")
        names.setdefault(name, f"line {doc.origin.line(key)}")
        if key + ("template",) in doc.lines:   # written (a missing one is told already)
            problem = template_problem(element.template)
            if problem:
                doc.fail(key + ("template",), None, problem)
        for what, problem in bound_problems(element.keep, element.delta):
            doc.fail(key + (what,), None, problem)
        _known_threads(doc, element.users, key + ("users",), known)
        elements.append(element)
    trees, tree_names = [], set()
    for key, item in doc.items(top.node("trees"), ("trees",), "[{name: count, kind: allreduce, members: all}]"):
        f = doc.fields(item, key, ("name", "kind", "members"),
                       required={"name": "name: count", "kind": "kind: allreduce", "members": "members: all"},
                       example="{name: count, kind: allreduce, members: all}")
        name, kind = f.name("name"), f.name("kind")
        if name in tree_names:
            doc.fail(key + ("name",), f.node("name"), f"duplicate tree {name!r}; give each tree its own name")
        tree_names.add(name)
        if kind and kind not in TREE_KINDS:
            doc.fail(key + ("kind",), f.node("kind"), f"unknown kind {kind!r}{suggest(kind, TREE_KINDS)}; "
                                                      f"use one of {', '.join(TREE_KINDS)}")
        members_node = f.node("members")
        if isinstance(members_node, ScalarNode) and members_node.value == "all":
            members = threads
        else:
            members = f.names("members")
            _known_threads(doc, members, key + ("members",), known)
            if members_node is not None and not members:
                doc.fail(key + ("members",), members_node, "no members; write members: all, or a list of threads")
        trees.append(AppTree(name, kind, members))
    return AppMap(threads, tuple(elements), tuple(trees), doc.origin)


def _read_threads(doc: Document, node) -> tuple[str, ...]:
    if node is None:
        return ()
    if isinstance(node, SequenceNode):
        names = doc.names(node, ("threads",))
        seen = set()
        for i, name in enumerate(names):
            if name in seen:
                doc.fail(("threads", i), node.value[i], f"duplicate thread {name!r}; give each thread its own name")
            seen.add(name)
        if not names:
            doc.fail(("threads",), node, "no threads; write a count (threads: 16) or a list of names")
        return tuple(dict.fromkeys(names))
    count = doc.typed(node, ("threads",), int, None, "a thread count or a list of names")
    if count is None:
        return ()
    if count < 1:
        doc.fail(("threads",), node, f"{count} threads; write a count of at least 1, or a list of names")
        return ()
    return tuple(f"T{i}" for i in range(count))


def _known_threads(doc: Document, names, key, known) -> None:
    for i, name in enumerate(names):
        if name not in known:
            doc.fail(key + (i,), None, f"unknown thread {name!r}{suggest(name, known)}; "
                                       "use one of the threads of `threads:`")


@dataclass(frozen=True)
class Placement:
    """Where threads and elements go: explicit `threads` and `elements` (name -> node), the rest
    by `rule` (threads: `block` fills nodes in turn with equal runs of consecutive threads,
    `round-robin` deals them out one by one; elements: the node of their first user)."""

    rule: str = "block"
    threads: dict[str, str] = field(default_factory=dict)
    elements: dict[str, str] = field(default_factory=dict)
    origin: Origin = field(default=Origin(), compare=False, repr=False)

    @classmethod
    def load(cls, file: str | os.PathLike) -> Placement:
        """Read an application-to-cluster map file; raises PathmapError listing every problem, or OSError."""
        return _read_file(cls, file)

    @classmethod
    def loads(cls, text: str, source: str = "<string>") -> Placement:
        return _parse(text, source, _read_placement)


def _read_placement(doc: Document) -> Placement:
    top = doc.fields(doc.root, (), ("rule", "threads", "elements"), example="rule: block")
    rule = top.name("rule", "block")
    if rule and rule not in RULES:
        doc.fail(("rule",), top.node("rule"), f"unknown rule {rule!r}{suggest(rule, RULES)}; "
                                              f"use {' or '.join(RULES)}")
    placed = {}
    for section in ("threads", "elements"):
        placed[section] = {name: doc.name(node, (section, name)) for name, node in
                           doc.named(top.node(section), (section,), "{T0: A}")}
    return Placement(rule or "block", placed["threads"], placed["elements"], doc.origin)
