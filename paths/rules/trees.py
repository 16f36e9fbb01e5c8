"""The rules of the trees section: kinds, shapes, members, edges that lead to the root, joins and their fan-in."""

from __future__ import annotations

from ..document import Key, suggest
from ..registry import JOIN_TYPE_OF_KIND, JOIN_TYPES
from ..sections import Tree
from ..shapes import Shape
from .checker import Checker


def check(c: Checker) -> None:
    c.unique(c.pm.trees, "trees", "name")
    for tree in c.pm.trees:
        for sid in tree.stage_ids:
            other = c.tree_of.setdefault(sid, tree.name)
            if other != tree.name:
                c.add(("trees", tree.name), f"stage {sid} is also in tree {other}; each tree "
                                            "has stages of its own")
        _check_tree(c, tree)


def _check_tree(c: Checker, tree: Tree) -> None:
    key = ("trees", tree.name)
    join_type = None
    if tree.kind not in JOIN_TYPE_OF_KIND:
        c.add(key + ("kind",), f"unknown kind {tree.kind!r}{suggest(tree.kind, JOIN_TYPE_OF_KIND)}; "
                               f"use one of {', '.join(JOIN_TYPE_OF_KIND)}")
    else:
        join_type = JOIN_TYPE_OF_KIND[tree.kind]
    if tree.shape != "custom":
        try:
            Shape.parse(tree.shape)
        except ValueError as exc:
            c.add(key + ("shape",), f"{exc}, or custom")
    if not tree.members:
        c.add(key + ("members",), "no members; list each member thread and the stage it "
                                  "enters by, e.g. members: {T0: count/root}")
    known = _check_members(c, tree, key)
    if tree.root in tree.edges:
        c.add(key + ("edges", tree.root), f"the root {tree.root} has a parent; the root is "
                                          "the top of the tree: remove this edge or change root")
    import networkx as nx  # here, not at import: node processes never need it (25 MB of RSS each)
    try:
        cycle = nx.find_cycle(tree.graph())
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        loop = " -> ".join([a for a, _ in cycle] + [cycle[0][0]])
        c.add(key + ("edges", cycle[0][0]), f"the edges form a cycle: {loop}; edges lead "
                                            "from the members' stages up to the root, never back")
        return
    _check_reaches_root(c, tree, key)
    if not known:
        return
    for sid in tree.stage_ids:
        _check_tree_stage(c, tree, sid, join_type)


def _check_members(c: Checker, tree: Tree, key: Key) -> bool:
    """Checks the root, the members and the edges' stages; True if every stage they name is known."""
    known = True
    if tree.root not in c.stages:
        c.unknown(key + ("root",), "stage", tree.root, c.stages)
        known = False
    for member, sid in tree.members.items():
        mkey = key + ("members", member)
        if member not in c.threads:
            c.unknown(mkey, "thread", member, c.threads)
        if sid not in c.stages:
            c.unknown(mkey, "stage", sid, c.stages)
            known = False
        elif (member in c.threads and c.placed(c.stages[sid], c.threads[member])
              and c.stages[sid].node != c.threads[member].node):
            here = c.threads[member].node
            c.add(mkey, f"thread {member} runs on node {here}, but enters the tree at {sid} on "
                        f"node {c.stages[sid].node}; a member enters by a stage on its own "
                        f"node: add a remote stage on {here} leading to {sid}")
    told = set()
    for child, parent in tree.edges.items():
        for sid in (child, parent):
            if sid not in c.stages and sid not in told:
                c.unknown(key + ("edges", child), "stage", sid, c.stages)
                told.add(sid)
                known = False
    return known


def _check_reaches_root(c: Checker, tree: Tree, key: Key) -> None:
    tops = {}
    for sid in tree.stage_ids:
        top = sid
        while top in tree.edges:
            top = tree.edges[top]
        if top != tree.root:
            tops.setdefault(top, sid)
    for top in tops:
        where = next((key + ("edges", child) for child, parent in tree.edges.items() if parent == top),
                     next((key + ("members", m) for m, s in tree.members.items() if s == top),
                          key + ("edges",)))
        c.add(where, f"stage {top} does not lead to the root {tree.root}: nothing leads on "
                     f"from it; add an edge `{top}: <a stage nearer the root>`")


def _check_tree_stage(c: Checker, tree: Tree, sid: str, join_type: str | None) -> None:
    stage = c.stages[sid]
    key = ("trees", tree.name)
    if stage.type == "element":
        c.add(key, f"stage {sid} is an element stage; element stages end paths, not trees")
    if join_type is not None and sid == tree.root and stage.type != join_type:
        c.add(key + ("root",), f"the root {sid} is a {stage.type} stage; the joins of a "
                               f"{tree.kind} tree are {join_type} stages")
    elif join_type is not None and stage.type in JOIN_TYPES and stage.type != join_type:
        c.add(("stages", sid, "type"), f"{sid} joins {tree.kind} tree {tree.name}; "
                                       f"make it type: {join_type}")
    parent = tree.edges.get(sid)
    if (parent is not None and c.placed(stage, c.stages[parent])
            and stage.node != c.stages[parent].node and stage.type != "remote"
            and sid not in c.bad_type):
        c.add(key + ("edges", sid), f"the edge {sid} -> {parent} goes from node {stage.node} "
                                    f"to node {c.stages[parent].node}, but {sid} is not a "
                                    f"remote stage; insert a remote stage on {stage.node}")
    if stage.type in JOIN_TYPES:
        want = c.pm.fan_in(tree.name, sid)
        have = stage.params.get("fan_in")
        if have is None:
            c.add(("stages", sid, "params"), f"a join needs fan_in, the contributions it waits "
                                             f"for each round; add params: {{fan_in: {want}}}")
        elif isinstance(have, bool) or not isinstance(have, int):
            c.add(("stages", sid, "params", "fan_in"), f"fan_in must be a whole number (the contributions the "
                  f"join waits for each round), not {have!r}; tree {tree.name} brings it {want}: write fan_in: {want}")
        elif have != want:
            c.add(("stages", sid, "params", "fan_in"), f"fan_in is {have!r}, but tree "
                  f"{tree.name} brings it {want} contributions each round; set fan_in: {want}")
