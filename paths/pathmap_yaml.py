"""The pathmap's YAML form: read into the typed model (every problem located), and written back."""

from __future__ import annotations

import os
from pathlib import Path as FilePath

import yaml

from .document import Document
from .sections import (DEFAULT_KEEP, Clock, ElementSpec, Instrument, Liveness, Node, Path, SecuritySpec, Selector,
                       Stage, Thread, Tree)

# The format is described, with a commented example, in pathmaps/example-toy.yaml. Reading builds
# the model; the rules (paths.rules) are checked on the model afterwards, by Pathmap.loads.

# -- reading -------------------------------------------------------------------------------------

_TOP_KEYS = ("name", "allow_modules", "clock", "security", "liveness", "nodes", "threads", "elements", "stages",
             "paths", "trees", "instrument")


def read(doc: Document, pathmap_class: type):
    """The pathmap `doc` holds, as an instance of `pathmap_class` (paths.Pathmap, which calls this
    from `Pathmap.loads`); every problem found on the way is added to `doc.problems`."""
    default_name = _default_name(doc.source)
    top = doc.fields(doc.root, (), _TOP_KEYS, required={"nodes": "nodes: {A: {host: 127.0.0.1}}"},
                     example="nodes: {A: {host: 127.0.0.1}}")
    if doc.root is None:
        doc.fail(("nodes",), None, "the pathmap is empty; it needs at least `nodes: {A: {host: 127.0.0.1}}`")

    def entries(section: str, read_entry, example: str) -> tuple:
        return tuple(read_entry(doc, name, node) for name, node in doc.named(top.node(section), (section,), example))

    return pathmap_class(
        name=top.name("name", default_name) or default_name,
        allow_modules=top.names("allow_modules"),
        clock=_read_clock(doc, top.node("clock")),
        security=_read_security(doc, top.node("security")),
        liveness=_read_liveness(doc, top.node("liveness")),
        nodes=entries("nodes", _read_node, "{A: {host: 127.0.0.1}}"),
        threads=entries("threads", _read_thread, "{T0: {node: A}}"),
        elements=entries("elements", _read_element, "{row: {node: A, template: [int]}}"),
        stages=entries("stages", _read_stage, "{s1: {type: remote, node: A}}"),
        paths=entries("paths", _read_path, "{p: {thread: T0, element: e, stages: [s1]}}"),
        trees=entries("trees", _read_tree, "{count: {kind: allreduce, root: r, members: {T0: r}}}"),
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
    f = doc.fields(node, key, ("keep", "location", "collectors", "system"),
                   example=f"{{keep: {DEFAULT_KEEP}, location: local, collectors: [{{at: [source]}}]}}")
    selectors = []
    for item_key, item in doc.items(f.node("collectors"), key + ("collectors",), "[{at: [source]}]"):
        s = doc.fields(item, item_key, _SELECTOR_KEYS, example="{threads: [T0], at: [source]}")
        selectors.append(Selector(**{k: s.names(k) for k in _SELECTOR_KEYS}))
    return Instrument(keep=f.integer("keep", DEFAULT_KEEP), location=f.name("location", "local") or "local",
                      collectors=tuple(selectors), system=f.boolean("system", True))


def _read_clock(doc: Document, node) -> Clock:
    f = doc.fields(node, ("clock",), ("samples", "drift", "reference", "scheme"),
                   example="{samples: 8, drift: false, scheme: direct}")
    return Clock(samples=f.integer("samples", 8), drift=f.boolean("drift", False),
                 reference=f.name("reference", None) or None, scheme=f.name("scheme", "direct") or "direct")


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
    f = doc.fields(node, ("security",), ("keys", "join_endpoints"), example="{keys: path/to/keydir}")
    if "keys" not in f and "join_endpoints" not in f:
        doc.fail(("security", "keys"), node, "missing; add `keys: path/to/keydir`")
    join_endpoints = f.names("join_endpoints")
    keys = f.text("keys", "") if "keys" in f else ""
    if not keys:
        return SecuritySpec("" if "keys" in f else None, join_endpoints)
    keys = os.path.expanduser(keys)
    if not os.path.isabs(keys) and not doc.source.startswith("<"):
        # Relative to the pathmap's folder, and absolute from here on: a launcher's snapshot of
        # the pathmap, read from elsewhere, must name the same directory.
        keys = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(doc.source)), keys))
    return SecuritySpec(keys, join_endpoints)


def _default_name(source: str) -> str:
    stem = FilePath(source).stem
    return stem if stem and not source.startswith("<") else "pathmap"


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
    "security": "CURVE: node servers accept only clients whose keys are in this directory; traffic is encrypted; "
                "join_endpoints: other addresses scope joins may reach the run's nodes at",
    "liveness": "seconds a node that keeps its connection but does not answer (paused, swapping) is waited for",
    "nodes": "node servers: one process each (port 0: a free one)",
    "threads": "application threads and the node whose process runs each",
    "elements": "tuple elements: node, template, keep (discard threshold) or delta (flow control)",
    "stages": "stage instances: wrapper type, node, parameters; a stage id shared by paths is one instance",
    "paths": "from a thread to an element, stage by stage (a remote stage where the path changes node)",
    "trees": "collectives: members enter at a stage, edges lead each stage to its parent, up to the root",
    "instrument": "which points carry event collectors, and their trace elements",
}


def write(pm, header: str | None = None) -> str:
    """YAML for the pathmap `pm` that `read` reads back to an equal one; `header` becomes leading comments."""
    data: dict = {"name": pm.name}
    if pm.allow_modules:
        data["allow_modules"] = _FlowList(pm.allow_modules)
    clock = _Flow(samples=pm.clock.samples, drift=pm.clock.drift)
    if pm.clock.reference is not None:
        clock["reference"] = pm.clock.reference
    if pm.clock.scheme != "direct":
        clock["scheme"] = pm.clock.scheme
    data["clock"] = clock
    if pm.security != SecuritySpec():
        security = _Flow() if pm.security.keys is None else _Flow(keys=pm.security.keys)
        if pm.security.join_endpoints:
            security["join_endpoints"] = _FlowList(pm.security.join_endpoints)
        data["security"] = security
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
    if not pm.instrument.system:
        data["instrument"]["system"] = False
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=160)
    lines = [f"# {line}".rstrip() for line in header.splitlines()] if header else []
    for line in body.splitlines():
        section = line.split(":", 1)[0]
        if section in _SECTION_COMMENTS and not line.startswith(" "):
            lines += ["", f"# {_SECTION_COMMENTS[section]}"]
        lines.append(line)
    return "\n".join(lines) + "\n"


def edit_instrument(text: str, add: tuple[Selector, ...] = (), *, keep: int | None = None,
                    location: str | None = None, clear: bool = False) -> str:
    """The pathmap YAML `text` with its instrument section edited in place, and everything else as it
    was, comments included: the rules `add` appended to its collectors (a rule it already has is not
    repeated; `clear` removes every rule first), and `keep`, `location` set where given (else left as
    written). The caller checks the result (Pathmap.loads)."""
    from io import StringIO

    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096   # lines stay as long as they were
    offset = _dash_offset(text)   # block lists indented as the file indents them
    rt.indent(mapping=2, sequence=2 + offset, offset=offset)
    doc = rt.load(text)
    if not isinstance(doc, dict):
        raise ValueError("the pathmap is not a YAML mapping")
    section = doc.get("instrument")
    if not isinstance(section, dict):
        section = doc["instrument"] = CommentedMap()
    if keep is not None:
        section["keep"] = keep
    if location is not None:
        section["location"] = location
    rules = section.get("collectors")
    if clear or not isinstance(rules, list):
        rules = section["collectors"] = CommentedSeq()
        rules.fa.set_flow_style()
    have = [_rule_key(rule) for rule in rules if isinstance(rule, dict)]
    for selector in add:
        rule = CommentedMap((k, list(getattr(selector, k))) for k in _SELECTOR_KEYS if getattr(selector, k))
        rule.fa.set_flow_style()
        if _rule_key(rule) not in have:
            rules.append(rule)
            have.append(_rule_key(rule))
    out = StringIO()
    rt.dump(doc, out)
    return out.getvalue()


def _dash_offset(text: str) -> int:
    """How far a block list's dashes stand in from the key that holds it in `text` (0 as PyYAML writes
    them, 2 as people often do), from the first such list."""
    previous = None
    for line in text.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("- ") and previous is not None and previous.rstrip().endswith(":"):
            return max(0, (len(line) - len(stripped)) - (len(previous) - len(previous.lstrip())))
        previous = line
    return 0


def _rule_key(rule: dict) -> tuple:
    """A collectors rule as a comparable value: its keys with their names, in order of key."""
    return tuple(sorted((str(k), tuple(map(str, v)) if isinstance(v, list) else (str(v),)) for k, v in rule.items()))
