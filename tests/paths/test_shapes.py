"""Tree shapes: fan-out, k-nomial structure, hierarchical levels, placement, no cycles."""

import math

import networkx as nx
import pytest

from paths.shapes import LayoutJoin, Member, Shape, knomial_parent, lay_out

NODES = ["A", "B", "C", "D"]
CLUSTER_OF = {"A": "c1", "B": "c1", "C": "c2", "D": "c2"}


def members(n: int, rule: str = "block") -> tuple[list[str], dict[str, str]]:
    names = [f"T{i}" for i in range(n)]
    if rule == "block":
        node_of = {t: NODES[i * len(NODES) // n] for i, t in enumerate(names)}
    else:
        node_of = {t: NODES[i % len(NODES)] for i, t in enumerate(names)}
    return names, node_of


def layout(shape: str, n: int, rule: str = "block") -> tuple[nx.DiGraph, dict[str, str]]:
    names, node_of = members(n, rule)
    return lay_out(Shape.parse(shape), names, node_of, CLUSTER_OF, NODES), node_of


def joins(graph):
    return [v for v in graph if isinstance(v, LayoutJoin)]


def assert_is_tree_over(graph, n):
    """One root, no cycles, every member reaches the root by exactly one route."""
    root = graph.graph["root"]
    assert root == LayoutJoin("root")
    assert nx.is_directed_acyclic_graph(graph)
    assert nx.is_arborescence(graph.reverse())  # each vertex has one parent, all under the root
    leaves = [v for v in graph if isinstance(v, Member)]
    assert len(leaves) == n and all(graph.in_degree(m) == 0 for m in leaves)
    for m in leaves:
        assert len(list(nx.all_simple_paths(graph, m, root))) == 1


@pytest.mark.parametrize("shape", ["flat", "kary:2", "kary:3", "kary:8", "knomial:2", "knomial:3",
                                   "per-node", "per-cluster"])
@pytest.mark.parametrize("n", [1, 2, 7, 16, 140])
def test_every_shape_is_a_tree_reaching_each_member_once(shape, n):
    graph, _ = layout(shape, n)
    assert_is_tree_over(graph, n)


def test_flat_is_one_join_on_the_busiest_node():
    names = ["T0", "T1", "T2"]
    graph = lay_out(Shape.parse("flat"), names, {"T0": "A", "T1": "B", "T2": "B"}, CLUSTER_OF, NODES)
    assert joins(graph) == [LayoutJoin("root")]
    assert graph.nodes[LayoutJoin("root")]["node"] == "B"


@pytest.mark.parametrize("k", [2, 3, 8])
def test_kary_fan_out_and_depth(k):
    n = 140
    graph, _ = layout(f"kary:{k}", n)
    assert all(graph.in_degree(j) <= k for j in joins(graph))
    depth = max(nx.shortest_path_length(graph, m, LayoutJoin("root")) for m in graph if isinstance(m, Member))
    assert depth == math.ceil(math.log(n, k))
    # Full joins everywhere but at the end of each level.
    assert sum(1 for j in joins(graph) if graph.in_degree(j) < k) <= depth


def test_kary_keeps_subtrees_on_one_node_when_it_can():
    graph, node_of = layout("kary:4", 16, rule="round-robin")  # members are ordered by node first
    for j in joins(graph):
        kids = list(graph.predecessors(j))
        if all(isinstance(c, Member) for c in kids):
            assert len({node_of[c.name] for c in kids}) == 1


def test_knomial_parent_is_binomial_for_k2():
    assert [knomial_parent(i, 2) for i in range(1, 8)] == [0, 0, 2, 0, 4, 4, 6]
    assert [knomial_parent(i, 3) for i in range(1, 9)] == [0, 0, 0, 3, 3, 0, 6, 6]


@pytest.mark.parametrize("k, levels", [(2, 3), (2, 5), (3, 2), (4, 2)])
def test_knomial_structure(k, levels):
    """Over k**levels members the root joins member 0 and (k-1) children per level."""
    n = k ** levels
    graph, _ = layout(f"knomial:{k}", n)
    root = LayoutJoin("root")
    assert graph.in_degree(root) == 1 + (k - 1) * levels
    # Members that have children in the k-nomial tree host a join; the others enter their parent's.
    parents = {knomial_parent(i, k) for i in range(1, n)}
    assert len(joins(graph)) == len(parents | {0})
    depth = max(nx.shortest_path_length(graph, m, root) for m in graph if isinstance(m, Member))
    assert depth == levels
    names, node_of = members(n)
    for join in joins(graph):
        if join != root:  # a join runs where its own member runs
            assert graph.nodes[join]["node"] == node_of[join.label.removeprefix("join-")]


def test_per_node_levels():
    graph, node_of = layout("per-node", 16)
    root = LayoutJoin("root")
    level1 = sorted(graph.predecessors(root), key=lambda j: j.label)
    assert level1 == [LayoutJoin(f"node-{n}") for n in NODES]
    for join in level1:
        node = join.label.removeprefix("node-")
        assert graph.nodes[join]["node"] == node
        assert {m.name for m in graph.predecessors(join)} == {t for t, n in node_of.items() if n == node}


def test_per_cluster_levels():
    graph, node_of = layout("per-cluster", 16)
    root = LayoutJoin("root")
    assert set(graph.predecessors(root)) == {LayoutJoin("cluster-c1"), LayoutJoin("cluster-c2")}
    assert set(graph.predecessors(LayoutJoin("cluster-c1"))) == {LayoutJoin("node-A"), LayoutJoin("node-B")}
    assert set(graph.predecessors(LayoutJoin("cluster-c2"))) == {LayoutJoin("node-C"), LayoutJoin("node-D")}
    assert graph.nodes[LayoutJoin("cluster-c2")]["node"] == "C"  # on one of its children's nodes
    for m in (v for v in graph if isinstance(v, Member)):
        assert len(nx.shortest_path(graph, m, root)) == 4  # member, node, cluster, root


def test_a_level_with_one_join_is_the_root():
    graph = lay_out(Shape.parse("per-cluster"), ["T0", "T1"], {"T0": "A", "T1": "B"}, CLUSTER_OF, NODES)
    # One cluster: its join is the root, not a join under a root of one child.
    assert set(graph.predecessors(LayoutJoin("root"))) == {LayoutJoin("node-A"), LayoutJoin("node-B")}
    graph, _ = layout("per-node", 1)
    assert joins(graph) == [LayoutJoin("root")]


@pytest.mark.parametrize("text", ["kary", "kary:1", "knomial:x", "star", "", "per_node"])
def test_bad_shapes_say_what_to_write(text):
    with pytest.raises(ValueError, match="kary|shape"):
        Shape.parse(text)


def test_shape_text_round_trips():
    for text in ["flat", "kary:8", "knomial:2", "per-node", "per-cluster"]:
        assert str(Shape.parse(text)) == text
