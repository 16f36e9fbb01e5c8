"""What a pathmap is made of: its nodes, threads, elements, stages, paths and trees, and its settings.

The pathmap's schema is written here once, as the metadata of the sections' fields (`key`): each
field with a `KeySpec` is the YAML key of its name, and its KeySpec says what it holds, its example, the
bound its value must keep, and whether it is written when it holds its default. paths.pathmap_yaml
reads and writes every section from it, and paths.rules checks its bounds (`KeySpec.check`); a field
without a KeySpec (an entry's name, a pathmap's origin) is not a key of its own. Each section
class also says, as class attributes, its `EXAMPLE` (for "write e.g." in messages about the
section) and, if it is written as a block rather than on one line, `FLOW = False`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from functools import cache, cached_property
from typing import TYPE_CHECKING, ClassVar

import pastset
from pastset.checks import BOTH_BOUNDS, count_problem
from pastset.checks import bound_problems as element_bounds
from pastset.client import GRACE, check_grace
from pastset.errors import PastSetError
from pastset.security import default as default_security

if TYPE_CHECKING:
    import networkx as nx

# Each trace element's discard threshold (tuples) when the instrument section names none.
DEFAULT_KEEP = 200
# The most a node's clock may be shifted either way (ns; 146 years): collectors add the offset to
# their clock's reading (below 2^62) in 64 bits (eventspace/collector_c/ holds the same bound).
MAX_CLOCK_OFFSET_NS = 1 << 62

# -- the schema -----------------------------------------------------------------------------------

# What a key holds, which says how it is read and written (paths.pathmap_yaml): a NAME (of a node,
# a thread...; an empty one is the default), TEXT, an INTEGER, a BOOLEAN, SECONDS (a number), NAMES
# (a list of names), a NAME_MAP (names to names), PARAMS (names to plain values or lists of them),
# a TEMPLATE (a list of field types or a struct format), a KEYDIR (a directory, relative to the
# pathmap's folder), or a section of its own: a SECTION (one mapping of keys), ENTRIES (a list of
# them) or NAMED entries (a mapping from names to them).
NAME, TEXT, INTEGER, BOOLEAN, SECONDS, NAMES, NAME_MAP, PARAMS, TEMPLATE, KEYDIR = (
    "name", "text", "integer", "boolean", "seconds", "names", "name map", "params", "template", "keydir")
SECTION, ENTRIES, NAMED = "section", "entries", "named"


@dataclass(frozen=True)
class KeySpec:
    """One YAML key of a section: what it `holds` (a kind above); `example`, a value for messages
    (a required key's "missing; add `key: example`", a NAME_MAP's, ENTRIES' or NAMED key's "write
    e.g. example" when it is not a mapping or list); `check`,
    the bound its value keeps (value -> what is wrong and what to do, or None); `always`: written
    even when it holds its default (else only when it differs); `section`, the dataclass of a
    SECTION's, ENTRIES' or NAMED key's entries; `wanted`: a section written without any of its
    wanted keys lacks the first; `doc`, the comment written above a top-level section."""

    holds: str
    example: str | None = None
    check: Callable[[object], str | None] | None = None
    always: bool = False
    section: type | None = None
    wanted: bool = False
    doc: str = ""


def key(holds: str, default=MISSING, *, default_factory=MISSING, kw_only: bool = False, **spec) -> Field:
    """A dataclass field that is a YAML key (see KeySpec)."""
    return field(default=default, default_factory=default_factory, kw_only=kw_only,
                 metadata={"key": KeySpec(holds, **spec)})


@dataclass(frozen=True)
class SectionKey:
    """One field of a section as a YAML key: its `name`, its KeySpec (`spec`), and its `default`
    (MISSING: the key is required)."""

    name: str
    spec: KeySpec
    default: object

    @property
    def required(self) -> bool:
        return self.default is MISSING


@cache
def schema(section: type) -> tuple[SectionKey, ...]:
    """The YAML keys of a section's dataclass, in the order they are read, written and listed."""
    out = []
    for f in fields(section):
        if "key" in f.metadata:
            default = f.default if f.default_factory is MISSING else f.default_factory()
            out.append(SectionKey(f.name, f.metadata["key"], default))
    return tuple(out)


@cache
def checked(section: type) -> bool:
    """True if a key of `section`, or of a section within it, has a bound (`KeySpec.check`)."""
    return any(s.spec.check is not None or (s.spec.section is not None and checked(s.spec.section))
               for s in schema(section))


@cache
def label(section: type) -> str | None:
    """The field that holds a NAMED entry's name (its mapping key): its first field that is not a key."""
    return next((f.name for f in fields(section) if "key" not in f.metadata and f.init), None)


CLOCK_SAMPLES = 1000   # at most, per node and estimate: a node's clock exchanges for one caller


def _samples_problem(samples) -> str | None:
    if isinstance(samples, int) and not isinstance(samples, bool) and 1 <= samples <= CLOCK_SAMPLES:
        return None
    return f"samples must be 1 to {CLOCK_SAMPLES}, got {samples!r}; write e.g. samples: 8"


def _port_problem(port) -> str | None:
    if isinstance(port, int) and not isinstance(port, bool) and 0 <= port <= 65535:
        return None
    return f"port {port!r} is out of range; use 1-65535, or 0 to pick a free port at start"


def _clock_offset_problem(offset) -> str | None:
    if -MAX_CLOCK_OFFSET_NS <= offset <= MAX_CLOCK_OFFSET_NS:
        return None
    return (f"clock offset {offset} ns is beyond +-2^62 ns (146 years), the most a node's clock is "
            "shifted by; give a smaller one")


def _grace_problem(grace) -> str | None:
    try:
        check_grace(grace)
    except PastSetError as exc:
        return f"{exc}; write e.g. grace: 30"
    return None


def tuples_problem(value, what: str) -> str | None:
    """What is wrong with a count of tuples (pastset's rule, pastset.checks), and what to write."""
    problem = count_problem(value, what)
    return f"{problem}; write e.g. {what}: 2" if problem else None


def bound_problems(keep, delta) -> list[tuple[str, str]]:
    """(`keep` or `delta`, what is wrong and what to write) for an element's bounds: pastset's rule
    (pastset.checks.bound_problems), told as a pathmap or an application map says it."""
    return [(what, problem if problem is BOTH_BOUNDS else f"{problem}; write e.g. {what}: 2")
            for what, problem in element_bounds(keep, delta)]


@dataclass(frozen=True)
class Node:
    """A node server process: where it listens (port 0: a free one, picked at start) and the
    cluster it belongs to. `clock_offset_ns` shifts its clock, to test clock synchronisation (at
    most MAX_CLOCK_OFFSET_NS either way)."""

    EXAMPLE: ClassVar[str] = "{host: 127.0.0.1, port: 0, cluster: c1}"

    name: str
    host: str = key(TEXT, "127.0.0.1", always=True)
    port: int = key(INTEGER, 0, always=True, check=_port_problem)
    cluster: str = key(NAME, "default", always=True)
    clock_offset_ns: int = key(INTEGER, 0, check=_clock_offset_problem)


@dataclass(frozen=True)
class Thread:
    """An application thread, run inside the process of `node`."""

    EXAMPLE: ClassVar[str] = "{node: A}"

    name: str
    node: str = key(NAME, example="A")


@dataclass(frozen=True)
class ElementSpec:
    """A tuple element on `node`. `template` is a tuple of field types (int, float, str, bytes,
    bool, any) or a binary struct format starting with '='. `keep` (discard all but the newest
    n) and `delta` (moves block while n tuples are held) are tuple counts, at most one set
    (pastset.checks.bound_problems, the rule pastset keeps too)."""

    EXAMPLE: ClassVar[str] = "{node: A, template: [int, bytes], delta: 2}"

    name: str
    node: str = key(NAME, example="A")
    template: tuple[str, ...] | str = key(TEMPLATE, example="[int, bytes]")
    keep: int | None = key(INTEGER, None)
    delta: int | None = key(INTEGER, None)


@dataclass(frozen=True)
class Stage:
    """One stage instance: a wrapper of `type` running on `node`. `params` hold plain values
    (numbers, text, booleans, lists of them). A stage id used by several paths is one instance."""

    EXAMPLE: ClassVar[str] = "{type: buffer, node: A, params: {size: 16}}"

    id: str
    type: str = key(NAME, example="remote")
    node: str = key(NAME, example="A")
    params: dict = key(PARAMS, default_factory=dict, example="{size: 16}")


@dataclass(frozen=True)
class Path:
    """The route from a thread to an element: stage ids, first on the thread's node, last the
    element's `element` stage; where consecutive stages change node, the first is `remote`."""

    EXAMPLE: ClassVar[str] = "{thread: T0, element: row, stages: [row/element]}"

    name: str
    thread: str = key(NAME, example="T0")
    element: str = key(NAME, example="row")
    stages: tuple[str, ...] = key(NAMES, example="[row/element]")


@dataclass(frozen=True)
class Tree:
    """A collective over member threads, its stages joined child -> parent up to `root`.

    `members` maps each member thread (in order) to the stage it enters the tree by, on the
    member's own node; `edges` maps each stage below the root to its parent. An edge between
    two nodes starts at a `remote` stage. `shape` records how it was laid out (`flat`,
    `kary:K`, `knomial:K`, `per-node`, `per-cluster`, or `custom` for a hand-made tree).
    """

    EXAMPLE: ClassVar[str] = "{kind: allreduce, root: count/root, members: {T0: count/root}}"
    FLOW: ClassVar[bool] = False   # written as a block: its members and edges are long

    name: str
    kind: str = key(NAME, example="allreduce")
    shape: str = key(TEXT, "custom", always=True, kw_only=True)
    root: str = key(NAME, example="count/root")
    members: dict[str, str] = key(NAME_MAP, example="{T0: count/root}")
    edges: dict[str, str] = key(NAME_MAP, default_factory=dict, always=True, example="{count/A: count/root}")

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

    def cycle(self) -> tuple[str, ...] | None:
        """The stages of a loop the edges make (each stage's edge leads to the next, the last's
        back to the first), or None: the first found from the stages in `stage_ids` order."""
        done: set[str] = set()
        for start in self.stage_ids:
            walked: dict[str, int] = {}
            stage = start
            while stage is not None and stage not in done:
                if stage in walked:
                    return tuple(list(walked)[walked[stage]:])
                walked[stage] = len(walked)
                stage = self.edges.get(stage)
            done.update(walked)
        return None

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
        import networkx as nx  # here, not at import: node processes never need it (25 MB of RSS each)
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


CLOCK_SCHEMES = ("direct", "tree")


@dataclass(frozen=True)
class Clock:
    """Clock synchronisation: `samples` NTP-style exchanges per node (the one with the least
    delay counts), a second round for `drift`, offsets relative to `reference` (default: the
    first node). `scheme`: "direct" (the monitor asks every node) or "tree" (MRNet's two phases:
    each cluster's first node asks the rest of its cluster, the monitor asks the first nodes, and
    the offsets add up; see eventspace.clock)."""

    EXAMPLE: ClassVar[str] = "{samples: 8, drift: false, scheme: direct}"

    samples: int = key(INTEGER, 8, always=True, check=_samples_problem)
    drift: bool = key(BOOLEAN, False, always=True)
    reference: str | None = key(NAME, None)
    scheme: str = key(NAME, "direct", check=lambda scheme: None if scheme in CLOCK_SCHEMES else (
        f"unknown clock scheme {scheme!r}; use {' or '.join(CLOCK_SCHEMES)} (direct: the monitor asks every node; "
        "tree: each cluster's first node asks the others, the monitor asks the first nodes)"))


@dataclass(frozen=True)
class Liveness:
    """How long, in seconds, a node whose connection is open but who does not answer (paused,
    swapping, a busy host) is waited for, by the launcher, the other nodes and monitors, before
    the run gives up on it. A node whose process ended or whose connection closed is gone at
    once, whatever the grace."""

    EXAMPLE: ClassVar[str] = "{grace: 30}"

    grace: float = key(SECONDS, GRACE, example="30", check=_grace_problem)


@dataclass(frozen=True)
class SecuritySpec:
    """CURVE for the run: `keys` is a key directory (`eventspace keys generate DIR`) that every
    node serves and connects with; None: the process's keys ($EVENTSPACE_KEYS), or plaintext.
    A relative `keys` in a pathmap file is read relative to the file's folder.

    `join_endpoints`: addresses (`tcp://HOST:PORT`, `ipc://PATH`) at which a scope join placed on
    one of the run's nodes may reach another node when the monitor that places it says so (a
    relay, another interface). Without them a node reaches the others only where the run says
    they listen, whatever a client names (see eventspace.space.NodeSpace.install)."""

    EXAMPLE: ClassVar[str] = "{keys: path/to/keydir}"

    keys: str | None = key(KEYDIR, None, example="path/to/keydir", wanted=True)
    join_endpoints: tuple[str, ...] = key(NAMES, (), wanted=True)

    def load(self) -> pastset.Security:
        """The keys to serve and connect with: the directory's, else the process's
        (`pastset.security.default`). AuthError if they are not usable."""
        return pastset.Security.load(self.keys) if self.keys is not None else default_security()



@dataclass(frozen=True)
class Selector:
    """One rule of the instrument section: which collector points it picks (paths.instrument
    does the picking).

    `at` names roles (paths.instrument.ROLES); path roles pick from the paths, tree roles from
    the trees. Each non-empty name list narrows the choice (an item matches if it is in the
    list): `paths`, `threads` (the path's thread, or the contributing member: a rule naming
    threads picks no arrival or departure points), `elements`, `trees`, and `nodes` (the node
    the point's stage runs on). `stages` instead names stage ids outright (role `stage`: a
    collector in front of that stage) and stands alone. `at` defaults to `source` for a rule
    without trees and to every tree role for a rule with them.
    """

    EXAMPLE: ClassVar[str] = "{threads: [T0], at: [source]}"

    at: tuple[str, ...] = key(NAMES, ())
    paths: tuple[str, ...] = key(NAMES, ())
    threads: tuple[str, ...] = key(NAMES, ())
    nodes: tuple[str, ...] = key(NAMES, ())
    elements: tuple[str, ...] = key(NAMES, ())
    trees: tuple[str, ...] = key(NAMES, ())
    stages: tuple[str, ...] = key(NAMES, ())


@dataclass(frozen=True)
class Instrument:
    """The instrument section. `keep` is each trace element's discard threshold (tuples);
    `location` is where trace elements live: `local` (the collector's own node) or a node name;
    `system`: whether each node samples its system summary (eventspace.system)."""

    EXAMPLE: ClassVar[str] = f"{{keep: {DEFAULT_KEEP}, location: local, collectors: [{{at: [source]}}]}}"
    FLOW: ClassVar[bool] = False

    keep: int = key(INTEGER, DEFAULT_KEEP, always=True, check=lambda keep: tuples_problem(keep, "keep"))
    location: str = key(NAME, "local", always=True)
    collectors: tuple[Selector, ...] = key(ENTRIES, (), always=True, section=Selector, example="[{at: [source]}]")
    system: bool = key(BOOLEAN, True)
