"""The pathmap's YAML form: read into the typed model (every problem located), and written back."""

from __future__ import annotations

import operator
import os
from collections.abc import Collection
from dataclasses import MISSING
from pathlib import Path as FilePath

import yaml

from .document import Document, Fields, Key
from .sections import (BOOLEAN, ENTRIES, INTEGER, KEYDIR, NAME, NAME_MAP, NAMED, NAMES, PARAMS, SECONDS, SECTION,
                       TEMPLATE, TEXT, SectionKey, Selector, label, schema)

# The format is described, with a commented example, in pathmaps/example-toy.yaml, and its schema
# (every key, what it holds, its default) is the sections' field metadata (paths.sections.KeySpec):
# reading and writing walk it. Reading builds the model; the rules (paths.rules) are checked on
# the model afterwards, by Pathmap.loads.

# -- reading -------------------------------------------------------------------------------------

def read(doc: Document, pathmap_class: type):
    """The pathmap `doc` holds, as an instance of `pathmap_class` (paths.Pathmap, which calls this
    from `Pathmap.loads`); every problem found on the way is added to `doc.problems`."""
    if doc.root is None:
        doc.fail(("nodes",), None, "the pathmap is empty; it needs at least `nodes: {A: {host: 127.0.0.1}}`")
    default_name = _default_name(doc.source)
    return read_section(doc, doc.root, (), pathmap_class, defaults={"name": default_name}, origin=doc.origin)


def read_section(doc: Document, node, key: Key, section: type, name: str | None = None,
                 defaults: dict | None = None, keys: Collection[str] | None = None, example: str | None = None,
                 **extra):
    """An instance of `section` (a dataclass with a schema: paths.sections, paths.Pathmap,
    paths.inputs) read from the mapping `node` at `key`, each of its keys as its schema says;
    `name` is a NAMED entry's name, `defaults` replace the schema's (a required key given one is
    not required), `extra` are the values of fields that are not keys. An input that has only
    some of a section's keys names them (`keys`) and its `example` of them."""
    defaults = defaults or {}
    table = [s for s in schema(section) if keys is None or s.name in keys]
    required = {s.name: f"{s.name}: {s.spec.example}" for s in table if s.required and s.name not in defaults}
    f = doc.fields(node, key, [s.name for s in table], required=required, example=example or section.EXAMPLE)
    wanted = [s for s in table if s.spec.wanted]
    if wanted and node is not None and not any(s.name in f for s in wanted):
        doc.fail(key + (wanted[0].name,), node, f"missing; add `{wanted[0].name}: {wanted[0].spec.example}`")
    values = {s.name: _READERS[s.spec.holds](f, s, defaults.get(s.name, s.default)) for s in table}
    return section(**values, **extra) if name is None else section(name, **values, **extra)


def _read_name(f: Fields, s: SectionKey, default):
    if default is MISSING:
        return f.name(s.name)
    return f.name(s.name, default) or default


def _read_template(f: Fields, s: SectionKey, default) -> tuple[str, ...] | str:
    spec = f.node(s.name)
    if spec is None:
        return ()
    return f.names(s.name) if isinstance(spec, yaml.SequenceNode) else f.text(s.name, "")


def _read_name_map(f: Fields, s: SectionKey, default) -> dict[str, str]:
    key = f.key + (s.name,)
    return {name: f.doc.name(value, key + (name,)) for name, value in f.doc.named(f.node(s.name), key, s.spec.example)}


def _read_seconds(f: Fields, s: SectionKey, default):
    value = f.node(s.name)
    if value is None:
        return default
    key = f.key + (s.name,)
    seconds = f.doc.scalar(value, key)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        if seconds is not None:
            f.doc.fail(key, value, f"expected a number of seconds, got {value.value!r}; write e.g. {s.name}: {s.spec.example}")
        return default
    return seconds


def _read_keydir(f: Fields, s: SectionKey, default):
    if s.name not in f:
        return default
    keys = f.text(s.name, "")
    if not keys:
        return keys
    keys = os.path.expanduser(keys)
    source = f.doc.source
    if not os.path.isabs(keys) and not source.startswith("<"):
        # Relative to the pathmap's folder, and absolute from here on: a launcher's snapshot of
        # the pathmap, read from elsewhere, must name the same directory.
        keys = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(source)), keys))
    return keys


def _read_entries(f: Fields, s: SectionKey, default) -> tuple:
    items = f.doc.items(f.node(s.name), f.key + (s.name,), s.spec.example)
    return tuple(read_section(f.doc, item, key, s.spec.section) for key, item in items)


def _read_named(f: Fields, s: SectionKey, default) -> tuple:
    entries = f.doc.named(f.node(s.name), f.key + (s.name,), s.spec.example)
    return tuple(read_section(f.doc, node, f.key + (s.name, name), s.spec.section, name) for name, node in entries)


# How each kind of key (paths.sections) is read: (its fields, its SectionKey, its default) -> its value.
_READERS = {
    NAME: _read_name,
    TEXT: lambda f, s, default: f.text(s.name, "" if default is MISSING else default),
    INTEGER: lambda f, s, default: f.integer(s.name, default),
    BOOLEAN: lambda f, s, default: f.boolean(s.name, default),
    SECONDS: _read_seconds,
    NAMES: lambda f, s, default: f.names(s.name),
    NAME_MAP: _read_name_map,
    PARAMS: lambda f, s, default: f.params(s.name),
    TEMPLATE: _read_template,
    KEYDIR: _read_keydir,
    SECTION: lambda f, s, default: read_section(f.doc, f.node(s.name), f.key + (s.name,), s.spec.section),
    ENTRIES: _read_entries,
    NAMED: _read_named,
}


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

def write(pm, header: str | None = None) -> str:
    """YAML for the pathmap `pm` that `read` reads back to an equal one; `header` becomes leading comments."""
    return Writer().write(pm, header)


class Writer:
    """Writes pathmaps as `write` does, remembering the text of every entry of their named and listed
    sections (nodes, stages, paths, trees, rules...) by the entry itself: a pathmap that shares most
    of its entries with the last one written (an MPI run's, grown by a communicator,
    eventspace.mpi.generate.add_communicator) costs what it gained, laid out as YAML, and a join of
    the rest's text. The text is what PyYAML writes for the whole pathmap at once, byte for byte (each
    entry's own text is PyYAML's, for the new ones of a section in one document, in their place).
    Entries the last pathmap written does not hold are forgotten. One thread at a time."""

    def __init__(self):
        # (keys down to a section) -> {id(entry): (entry, its text)}; the entry is held, so its id stays its own.
        self._known: dict[tuple[str, ...], dict[int, tuple[object, str]]] = {}
        self.laid_out = 0   # entries laid out as YAML over the writer's life (the others' text was known)

    def write(self, pm, header: str | None = None) -> str:
        """YAML for the pathmap `pm`, with `header` as leading comments (what `write` gives)."""
        out = [f"# {line}".rstrip() + "\n" for line in header.splitlines()] if header else []
        known, self._known = self._known, {}
        self._block(pm, (), out, known)
        return "".join(out)

    def _block(self, section, keys: tuple[str, ...], out: list[str], known) -> None:
        """The text of block `section` (its class says FLOW = False) under `keys`, key by key, as
        write_section selects them; the pathmap's sections each after their comment."""
        for s, value in _written(section):
            if not keys and s.spec.doc:
                out.append(f"\n# {s.spec.doc}\n")
            inner = keys + (s.name,)
            indent = "  " * len(keys)
            if s.spec.holds in (NAMED, ENTRIES) and value:
                out.append(f"{indent}{s.name}:\n")
                self._entries(value, s, inner, out, known.get(inner, {}))
            elif s.spec.holds == SECTION and not getattr(type(value), "FLOW", True) and _written(value):
                out.append(f"{indent}{s.name}:\n")
                self._block(value, inner, out, known)
            else:
                out.append(_laid_out(inner, _WRITERS.get(s.spec.holds, _as_is)(value, s), len(inner) - 1))

    def _entries(self, entries, s: SectionKey, keys: tuple[str, ...], out: list[str], known) -> None:
        """The text of the non-empty named or listed section `entries` at `keys`: each entry's text as
        `known` (the last write's, of this section) holds it, or laid out now (all the section's new
        entries in one YAML document). An id `known` holds is its entry's: it holds the entry."""
        # map and zip, not a loop of ours: a large run's pathmap has tens of thousands of entries.
        ids = list(map(id, entries))
        held = list(map(known.get, ids))
        if None in held:
            new = [entry for entry, text in zip(entries, held) if text is None]
            self.laid_out += len(new)
            texts = _items(_laid_out(keys, _WRITERS[s.spec.holds](new, s), len(keys)))
            if len(texts) != len(new):   # entries of one name (no checked pathmap has them): one item for all
                texts = [_laid_out(keys, _WRITERS[s.spec.holds]([entry], s), len(keys)) for entry in new]
            known.update(zip(map(id, new), zip(new, texts)))
            held = list(map(known.__getitem__, ids))
        self._known[keys] = dict(zip(ids, held))
        out.extend(map(_TEXT, held))


_TEXT = operator.itemgetter(1)


def _laid_out(keys: tuple[str, ...], data, skip: int) -> str:
    """What PyYAML writes for `data` at `keys` of a block mapping, without its first `skip` lines (those of the
    keys above it)."""
    for name in reversed(keys):
        data = {name: data}
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True,
                     width=160)
    at = 0
    for _ in range(skip):
        at = text.index("\n", at) + 1
    return text[at:]


def _items(text: str) -> list[str]:
    """`text`, the lines of a block mapping's or sequence's items, item by item: an item begins on a
    line as indented as the first (every further line of one is indented more, or empty)."""
    indent = len(text) - len(text.lstrip(" "))
    items, start, at = [], 0, 0
    while at < len(text):
        end = text.find("\n", at) + 1 or len(text)
        if at > start and end - at > indent + 1 and text[at + indent] != " " and not text[at:at + indent].strip():
            items.append(text[start:at])
            start = at
        at = end
    items.append(text[start:])
    return items


def write_section(entry) -> dict:
    """The YAML mapping of `entry` (a section, or a paths.Pathmap): each key its schema has, in order,
    if it is required, always written, or not its default; on one line unless its class says FLOW = False."""
    out = _Flow() if getattr(type(entry), "FLOW", True) else {}
    for s, value in _written(entry):
        out[s.name] = _WRITERS.get(s.spec.holds, _as_is)(value, s)
    return out


def _written(entry) -> list[tuple[SectionKey, object]]:
    """The keys of `entry` (a section) that its YAML holds, with their values: those its schema requires
    or always writes, and those not at their default."""
    written = []
    for s in schema(type(entry)):
        value = getattr(entry, s.name)
        if s.required or s.spec.always or value != s.default:
            written.append((s, value))
    return written


def _as_is(value, s: SectionKey):
    return value


# How each kind of key that is not written as it is held is written: (value, its SectionKey) -> YAML data.
_WRITERS = {
    NAMES: lambda value, s: _FlowList(value),
    NAME_MAP: lambda value, s: dict(value),
    PARAMS: lambda value, s: dict(value),
    TEMPLATE: lambda value, s: value if isinstance(value, str) else _FlowList(value),
    SECTION: lambda value, s: write_section(value),
    ENTRIES: lambda value, s: [write_section(entry) for entry in value],
    NAMED: lambda value, s: {getattr(entry, label(s.spec.section)): write_section(entry) for entry in value},
}


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
        rule = CommentedMap((s.name, list(getattr(selector, s.name))) for s in schema(Selector)
                            if getattr(selector, s.name))
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
