"""Path generate functions: a pathmap built from an application map, a cluster map and a placement."""

from __future__ import annotations

from .document import PathmapError, Problem
from .inputs import AppMap, AppTree, ClusterMap, Placement
from .pathmap import Pathmap
from .registry import JOIN_TYPE_OF_KIND
from .sections import ElementSpec, Path, Stage, Thread, Tree
from .shapes import LayoutJoin, Member, Shape, TreeGraph, arrange


def generate(app: AppMap, cluster: ClusterMap, mapping: Placement, tree_shape: str | Shape = "flat",
             name: str = "generated") -> Pathmap:
    """The pathmap that runs `app` on `cluster` as `mapping` places it, its trees of `tree_shape`.

    Threads go where `mapping` pins them, the rest by its rule; elements where it pins them, the
    rest on their first user's node. One path per (thread, element it uses): a `remote` stage
    on the thread's node if the element lives elsewhere, then the element's `element` stage
    (one per element, shared by its users). Each tree is laid out by `paths.shapes.arrange`;
    its joins get `fan_in` (their children count) and an edge that changes node starts at a
    remote stage of its own. Stage ids: `ELEMENT/element`, `THREAD/ELEMENT/remote`,
    `TREE/JOIN` (the root is `TREE/root`), `TREE/CHILD/remote`.

    Raises PathmapError if the inputs do not fit together (a placement naming an unknown thread
    or node, an element nobody uses and nobody places), ValueError for an unknown shape.
    """
    shape = Shape.parse(tree_shape) if isinstance(tree_shape, str) else tree_shape
    problems = _mismatches(app, cluster, mapping)
    if problems:
        raise PathmapError(problems)
    node_order = [n.name for n in cluster.nodes]
    thread_node = place_threads(app.threads, node_order, mapping)
    element_node = {e.name: mapping.elements.get(e.name) or thread_node[e.users[0]] for e in app.elements}

    stages = [Stage(f"{e.name}/element", "element", element_node[e.name], {"element": e.name})
              for e in app.elements]
    uses: dict[str, list[str]] = {t: [] for t in app.threads}
    for e in app.elements:
        for user in dict.fromkeys(e.users):
            uses[user].append(e.name)
    paths = []
    for thread in app.threads:
        for element in uses[thread]:
            route = [f"{element}/element"]
            if thread_node[thread] != element_node[element]:
                remote = f"{thread}/{element}/remote"
                stages.append(Stage(remote, "remote", thread_node[thread]))
                route.insert(0, remote)
            paths.append(Path(f"{thread}/{element}", thread, element, tuple(route)))

    cluster_of = {n.name: n.cluster for n in cluster.nodes}
    trees = []
    for tree in app.trees:
        graph = arrange(shape, tree.members, thread_node, cluster_of, node_order)
        tree_stages, built = _tree(tree, graph, str(shape))
        stages += tree_stages
        trees.append(built)

    return Pathmap(
        name=name,
        nodes=cluster.nodes,
        threads=tuple(Thread(t, thread_node[t]) for t in app.threads),
        elements=tuple(ElementSpec(e.name, element_node[e.name], e.template, e.keep, e.delta)
                       for e in app.elements),
        stages=tuple(stages),
        paths=tuple(paths),
        trees=tuple(trees),
    ).validate()


def place_threads(threads, node_order: list[str], mapping: Placement) -> dict[str, str]:
    """Thread -> node: pinned threads where `mapping` says; the others by its rule, applied to
    their position among all threads (so pinning one thread moves no other)."""
    n, count = len(threads), len(node_order)
    placed = {}
    for i, thread in enumerate(threads):
        if thread in mapping.threads:
            placed[thread] = mapping.threads[thread]
        elif mapping.rule == "round-robin":
            placed[thread] = node_order[i % count]
        else:  # block: equal runs of consecutive threads, the longer runs first
            placed[thread] = node_order[i * count // n]
    return placed


def _tree(tree: AppTree, graph: TreeGraph, shape: str) -> tuple[list[Stage], Tree]:
    """The stages and the Tree for one laid-out tree."""
    join_type = JOIN_TYPE_OF_KIND[tree.kind]
    root = graph.graph["root"]

    def sid(join: LayoutJoin) -> str:
        return f"{tree.name}/{join.label}"

    def node(vertex) -> str:
        return graph.nodes[vertex]["node"]

    # Top-down (root first, then level by level), so the written pathmap reads like the tree.
    order = [v for v in graph.top_down() if isinstance(v, LayoutJoin)]
    stages = [Stage(sid(j), join_type, node(j), {"fan_in": graph.in_degree(j)}) for j in order]
    entries: dict[str, str] = {}
    edges: dict[str, str] = {}
    for parent in order:
        for child in graph.predecessors(parent):
            if isinstance(child, Member):
                if node(child) == node(parent):
                    entries[child.name] = sid(parent)
                    continue
                remote = f"{tree.name}/{child.name}/remote"
                entries[child.name] = remote
            else:
                if node(child) == node(parent):
                    edges[sid(child)] = sid(parent)
                    continue
                remote = f"{sid(child)}/remote"
                edges[sid(child)] = remote
            stages.append(Stage(remote, "remote", node(child)))
            edges[remote] = sid(parent)
    members = {m: entries[m] for m in tree.members}
    return stages, Tree(tree.name, tree.kind, sid(root), members, edges, shape)


def _mismatches(app: AppMap, cluster: ClusterMap, mapping: Placement) -> list[Problem]:
    """What in the three inputs does not fit together, each located in the file that says it."""
    problems = []
    nodes = {n.name for n in cluster.nodes}
    threads = set(app.threads)
    elements = {e.name for e in app.elements}
    if not cluster.nodes:
        problems.append(cluster.origin.problem(("clusters",), "no nodes; a cluster map needs at least one"))
    if not app.threads:
        problems.append(app.origin.problem(("threads",), "no threads; write a count or a list of names"))
    for section, known, what in (("threads", threads, "thread"), ("elements", elements, "element")):
        for name, node in getattr(mapping, section).items():
            if name not in known:
                problems.append(mapping.origin.problem(
                    (section, name), f"the application map has no {what} {name!r}; place only its {what}s"))
            if node not in nodes:
                problems.append(mapping.origin.problem(
                    (section, name), f"unknown node {node!r}; use a node of the cluster map: "
                                     f"{', '.join(sorted(nodes))}"))
    for i, e in enumerate(app.elements):
        if not e.users and e.name not in mapping.elements:
            problems.append(app.origin.problem(
                ("elements", i), f"element {e.name} has no users and no placement; add users, or "
                                 f"place it in the application-to-cluster map (elements: {{{e.name}: NODE}})"))
    for i, tree in enumerate(app.trees):
        if tree.name in threads:
            # Tree stage ids (TREE/...) would clash with path stage ids (THREAD/...).
            problems.append(app.origin.problem(
                ("trees", i, "name"), f"tree {tree.name} has a thread's name; rename the tree"))
    return problems
