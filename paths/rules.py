"""The rules of a valid pathmap, checked on the typed model, so that generated pathmaps are checked too."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import networkx as nx
from pastset.client import check_grace
from pastset.errors import PastSetError
from pastset.security import problems as key_problems
from pastset.template import Template

from .document import Key, listing, suggest
from .expression import ExpressionError
from .instrument import PATH_ROLES, ROLES, TREE_ROLES, select
from .registry import JOIN_TYPE_OF_KIND, JOIN_TYPES, is_module_name, reference_problem, registered_types
from .shapes import Shape
from .wrapper import Filter

if TYPE_CHECKING:
    from .pathmap import Pathmap, Tree


def check(pathmap: Pathmap) -> list[tuple[Key, str]]:
    """Every rule `pathmap` breaks, as (key path, "what is wrong; what to do"), in pathmap order."""
    return _Checker(pathmap).run()


# Binary records travel whole in every batch; a format like '=99999999999I' must be refused
# before anything expands it.
_MAX_RECORD = 1 << 20


def template_problem(spec) -> str | None:
    """What is wrong with an element template (plain form), or None."""
    if isinstance(spec, str) and spec.startswith("="):
        try:
            size = struct.calcsize(spec)
        except struct.error:
            size = 0  # Template.of below says what is wrong with it
        if size > _MAX_RECORD:
            return (f"invalid template: records of {spec!r} take {size} bytes; a binary record "
                    f"takes at most {_MAX_RECORD} bytes: use fewer or smaller fields")
    try:
        Template.of(list(spec) if isinstance(spec, tuple) else spec)
    except PastSetError as exc:
        told = str(exc)
        if ";" in told:  # pastset's message already says what to do
            return f"invalid template: {told}"
        return (f"invalid template: {told}; write a list of field types such as [int, bytes], "
                "or a struct format starting with '=' such as '=HHIIIIQQ'")
    return None


def count_problem(value, what: str) -> str | None:
    """What is wrong with a tuple count such as keep or delta (None: not set), or None."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return None
    return f"{what} must be a positive whole number of tuples, got {value!r}; write e.g. {what}: 2"


def port_problem(port) -> str | None:
    if isinstance(port, int) and not isinstance(port, bool) and 0 <= port <= 65535:
        return None
    return f"port {port!r} is out of range; use 1-65535, or 0 to pick a free port at start"


def _plain(value) -> bool:
    return value is None or isinstance(value, (int, float, str, bool))


class _Checker:
    """One pass over a pathmap, collecting (key path, message) for every rule broken."""

    def __init__(self, pm: Pathmap):
        self.pm = pm
        self.problems: list[tuple[Key, str]] = []
        index = pm._index
        self.nodes, self.threads, self.elements = index.nodes, index.threads, index.elements
        self.stages, self.paths, self.trees = index.stages, index.paths, index.trees
        self.tree_of: dict[str, str] = {}  # stage id -> the tree it belongs to
        # Stages whose type is already reported: what a path does with them is not judged.
        self.bad_type: set[str] = set()

    def add(self, key: Key, what: str) -> None:
        self.problems.append((key, what))

    def run(self) -> list[tuple[Key, str]]:
        self.check_allow_modules()
        self.check_clock()
        self.check_security()
        self.check_liveness()
        self.check_nodes()
        self.check_threads()
        self.check_elements()
        self.check_stages()
        self.check_trees()  # before the paths, which must not pass through a tree's stages
        self.check_paths()
        self.check_instrument()
        return self.problems

    def placed(self, *things) -> bool:
        """True if every thing's node is known: where one is not, that is reported once, and
        comparing nodes would only repeat it."""
        return all(thing.node in self.nodes for thing in things)

    def unknown(self, key: Key, what: str, name: str, known) -> None:
        self.add(key, f"unknown {what} {name!r}{suggest(name, known)}; "
                      f"use one of the pathmap's {what}s: {listing(known)}")

    def unique(self, items, section: str, attr: str) -> None:
        """Duplicates can only come from a pathmap built in code: YAML keys are checked on reading."""
        seen = set()
        for item in items:
            name = getattr(item, attr)
            if name in seen:
                self.add((section, name), f"duplicate name {name!r}; give each its own name")
            seen.add(name)

    def check_allow_modules(self) -> None:
        for i, module in enumerate(self.pm.allow_modules):
            if not is_module_name(module):
                self.add(("allow_modules", i), f"{module!r} is not a module name; write a dotted "
                                               "module name such as mylib.wrappers")

    def check_clock(self) -> None:
        clock = self.pm.clock
        if not (isinstance(clock.samples, int) and clock.samples >= 1):
            self.add(("clock", "samples"), f"samples must be at least 1, got {clock.samples!r}; "
                                           "write e.g. samples: 8")
        if clock.reference is not None and clock.reference not in self.nodes:
            self.unknown(("clock", "reference"), "node", clock.reference, self.nodes)

    def check_liveness(self) -> None:
        try:
            check_grace(self.pm.liveness.grace)
        except PastSetError as exc:
            self.add(("liveness", "grace"), f"{exc}; write e.g. grace: 30")

    def check_security(self) -> None:
        keys = self.pm.security.keys
        if keys is None:
            return
        if not isinstance(keys, str) or not keys.strip():
            self.add(("security", "keys"), f"keys must name a key directory, got {keys!r}; "
                                           "write e.g. keys: path/to/keydir")
            return
        # Every node serves and connects with these keys: it needs all of them.
        for what in key_problems(keys, serve=True):
            self.add(("security", "keys"), what)

    def check_nodes(self) -> None:
        if not self.pm.nodes:
            self.add(("nodes",), "no nodes; a pathmap needs at least one, e.g. nodes: {A: {host: 127.0.0.1}}")
        self.unique(self.pm.nodes, "nodes", "name")
        endpoints: dict[tuple[str, int], str] = {}
        for node in self.pm.nodes:
            key = ("nodes", node.name)
            if not node.host.strip():
                self.add(key + ("host",), "empty host; give the host name or address the node runs on")
            problem = port_problem(node.port)
            if problem:
                self.add(key + ("port",), problem)
            elif node.port:
                other = endpoints.setdefault((node.host, node.port), node.name)
                if other != node.name:
                    self.add(key + ("port",), f"node {other} already listens on {node.host}:{node.port}; "
                                              "give each node its own port, or 0 to pick a free one")

    def check_threads(self) -> None:
        self.unique(self.pm.threads, "threads", "name")
        for thread in self.pm.threads:
            if thread.node not in self.nodes:
                self.unknown(("threads", thread.name, "node"), "node", thread.node, self.nodes)

    def check_elements(self) -> None:
        self.unique(self.pm.elements, "elements", "name")
        for element in self.pm.elements:
            key = ("elements", element.name)
            if element.node not in self.nodes:
                self.unknown(key + ("node",), "node", element.node, self.nodes)
            problem = template_problem(element.template)
            if problem:
                self.add(key + ("template",), problem)
            for what in ("keep", "delta"):
                problem = count_problem(getattr(element, what), what)
                if problem:
                    self.add(key + (what,), problem)
            if element.keep is not None and element.delta is not None:
                self.add(key + ("delta",), "both keep and delta are set; keep discards old tuples and "
                                           "never blocks, delta blocks moves: keep only one")

    def check_stages(self) -> None:
        self.unique(self.pm.stages, "stages", "id")
        types = registered_types()
        for stage in self.pm.stages:
            key = ("stages", stage.id)
            if not self.check_type(stage.type, key + ("type",), types):
                self.bad_type.add(stage.id)
            if stage.node not in self.nodes:
                self.unknown(key + ("node",), "node", stage.node, self.nodes)
            params = stage.params
            for name, value in params.items():
                if not (_plain(value) or (isinstance(value, list) and all(map(_plain, value)))):
                    self.add(key + ("params", name), f"{value!r} is not a plain value; parameters are "
                                                     "numbers, text, true/false, or lists of them")
            if stage.type == "element":
                self.check_element_stage(stage, key)
            fn = params.get("fn")
            if fn is not None:
                self.check_function(fn, key + ("params", "fn"))
            if stage.type == "convert" and "fn" not in params:
                self.add(key + ("params",), "a convert stage needs a function; add params: {fn: module:function}")
            if stage.type == "filter":
                self.check_filter(params, key + ("params",))
            if stage.type == "buffer" and "size" in params and count_problem(params["size"], "size"):
                self.add(key + ("params", "size"), count_problem(params["size"], "size"))

    def check_type(self, type_name: str, key: Key, types: frozenset[str]) -> bool:
        """True if the type is one the pathmap may use."""
        if ":" in type_name:
            problem = reference_problem(type_name, self.pm.allow_modules, "wrapper type")
            if problem is not None:
                self.add(key, problem)
                return False
        elif type_name not in types:
            self.add(key, f"unknown wrapper type {type_name!r}{suggest(type_name, types)}; use one of "
                          f"{listing(sorted(types), 20)}, or module:Class from a module in allow_modules")
            return False
        return True

    def check_function(self, fn, key: Key) -> None:
        if not isinstance(fn, str):
            self.add(key, f"{fn!r} is not a function name; write a built-in name (sum, min, max, count) "
                          "or module:function")
            return
        if ":" not in fn:
            return  # a built-in name; the wrapper that uses it knows its own
        problem = reference_problem(fn, self.pm.allow_modules, "function")
        if problem is not None:
            self.add(key, problem)

    def check_filter(self, params: dict, key: Key) -> None:
        """The parse the filter stage makes when its node builds it (paths.wrapper.Filter.parse)."""
        if not isinstance(params.get("where"), str):
            self.add(key, "a filter stage needs an expression; add params: {where: f0 > 0}")
            return
        try:
            Filter.parse(params)
        except ExpressionError as exc:
            self.add(key + ("where",), str(exc))

    def check_element_stage(self, stage, key: Key) -> None:
        name = stage.params.get("element")
        if name is None:
            self.add(key + ("params",), "an element stage needs the element it ends at; "
                                        "add params: {element: NAME}")
        elif not isinstance(name, str):
            self.add(key + ("params", "element"), f"{name!r} is not an element name; write element: NAME")
        elif name not in self.elements:
            self.unknown(key + ("params", "element"), "element", str(name), self.elements)
        elif self.placed(stage, self.elements[name]) and self.elements[name].node != stage.node:
            home = self.elements[name].node
            self.add(key + ("node",), f"element {name} is on node {home}, but its stage runs on "
                                      f"{stage.node}; an element stage runs on its element's node: node: {home}")

    def check_trees(self) -> None:
        self.unique(self.pm.trees, "trees", "name")
        for tree in self.pm.trees:
            for sid in tree.stage_ids:
                other = self.tree_of.setdefault(sid, tree.name)
                if other != tree.name:
                    self.add(("trees", tree.name), f"stage {sid} is also in tree {other}; each tree "
                                                   "has stages of its own")
            self.check_tree(tree)

    def check_tree(self, tree: Tree) -> None:
        key = ("trees", tree.name)
        join_type = None
        if tree.kind not in JOIN_TYPE_OF_KIND:
            self.add(key + ("kind",), f"unknown kind {tree.kind!r}{suggest(tree.kind, JOIN_TYPE_OF_KIND)}; "
                                      f"use one of {', '.join(JOIN_TYPE_OF_KIND)}")
        else:
            join_type = JOIN_TYPE_OF_KIND[tree.kind]
        if tree.shape != "custom":
            try:
                Shape.parse(tree.shape)
            except ValueError as exc:
                self.add(key + ("shape",), f"{exc}, or custom")
        if not tree.members:
            self.add(key + ("members",), "no members; list each member thread and the stage it "
                                         "enters by, e.g. members: {T0: count/root}")
        known = True
        if tree.root not in self.stages:
            self.unknown(key + ("root",), "stage", tree.root, self.stages)
            known = False
        for member, sid in tree.members.items():
            mkey = key + ("members", member)
            if member not in self.threads:
                self.unknown(mkey, "thread", member, self.threads)
            if sid not in self.stages:
                self.unknown(mkey, "stage", sid, self.stages)
                known = False
            elif (member in self.threads and self.placed(self.stages[sid], self.threads[member])
                  and self.stages[sid].node != self.threads[member].node):
                here = self.threads[member].node
                self.add(mkey, f"thread {member} runs on node {here}, but enters the tree at {sid} on "
                               f"node {self.stages[sid].node}; a member enters by a stage on its own "
                               f"node: add a remote stage on {here} leading to {sid}")
        told = set()
        for child, parent in tree.edges.items():
            for sid in (child, parent):
                if sid not in self.stages and sid not in told:
                    self.unknown(key + ("edges", child), "stage", sid, self.stages)
                    told.add(sid)
                    known = False
        if tree.root in tree.edges:
            self.add(key + ("edges", tree.root), f"the root {tree.root} has a parent; the root is "
                                                 "the top of the tree: remove this edge or change root")
        graph = tree.graph()
        try:
            cycle = nx.find_cycle(graph)
        except nx.NetworkXNoCycle:
            cycle = None
        if cycle:
            loop = " -> ".join([a for a, _ in cycle] + [cycle[0][0]])
            self.add(key + ("edges", cycle[0][0]), f"the edges form a cycle: {loop}; edges lead "
                                                   "from the members' stages up to the root, never back")
            return
        self.check_reaches_root(tree, key)
        if not known:
            return
        for sid in tree.stage_ids:
            self.check_tree_stage(tree, sid, join_type)

    def check_reaches_root(self, tree: Tree, key: Key) -> None:
        tops = {}
        for sid in tree.stage_ids:
            top = sid
            while top in tree.edges:
                top = tree.edges[top]
            if top != tree.root:
                tops.setdefault(top, sid)
        for top in tops:
            where = next((key + ("edges", c) for c, p in tree.edges.items() if p == top),
                         next((key + ("members", m) for m, s in tree.members.items() if s == top),
                              key + ("edges",)))
            self.add(where, f"stage {top} does not lead to the root {tree.root}: nothing leads on "
                            f"from it; add an edge `{top}: <a stage nearer the root>`")

    def check_tree_stage(self, tree: Tree, sid: str, join_type: str | None) -> None:
        stage = self.stages[sid]
        key = ("trees", tree.name)
        if stage.type == "element":
            self.add(key, f"stage {sid} is an element stage; element stages end paths, not trees")
        if join_type is not None and sid == tree.root and stage.type != join_type:
            self.add(key + ("root",), f"the root {sid} is a {stage.type} stage; the joins of a "
                                      f"{tree.kind} tree are {join_type} stages")
        elif join_type is not None and stage.type in JOIN_TYPES and stage.type != join_type:
            self.add(("stages", sid, "type"), f"{sid} joins {tree.kind} tree {tree.name}; "
                                              f"make it type: {join_type}")
        parent = tree.edges.get(sid)
        if (parent is not None and self.placed(stage, self.stages[parent])
                and stage.node != self.stages[parent].node and stage.type != "remote"
                and sid not in self.bad_type):
            self.add(key + ("edges", sid), f"the edge {sid} -> {parent} goes from node {stage.node} "
                                           f"to node {self.stages[parent].node}, but {sid} is not a "
                                           f"remote stage; insert a remote stage on {stage.node}")
        if stage.type in JOIN_TYPES:
            want = self.pm.fan_in(tree.name, sid)
            have = stage.params.get("fan_in")
            if have is None:
                self.add(("stages", sid, "params"), f"a join needs fan_in, the contributions it waits "
                                                    f"for each round; add params: {{fan_in: {want}}}")
            elif have != want:
                self.add(("stages", sid, "params", "fan_in"), f"fan_in is {have!r}, but tree "
                         f"{tree.name} brings it {want} contributions each round; set fan_in: {want}")

    def check_paths(self) -> None:
        self.unique(self.pm.paths, "paths", "name")
        routes: dict[tuple[str, str], str] = {}
        nexts: dict[str, tuple[str, str]] = {}  # stage -> (next stage, path that says so)
        for path in self.pm.paths:
            key = ("paths", path.name)
            thread = self.threads.get(path.thread)
            element = self.elements.get(path.element)
            if thread is None:
                self.unknown(key + ("thread",), "thread", path.thread, self.threads)
            if element is None:
                self.unknown(key + ("element",), "element", path.element, self.elements)
            if thread and element:
                other = routes.setdefault((path.thread, path.element), path.name)
                if other != path.name:
                    self.add(key, f"thread {path.thread} already reaches element {path.element} by "
                                  f"path {other}; a thread has one path per element: remove one")
            if not path.stages:
                self.add(key + ("stages",), "no stages; a path ends at its element's stage, e.g. "
                                            f"stages: [{path.element}/element]")
                continue
            stages = []
            for i, sid in enumerate(path.stages):
                skey = key + ("stages", i)
                stage = self.stages.get(sid)
                if stage is None:
                    self.unknown(skey, "stage", sid, self.stages)
                elif sid in path.stages[:i]:
                    self.add(skey, f"stage {sid} appears twice; a path passes each stage once")
                    stage = None
                elif sid in self.tree_of:
                    self.add(skey, f"stage {sid} belongs to tree {self.tree_of[sid]}; a path does "
                                   "not pass through a tree's stages: give it a stage of its own")
                elif stage.type == "element" and i < len(path.stages) - 1:
                    self.add(skey, f"{sid} is an element stage, which ends a path; move it to the end")
                stages.append(stage)
            self.check_path_nodes(path, key, thread, element, stages)
            for i, (a, b) in enumerate(zip(path.stages, path.stages[1:])):
                if stages[i] is None or stages[i + 1] is None:
                    continue
                then, said = nexts.setdefault(a, (b, path.name))
                if then != b:
                    self.add(key + ("stages", i), f"stage {a} leads to {b} here but to {then} in "
                                                  f"path {said}; a stage has one next stage: give "
                                                  "this path a stage of its own")

    def check_path_nodes(self, path, key: Key, thread, element, stages: list) -> None:
        first, last = stages[0], stages[-1]
        if first is not None and thread is not None and self.placed(first, thread) and first.node != thread.node:
            self.add(key + ("stages", 0), f"the path starts at {first.id} on node {first.node}, but "
                                          f"thread {thread.name} runs on {thread.node}; start with a "
                                          f"stage on {thread.node} (a remote stage to cross)")
        for i in range(len(stages) - 1):
            a, b = stages[i], stages[i + 1]
            if (a is not None and b is not None and self.placed(a, b) and a.node != b.node
                    and a.type != "remote" and a.id not in self.bad_type):
                self.add(key + ("stages", i + 1), f"the path goes from node {a.node} ({a.id}) to "
                                                  f"node {b.node} ({b.id}) without a remote stage; "
                                                  f"insert a remote stage on {a.node} before {b.id}")
        if last is not None and element is not None and (
                last.type != "element" or last.params.get("element") != element.name):
            self.add(key + ("stages", len(stages) - 1),
                     f"the path ends at {last.id}, which is not the element stage of {element.name}; "
                     f"end it with a stage {{type: element, node: {element.node}, params: "
                     f"{{element: {element.name}}}}}")

    def check_instrument(self) -> None:
        instrument = self.pm.instrument
        key = ("instrument",)
        problem = count_problem(instrument.keep, "keep")
        if problem:
            self.add(key + ("keep",), problem)
        if instrument.location != "local" and instrument.location not in self.nodes:
            self.add(key + ("location",), f"unknown location {instrument.location!r}; use local "
                                          f"(each collector's own node) or a node: {listing(self.nodes)}")
        tables = {"paths": self.paths, "threads": self.threads, "nodes": self.nodes,
                  "elements": self.elements, "trees": self.trees, "stages": self.stages}
        for i, selector in enumerate(instrument.collectors):
            skey = key + ("collectors", i)
            before = len(self.problems)
            if not any(getattr(selector, f) for f in ("at", *tables)):
                self.add(skey, "selects nothing; name points and what to pick them from, e.g. "
                               "{at: [source]} for every path")
                continue
            if selector.stages and any(getattr(selector, f) for f in ("at", *tables) if f != "stages"):
                self.add(skey + ("stages",), "stages stands alone; put the other names in a rule of their own")
            for j, role in enumerate(selector.at):
                if role not in ROLES:
                    self.add(skey + ("at", j), f"unknown point {role!r}{suggest(role, ROLES)}; "
                                               f"use {', '.join(ROLES)}")
            for field_name, table in tables.items():
                for j, name in enumerate(getattr(selector, field_name)):
                    if name not in table:
                        self.unknown(skey + (field_name, j), field_name[:-1], name, table)
            roles = set(selector.roles)
            if selector.trees and roles <= set(PATH_ROLES):
                self.add(skey + ("trees",), "trees pick tree points, but at: names only path points; "
                                            f"add tree points to at: {', '.join(TREE_ROLES)}")
            if (selector.paths or selector.elements) and roles <= set(TREE_ROLES):
                self.add(skey + ("at",), "paths and elements pick path points, but at: names only tree "
                                         f"points; add path points to at: {', '.join(PATH_ROLES)}")
            if len(self.problems) == before and not select(self.pm, selector):
                self.add(skey, "selects no collector point; check that its names go together "
                               "(e.g. that the thread uses the element)")
