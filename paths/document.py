"""Reading YAML into typed values, with every problem named by its file, line and key path."""

from __future__ import annotations

import difflib
import errno
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path as FilePath

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# libyaml's parser is several times faster than the pure-Python one, and its nodes carry the
# same line marks; a 140-thread pathmap must load in well under a second.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NULL = "tag:yaml.org,2002:null"

# Bounds on every YAML input (pathmaps, application, cluster and application-to-cluster maps),
# checked before PyYAML builds anything, so that a hostile or mistaken file costs seconds, not
# gigabytes. What reading costs goes with its YAML nodes (scalars, lists, mappings), not its bytes:
# PyYAML's composer takes some 370 bytes a node, and a pathmap file has about 136,000 nodes a MiB
# (74 MB a MiB at the peak), but `[a,a,a]` has 524,288. So a file holds at most one node for every
# NODE_BYTES of the size limit: by default 16 MiB and 1,048,576 nodes, 4 times
# pathmaps/windtunnel-64node.yaml (1.8 MiB, 1,024 threads, 244,247 nodes). Raise both with the
# environment variable.
MAX_BYTES_ENV = "EVENTSPACE_YAML_MAX_BYTES"
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
NODE_BYTES = 16
# A pathmap nests 6 levels; PyYAML's C composer recurses per level and crashes near 30,000.
MAX_DEPTH = 100
_TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep; a YAML input here needs a handful of levels: remove the extra nesting"
# An alias (`*name`, or a merge `<<: *name`) stands for everything under its anchor, and PyYAML
# copies merged entries: 556 bytes of nested merges expand to 43 million entries. All the aliases
# of one file may stand for at most this many YAML nodes (scalars, lists, mappings).
MAX_ALIAS_NODES = 100_000

# A key path: mapping keys (str) and list indices (int) from the top of the document.
Key = tuple


def key_text(key: Key) -> str:
    """`('paths', 'T0/e', 'stages', 1)` -> `paths.T0/e.stages[1]`."""
    text = ""
    for part in key:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def suggest(word: str, choices: Iterable[str]) -> str:
    """' (did you mean 'X'?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def listing(names: Iterable[str], most: int = 8) -> str:
    """Names for a message: the first `most`, then how many more."""
    names = list(names)
    if not names:
        return "(none)"
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown}, ... ({len(names) - most} more)"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input. `what` says what is wrong, then (after ';') what to do."""

    source: str
    line: int | None
    key: str
    what: str

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.key}: {self.what}"


class PathmapError(ValueError):
    """A pathmap, or an input of a generator, is invalid.

    `problems` holds every problem found (not only the first), each once, ordered by line; the
    message is one `FILE:LINE: key.path: what is wrong; what to do` line per problem, the first
    SHOWN of them, then `… and N more problems`.
    """

    SHOWN = 100

    def __init__(self, problems: Iterable[Problem]):
        # An alias repeats its anchor's problems at the anchor's line: tell each one once.
        self.problems = tuple(sorted(dict.fromkeys(problems), key=lambda p: p.line or 0))
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        """The message's lines: the first SHOWN problems, then how many more there are."""
        lines = [str(p) for p in self.problems[:self.SHOWN]]
        hidden = len(self.problems) - self.SHOWN
        if hidden > 0:
            lines.append(f"… and {hidden:,} more problem{'s' if hidden != 1 else ''}")
        return lines


def max_bytes() -> int:
    """The largest YAML input read, in bytes: $EVENTSPACE_YAML_MAX_BYTES, else DEFAULT_MAX_BYTES."""
    value = os.environ.get(MAX_BYTES_ENV)
    if value is None:
        return DEFAULT_MAX_BYTES
    try:
        limit = int(value.replace("_", ""))
    except ValueError:
        limit = 0
    if limit <= 0:
        raise ValueError(f"{MAX_BYTES_ENV}={value!r} is not a positive whole number of bytes; "
                         f"write e.g. {MAX_BYTES_ENV}={4 * DEFAULT_MAX_BYTES}")
    return limit


def _size_problem(size: int, source: str) -> Problem | None:
    limit = max_bytes()
    if size <= limit:
        return None
    return Problem(source, None, "(file)", f"{size:,} bytes, more than the {limit:,} bytes a YAML input may have; "
                                           f"split it, or raise the limit with {MAX_BYTES_ENV}=BYTES")


def read_text(file: str | os.PathLike) -> str:
    """A YAML input's text. OSError if it cannot be read, also (EILSEQ, naming the file) if it is not UTF-8 text;
    PathmapError, before reading it, if it is larger than `max_bytes()`."""
    path = FilePath(file)
    try:
        problem = _size_problem(path.stat().st_size, os.fspath(file))
    except OSError:
        problem = None  # read_text below says what is wrong with the file, in its own words
    if problem is not None:
        raise PathmapError([problem])
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise OSError(errno.EILSEQ, f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
                                    "give a YAML file", os.fspath(file)) from None


@dataclass(frozen=True)
class Origin:
    """Where a model was read from: the source (a file path) and the line of each key path."""

    source: str = "<generated>"
    lines: Mapping = field(default_factory=dict)

    def line(self, key: Key) -> int | None:
        """The line of `key`, or of its nearest parent that was read; None if built in code."""
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return self.lines.get(())

    def problem(self, key: Key, what: str) -> Problem:
        return Problem(self.source, self.line(key), key_text(key), what)


class Document:
    """One YAML text being read into typed values.

    Every reader takes a YAML node and its key path and returns the typed value; when the value
    is wrong it records a Problem and returns a fallback, so that reading goes on and all the
    problems of a file are found in one pass. A node of None means the key was absent.
    """

    def __init__(self, text: str, source: str):
        self.source = source
        self.problems: list[Problem] = []
        self.lines: dict[Key, int] = {}
        self._constructor = yaml.constructor.SafeConstructor()
        self.root = self._compose(text)

    @property
    def origin(self) -> Origin:
        return Origin(self.source, self.lines)

    def _compose(self, text: str) -> Node | None:
        # A str's UTF-8 size is between 1 and 4 bytes per character: encode only when in doubt.
        size = len(text) if len(text) * 4 <= max_bytes() else len(text.encode("utf-8", "surrogatepass"))
        problem = _size_problem(size, self.source)
        try:
            problem = problem or _bounds_problem(text, self.source)
            if problem is not None:
                self.problems.append(problem)
                return None
            return yaml.compose(text, Loader=_LOADER)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
            if mark is not None:
                line = mark.line + 1
            elif isinstance(exc, yaml.reader.ReaderError):
                line = text.count("\n", 0, exc.position) + 1
            else:
                line = None
            what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            if "nesting depth" in what:   # libyaml's own limit (PyYAML >= 6.0.3), far above ours
                self.problems.append(Problem(self.source, line, "(yaml)", _TOO_DEEP))
                return None
            self.problems.append(Problem(self.source, line, "(yaml)",
                                         f"YAML syntax error: {what}; fix the YAML at this line"))
            return None

    def fail(self, key: Key, node: Node | None, what: str) -> None:
        """Record a problem at `key`, on the line of `node` (or of the nearest key read)."""
        line = node.start_mark.line + 1 if node is not None else self.origin.line(key)
        self.problems.append(Problem(self.source, line, key_text(key), what))

    def _mark(self, key: Key, node: Node) -> None:
        self.lines.setdefault(key, node.start_mark.line + 1)

    # -- collections -------------------------------------------------------------------------

    def _pairs(self, node: Node | None, key: Key, example: str) -> list[tuple[str, Node, Node]]:
        """(name, key node, value node) of a mapping; duplicate and non-name keys are problems."""
        if node is None:
            return []
        if not isinstance(node, MappingNode):
            self.fail(key, node, f"expected a mapping, got {_kind(node)}; write e.g. {example}")
            return []
        self._mark(key, node)
        try:
            self._constructor.flatten_mapping(node)  # so that `<<: *defaults` merges work
        except yaml.YAMLError as exc:
            self.fail(key, node, f"{getattr(exc, 'problem', exc)}; merge (<<) only mappings")
            return []
        pairs, seen = [], {}
        for knode, vnode in node.value:
            if not isinstance(knode, ScalarNode) or knode.tag == _NULL or not knode.value.strip():
                self.fail(key, knode, f"a key must be a name, got {_kind(knode)}; write e.g. {example}")
                continue
            name = knode.value
            if name in seen:
                self.fail(key + (name,), knode,
                          f"duplicate key {name!r} (first at line {seen[name]}); each name may appear once: "
                          "rename or remove one of them")
                continue
            seen[name] = knode.start_mark.line + 1
            self._mark(key + (name,), knode)
            pairs.append((name, knode, vnode))
        return pairs

    def fields(self, node: Node | None, key: Key, keys: Collection[str],
               required: Mapping[str, str] | None = None, example: str = "{key: value}") -> Fields:
        """The entries of a mapping with fixed keys. Unknown keys (with a close match suggested),
        duplicates and missing `required` keys (key -> an example of it) are problems."""
        entries = {}
        for name, knode, vnode in self._pairs(node, key, example):
            if name not in keys:
                self.fail(key + (name,), knode,
                          f"unknown key {name!r}{suggest(name, keys)}; the keys here are {listing(keys, 12)}")
            else:
                entries[name] = vnode
        if node is not None and isinstance(node, MappingNode):
            for name, sample in (required or {}).items():
                if name not in entries:
                    self.fail(key + (name,), node, f"missing; add `{sample}`")
        return Fields(self, key, entries)

    def named(self, node: Node | None, key: Key, example: str) -> list[tuple[str, Node]]:
        """(name, value node) of a mapping from names to entries (nodes, threads, stages...)."""
        return [(name, vnode) for name, _, vnode in self._pairs(node, key, example)]

    def items(self, node: Node | None, key: Key, example: str) -> list[tuple[Key, Node]]:
        """(key path, node) of each item of a list."""
        if node is None:
            return []
        if not isinstance(node, SequenceNode):
            self.fail(key, node, f"expected a list, got {_kind(node)}; write e.g. {example}")
            return []
        self._mark(key, node)
        out = []
        for i, item in enumerate(node.value):
            self._mark(key + (i,), item)
            out.append((key + (i,), item))
        return out

    # -- scalars -----------------------------------------------------------------------------

    def name(self, node: Node, key: Key) -> str:
        """A name (of a node, thread, stage...): its text exactly as written; '' if not a name."""
        if not isinstance(node, ScalarNode) or node.tag == _NULL or not node.value.strip():
            self.fail(key, node, f"expected a name, got {_kind(node)}; write the name of what it refers to")
            return ""
        self._mark(key, node)
        return node.value

    def names(self, node: Node, key: Key) -> tuple[str, ...]:
        """A list of names; bad items are problems and left out."""
        out = []
        for item_key, item in self.items(node, key, "[A, B]"):
            name = self.name(item, item_key)
            if name:
                out.append(name)
        return tuple(out)

    def scalar(self, node: Node, key: Key):
        """A plain value as YAML resolves it (int, float, str, bool, None); None after a problem."""
        if not isinstance(node, ScalarNode):
            self.fail(key, node, f"expected a plain value, got {_kind(node)}; write a number, text or true/false")
            return None
        self._mark(key, node)
        try:
            value = self._constructor.construct_object(node)
        except (yaml.YAMLError, ValueError) as exc:
            self.fail(key, node, f"cannot read {node.value!r}: {exc}; write a plain number, text or true/false")
            return None
        if value is not None and not isinstance(value, (int, float, str, bool)):
            # YAML turns some text into dates or sets; a pathmap has no use for them.
            self.fail(key, node, f"{node.value!r} reads as a {type(value).__name__}; quote it if it is text")
            return None
        return value

    def typed(self, node: Node, key: Key, kind: type, fallback, what: str):
        """A value of `kind` (int, str or bool); `what` describes it in the message."""
        value = self.scalar(node, key)
        # bool is an int in Python; a count must not silently take `true`.
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if not ok:
            if isinstance(node, ScalarNode):  # scalar() already told of any other kind of node
                self.fail(key, node, f"expected {what}, got {node.value!r}; write {what}")
            return fallback
        return value


class Fields:
    """The entries of one mapping with fixed keys, read by type. An absent optional key gives
    `default`; an absent required key (already told by `Document.fields`) gives the fallback."""

    def __init__(self, doc: Document, key: Key, entries: dict[str, Node]):
        self.doc = doc
        self.key = key
        self.entries = entries

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def node(self, name: str) -> Node | None:
        return self.entries.get(name)

    def name(self, name: str, default: str = "") -> str:
        if name not in self.entries:
            return default
        return self.doc.name(self.entries[name], self.key + (name,))

    def names(self, name: str) -> tuple[str, ...]:
        if name not in self.entries:
            return ()
        return self.doc.names(self.entries[name], self.key + (name,))

    def integer(self, name: str, default: int | None = 0) -> int | None:
        if name not in self.entries:
            return default
        return self.doc.typed(self.entries[name], self.key + (name,), int, default, "a whole number")

    def text(self, name: str, default: str = "") -> str:
        if name not in self.entries:
            return default
        return self.doc.typed(self.entries[name], self.key + (name,), str, default, "text")

    def boolean(self, name: str, default: bool = False) -> bool:
        if name not in self.entries:
            return default
        return self.doc.typed(self.entries[name], self.key + (name,), bool, default, "true or false")

    def params(self, name: str) -> dict:
        """A mapping of plain values or lists of plain values (a stage's parameters)."""
        out = {}
        for pname, pnode in self.doc.named(self.entries.get(name), self.key + (name,), "{size: 16}"):
            pkey = self.key + (name, pname)
            if isinstance(pnode, SequenceNode):
                values = [self.doc.scalar(item, item_key)
                          for item_key, item in self.doc.items(pnode, pkey, "[a, b]")]
                out[pname] = values
            else:
                out[pname] = self.doc.scalar(pnode, pkey)
        return out


def _bounds_problem(text: str, source: str) -> Problem | None:
    """A Problem if the YAML has more than a node for every NODE_BYTES of `max_bytes()`, nests deeper
    than MAX_DEPTH, if its aliases stand for more than MAX_ALIAS_NODES nodes, or if an alias is inside
    what it names; None if it is within bounds.

    Reads the parser's events (libyaml keeps its own stack: no recursion, no nodes built) and
    counts what composing and reading would do, without doing it. YAMLError for bad syntax.
    """
    open_: list[list] = []          # per open list or mapping: [anchor, nodes under it, height]
    closed: dict[str, tuple[int, int]] = {}   # anchor -> (nodes, height) of what it names
    aliased = 0                     # nodes that aliases stand for, beyond the alias itself
    left = max_bytes() // NODE_BYTES   # nodes the file may have

    def refuse(event, what: str) -> Problem:
        return Problem(source, event.start_mark.line + 1, "(yaml)", what)

    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.NodeEvent):
            left -= 1
            if left < 0:
                limit = max_bytes() // NODE_BYTES
                return refuse(event, f"more than {limit:,} YAML nodes (scalars, lists, mappings), one for every "
                                     f"{NODE_BYTES} bytes of the {max_bytes():,}-byte size limit (each takes some "
                                     f"370 bytes to read); split the file, or raise the limit with "
                                     f"{MAX_BYTES_ENV}=BYTES")
        if isinstance(event, yaml.CollectionStartEvent):
            if len(open_) >= MAX_DEPTH:
                return refuse(event, _TOO_DEEP)
            open_.append([event.anchor, 1, 1])
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, nodes, height = open_.pop()
            if anchor is not None:
                closed[anchor] = (nodes, height)
        elif isinstance(event, yaml.ScalarEvent):
            nodes, height = 1, 1
            if event.anchor is not None:
                closed[event.anchor] = (1, 1)
        elif isinstance(event, yaml.AliasEvent):
            if any(frame[0] == event.anchor for frame in open_):
                return refuse(event, f"alias *{event.anchor} is inside what &{event.anchor} names, so it "
                                     "contains itself; refer to it only after it ends")
            nodes, height = closed.get(event.anchor, (1, 1))  # an unknown anchor: the composer tells
            aliased += nodes - 1
            if aliased > MAX_ALIAS_NODES:
                return refuse(event, f"aliases (*name, <<: *name) stand for more than {MAX_ALIAS_NODES:,} "
                                     "YAML nodes, each copying what its anchor names; write the entries "
                                     "out, or nest fewer aliases inside aliases")
            if len(open_) + height > MAX_DEPTH:
                return refuse(event, f"alias *{event.anchor} nests more than {MAX_DEPTH} levels deep; "
                                     "a YAML input here needs a handful of levels: remove the extra nesting")
        else:
            continue
        if open_:
            frame = open_[-1]
            frame[1] += nodes
            frame[2] = max(frame[2], height + 1)
    return None


def _kind(node: Node | None) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if node is None or node.tag == _NULL:
        return "nothing"
    return repr(node.value)
