"""What a pathmap is made of: its nodes, threads, elements, stages, paths and trees, and its settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import pastset
from pastset.client import GRACE
from pastset.security import default as default_security

if TYPE_CHECKING:
    import networkx as nx

# Each trace element's discard threshold (tuples) when the instrument section names none.
DEFAULT_KEEP = 200
# The most a node's clock may be shifted either way (ns; 146 years): collectors add the offset to
# their clock's reading (below 2^62) in 64 bits (eventspace/collector_c/ holds the same bound).
MAX_CLOCK_OFFSET_NS = 1 << 62


@dataclass(frozen=True)
class Node:
    """A node server process: where it listens (port 0: a free one, picked at start) and the
    cluster it belongs to. `clock_offset_ns` shifts its clock, to test clock synchronisation (at
    most MAX_CLOCK_OFFSET_NS either way)."""

    name: str
    host: str = "127.0.0.1"
    port: int = 0
    cluster: str = "default"
    clock_offset_ns: int = 0


@dataclass(frozen=True)
class Thread:
    """An application thread, run inside the process of `node`."""

    name: str
    node: str


@dataclass(frozen=True)
class ElementSpec:
    """A tuple element on `node`. `template` is a tuple of field types (int, float, str, bytes,
    bool, any) or a binary struct format starting with '='. `keep` (discard all but the newest
    n) and `delta` (moves block while n tuples are held) are tuple counts, at most one set."""

    name: str
    node: str
    template: tuple[str, ...] | str
    keep: int | None = None
    delta: int | None = None


@dataclass(frozen=True)
class Stage:
    """One stage instance: a wrapper of `type` running on `node`. `params` hold plain values
    (numbers, text, booleans, lists of them). A stage id used by several paths is one instance."""

    id: str
    type: str
    node: str
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Path:
    """The route from a thread to an element: stage ids, first on the thread's node, last the
    element's `element` stage; where consecutive stages change node, the first is `remote`."""

    name: str
    thread: str
    element: str
    stages: tuple[str, ...]


@dataclass(frozen=True)
class Tree:
    """A collective over member threads, its stages joined child -> parent up to `root`.

    `members` maps each member thread (in order) to the stage it enters the tree by, on the
    member's own node; `edges` maps each stage below the root to its parent. An edge between
    two nodes starts at a `remote` stage. `shape` records how it was laid out (`flat`,
    `kary:K`, `knomial:K`, `per-node`, `per-cluster`, or `custom` for a hand-made tree).
    """

    name: str
    kind: str
    root: str
    members: dict[str, str]
    edges: dict[str, str]
    shape: str = "custom"

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

    samples: int = 8
    drift: bool = False
    reference: str | None = None
    scheme: str = "direct"


@dataclass(frozen=True)
class Liveness:
    """How long, in seconds, a node whose connection is open but who does not answer (paused,
    swapping, a busy host) is waited for, by the launcher, the other nodes and monitors, before
    the run gives up on it. A node whose process ended or whose connection closed is gone at
    once, whatever the grace."""

    grace: float = GRACE


@dataclass(frozen=True)
class SecuritySpec:
    """CURVE for the run: `keys` is a key directory (`eventspace keys generate DIR`) that every
    node serves and connects with; None: the process's keys ($EVENTSPACE_KEYS), or plaintext.
    A relative `keys` in a pathmap file is read relative to the file's folder.

    `join_endpoints`: addresses (`tcp://HOST:PORT`, `ipc://PATH`) at which a scope join placed on
    one of the run's nodes may reach another node when the monitor that places it says so (a
    relay, another interface). Without them a node reaches the others only where the run says
    they listen, whatever a client names (see eventspace.space.NodeSpace.install)."""

    keys: str | None = None
    join_endpoints: tuple[str, ...] = ()

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

    at: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    threads: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    elements: tuple[str, ...] = ()
    trees: tuple[str, ...] = ()
    stages: tuple[str, ...] = ()


@dataclass(frozen=True)
class Instrument:
    """The instrument section. `keep` is each trace element's discard threshold (tuples);
    `location` is where trace elements live: `local` (the collector's own node) or a node name;
    `system`: whether each node samples its system summary (eventspace.system)."""

    keep: int = DEFAULT_KEEP
    location: str = "local"
    collectors: tuple[Selector, ...] = ()
    system: bool = True
