"""Tree shapes: how a collective's members are joined, level by level, and where each join runs."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx

SHAPES = ("flat", "kary:K", "knomial:K", "per-node", "per-cluster")


@dataclass(frozen=True)
class Shape:
    """A tree shape: `flat` (one join), `kary:K` (joins of at most K children, level by level),
    `knomial:K` (a k-nomial tree over the members, binomial for K=2), `per-node` (a join per
    node, then a root), `per-cluster` (per node, then per cluster, then a root)."""

    kind: str
    k: int | None = None

    @classmethod
    def parse(cls, text: str) -> Shape:
        """The shape `text` names; raises ValueError saying what is wrong and what to write."""
        match = re.fullmatch(r"(kary|knomial):(\d+)", text or "")
        if match:
            k = int(match.group(2))
            if k < 2:
                raise ValueError(f"shape {text!r}: a {match.group(1)} tree needs K of at least 2; "
                                 f"write e.g. {match.group(1)}:2")
            return cls(match.group(1), k)
        if text in ("flat", "per-node", "per-cluster"):
            return cls(text)
        raise ValueError(f"unknown tree shape {text!r}; use one of {', '.join(SHAPES)} "
                         "(K a whole number of at least 2)")

    def __str__(self) -> str:
        return f"{self.kind}:{self.k}" if self.k is not None else self.kind


@dataclass(frozen=True)
class Member:
    """A member thread, as a vertex of a laid-out tree."""

    name: str


@dataclass(frozen=True)
class LayoutJoin:
    """A join, as a vertex of a laid-out tree; the top one is labelled `root`."""

    label: str


class TreeGraph:
    """A laid-out tree as it is built: vertices (Member and LayoutJoin objects, each with the node
    it runs on, `nodes[v]["node"]`), edges from child to parent, kept in the order they were made,
    and `graph["root"]`. What `lay_out` makes and paths.generate reads, in plain dicts: an MPI
    rank that lays out its run's trees does not import networkx for it (80 ms at its start)."""

    def __init__(self):
        self.nodes: dict = {}
        self.graph: dict = {}
        self._parent: dict = {}
        self._children: dict = {}

    def add_node(self, vertex, node: str) -> None:
        self.nodes[vertex] = {"node": node}
        self._children.setdefault(vertex, [])

    def add_edge(self, child, parent) -> None:
        self._parent[child] = parent
        self._children[parent].append(child)

    def predecessors(self, vertex) -> list:
        """The children of `vertex`, in the order their edges were made."""
        return list(self._children[vertex])

    def in_degree(self, vertex) -> int:
        return len(self._children[vertex])

    def edges(self) -> list[tuple]:
        return [(child, parent) for parent, children in self._children.items() for child in children]

    def rename(self, old, new) -> None:
        """`old` becomes `new` (a join becomes the root); its edges stay as they were."""
        self.nodes[new] = self.nodes.pop(old)
        self._children[new] = self._children.pop(old)
        for child in self._children[new]:
            self._parent[child] = new
        if old in self._parent:
            parent = self._parent.pop(old)
            self._parent[new] = parent
            self._children[parent] = [new if c == old else c for c in self._children[parent]]

    def top_down(self) -> list:
        """Every vertex, breadth-first from the root, each vertex's children in edge order."""
        order, at = [self.graph["root"]], 0
        while at < len(order):
            order += self._children[order[at]]
            at += 1
        return order

    def as_networkx(self) -> nx.DiGraph:
        import networkx as nx  # here, not at import: node processes never need it (25 MB of RSS each)

        graph = nx.DiGraph(**self.graph)
        for vertex, attributes in self.nodes.items():
            graph.add_node(vertex, **attributes)
        graph.add_edges_from(self.edges())
        return graph


def lay_out(shape: Shape, members: Sequence[str], node_of: Mapping[str, str],
            cluster_of: Mapping[str, str], node_order: Sequence[str]) -> nx.DiGraph:
    """The tree of `shape` over `members` (thread names), as a networkx DiGraph (`arrange` makes it).

    Vertices are Member and LayoutJoin objects, each with a `node` attribute (where it runs);
    edges lead from child to parent; `graph.graph["root"]` is the root LayoutJoin."""
    return arrange(shape, members, node_of, cluster_of, node_order).as_networkx()


def arrange(shape: Shape, members: Sequence[str], node_of: Mapping[str, str],
            cluster_of: Mapping[str, str], node_order: Sequence[str]) -> TreeGraph:
    """The tree of `shape` over `members` (thread names), as a TreeGraph.

    Members are ordered by their node (in `node_order`) first, so that subtrees stay on one node
    where they can. A join runs on the node of most of its children (the first of them on a
    tie). A level that makes one join is the top: that join is the root, labelled `root`.
    """
    if not members:
        raise ValueError("a tree needs at least one member")
    rank = {n: i for i, n in enumerate(node_order)}
    ordered = sorted(members, key=lambda m: rank[node_of[m]])  # stable: keeps order within a node
    graph = TreeGraph()
    for m in ordered:
        graph.add_node(Member(m), node=node_of[m])
    level = [Member(m) for m in ordered]
    if shape.kind == "knomial":
        _knomial(graph, level, shape.k)
        return graph
    if shape.kind == "flat":
        groupings = [lambda items: [items]]
    elif shape.kind == "kary":
        groupings = [lambda items: _chunks(items, shape.k)]
    elif shape.kind == "per-node":
        groupings = [lambda items: _by(graph, items, lambda n: n, "node"), lambda items: [items]]
    elif shape.kind == "per-cluster":
        groupings = [lambda items: _by(graph, items, lambda n: n, "node"),
                     lambda items: _by(graph, items, lambda n: cluster_of[n], "cluster"),
                     lambda items: [items]]
    else:
        raise ValueError(f"unknown tree shape {shape}")
    depth = 0
    while True:
        group = groupings[min(depth, len(groupings) - 1)]
        depth += 1
        level = [_join(graph, g, label) for label, g in _labelled(group(level), depth)]
        if len(level) == 1:
            graph.rename(level[0], LayoutJoin("root"))
            graph.graph["root"] = LayoutJoin("root")
            return graph


def _labelled(groups, depth):
    """(label, items) per group: a grouping names its groups itself, or they get level-i names."""
    for i, group in enumerate(groups):
        if isinstance(group, tuple):
            yield group
        else:
            yield f"level{depth}-{i}", group


def _chunks(items: list, k: int) -> list[list]:
    return [items[i:i + k] for i in range(0, len(items), k)]


def _by(graph: TreeGraph, items: list, key, prefix: str) -> list[tuple[str, list]]:
    """Items grouped by key(node they run on), groups in order of first appearance."""
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(key(graph.nodes[item]["node"]), []).append(item)
    return [(f"{prefix}-{name}", group) for name, group in groups.items()]


def _join(graph: TreeGraph, children: list, label: str) -> LayoutJoin:
    """A new join over `children`, on the node most of them run on."""
    nodes = [graph.nodes[c]["node"] for c in children]
    counts = Counter(nodes)
    top = max(counts.values())
    join = LayoutJoin(label)
    graph.add_node(join, node=next(n for n in nodes if counts[n] == top))
    for child in children:
        graph.add_edge(child, join)
    return join


def knomial_parent(i: int, k: int) -> int:
    """The parent of position i > 0 in a k-nomial tree: i with its lowest non-zero base-k digit
    cleared (for k = 2, the lowest set bit: the binomial tree)."""
    power = 1
    while (i // power) % k == 0:
        power *= k
    return i - ((i // power) % k) * power


def _knomial(graph: TreeGraph, members: list[Member], k: int) -> None:
    """Member i's join (a LayoutJoin `join-NAME` on i's node) exists where i has children in
    the k-nomial tree over the positions; member i enters its own join, or else its parent's. The
    join of position 0 is the root."""
    n = len(members)
    parents = {i: knomial_parent(i, k) for i in range(1, n)}
    has_children = {0} | set(parents.values())
    joins = {}
    for i in sorted(has_children):
        label = "root" if i == 0 else f"join-{members[i].name}"
        joins[i] = LayoutJoin(label)
        graph.add_node(joins[i], node=graph.nodes[members[i]]["node"])
    for i, member in enumerate(members):
        graph.add_edge(member, joins[i] if i in joins else joins[parents[i]])
        if i in joins and i > 0:
            graph.add_edge(joins[i], joins[parents[i]])
    graph.graph["root"] = joins[0]
