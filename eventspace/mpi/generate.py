"""The pathmap of an MPI run: ranks as nodes and threads, communicators as elements and trees."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
from dataclasses import dataclass

from paths import AppMap, ClusterMap, Instrument, Node, Pathmap, Placement, Selector, Thread, generate
from paths.inputs import AppElement, AppTree

from .encoding import comm_name
from .options import DEFAULT_KEEP, INSTRUMENT


@dataclass(frozen=True)
class Communicator:
    """A communicator of the run: `id` (0 is COMM_WORLD, then in the order they were made),
    its members' world ranks in communicator-rank order, and how it was made."""

    id: int
    members: tuple[int, ...]
    how: str


def node_name(rank: int) -> str:
    """Rank K is node `rK` and thread `rK`."""
    return f"r{rank}"


def run_pathmap(name: str, hosts: list[str], clusters: dict[str, str], comms: list[Communicator],
                instrument: str = "all", keep: int = DEFAULT_KEEP) -> Pathmap:
    """The pathmap of a run of len(hosts) ranks: node and thread `rK` per rank (on its host, in its
    host's cluster); per communicator C, an element `commC` (on its rank 0's node; it holds
    nothing: it names the medium its members' messages go through) with a path `rK/commC` from
    every member, and a tree `commC` (flat, its members in communicator-rank order).

    Collectors (`instrument`: all, p2p, collectives, none): the source of every path `rK/commC`
    (rank K's point-to-point calls on C) and the contribute point of every member of tree
    `commC` (its collectives on C). The instrument section has one rule per communicator and
    kind, in communicator order, so a communicator declared later appends its collectors after
    all others: collector ids never change while the run goes on.
    """
    cluster = ClusterMap(tuple(Node(node_name(r), host=host, port=0, cluster=clusters[host])
                               for r, host in enumerate(hosts)))
    return _comms_pathmap(name, cluster, comms, instrument, keep)


def _comms_pathmap(name: str, cluster: ClusterMap, comms, instrument: str, keep: int) -> Pathmap:
    """run_pathmap, over the run's nodes as they are given."""
    if instrument not in INSTRUMENT:
        raise ValueError(f"unknown instrumentation {instrument!r}; use {', '.join(INSTRUMENT)}")
    ranks = [n.name for n in cluster.nodes]
    members = [tuple(node_name(r) for r in c.members) for c in comms]
    app = AppMap(tuple(ranks),
                 tuple(AppElement(comm_name(c.id), ("int",), m, keep=1) for c, m in zip(comms, members)),
                 tuple(AppTree(comm_name(c.id), "allreduce", m) for c, m in zip(comms, members)))
    pathmap = generate(app, cluster, Placement(threads={r: r for r in ranks}), "flat", name=name)
    rules = []
    for c in comms:
        if instrument in ("all", "p2p"):
            rules.append(Selector(at=("source",), elements=(comm_name(c.id),)))
        if instrument in ("all", "collectives"):
            rules.append(Selector(at=("contribute",), trees=(comm_name(c.id),)))
    return dataclasses.replace(pathmap, instrument=Instrument(keep=keep, collectors=tuple(rules), system=False))


@dataclass(frozen=True)
class Extension:
    """A run's pathmap grown by one communicator (see `add_communicator`).

    `pathmap` is the run's pathmap with the communicator: what run_pathmap gives for the longer
    list. `part` is the communicator alone over the run's nodes and threads (what run_pathmap
    gives for it alone): its element, its members' paths, its tree, its instrument rules; its
    collectors are the ones the run gains, in their order (eventspace.catalogue.Catalogue.extended
    numbers them after the run's).
    """

    pathmap: Pathmap
    part: Pathmap


def add_communicator(pathmap: Pathmap, comm: Communicator, instrument: str = "all") -> Extension:
    """The run's `pathmap` (one run_pathmap made with `instrument`, or that this grew) with
    communicator `comm`, the next one of the run, added: its element and tree after the others,
    its members' paths after each member's others, its rules after the others; so its
    collectors come after all others and no id changes. ValueError if `comm` is not the next.

    It costs what the communicator holds, not what the run holds: the old pathmap's parts are
    shared, never laid out or checked again (`part` was, as run_pathmap checks every pathmap).
    """
    if comm.id != len(pathmap.elements):
        raise ValueError(f"communicator {comm.id} is not the next of run {pathmap.name} "
                         f"(it has {len(pathmap.elements)})")
    part = _comms_pathmap(pathmap.name, ClusterMap(pathmap.nodes), [comm], instrument, pathmap.instrument.keep)
    thread_at = {t.name: i for i, t in enumerate(pathmap.threads)}

    def stage_order(stage) -> tuple[int, int]:
        # paths.generate lays stages out as: element stages, then the paths' remote stages
        # (THREAD/ELEMENT/remote) thread by thread, then the trees' stages tree by tree.
        if stage.type == "element":
            return 0, 0
        thread = thread_at.get(stage.id.partition("/")[0]) if stage.type == "remote" else None
        return (1, thread) if thread is not None else (2, 0)

    grown = dataclasses.replace(
        pathmap,
        elements=pathmap.elements + part.elements,
        stages=_merged(pathmap.stages, part.stages, stage_order),
        paths=_merged(pathmap.paths, part.paths, lambda path: thread_at[path.thread]),   # thread by thread
        trees=pathmap.trees + part.trees,
        instrument=dataclasses.replace(pathmap.instrument,
                                       collectors=pathmap.instrument.collectors + part.instrument.collectors))
    return Extension(grown, part)


def add_ranks(pathmap: Pathmap, places: list[tuple[str, str]]) -> Pathmap:
    """The run's `pathmap` with the next ranks (a Spawn's processes), one per (host, cluster) of
    `places`, added: node and thread `rK` each, after the others. Nothing else changes: their
    collectors come with the communicators they are members of (`add_communicator`)."""
    first = len(pathmap.nodes)
    nodes = tuple(Node(node_name(first + i), host=host, port=0, cluster=cluster)
                  for i, (host, cluster) in enumerate(places))
    return dataclasses.replace(pathmap, nodes=pathmap.nodes + nodes,
                               threads=pathmap.threads + tuple(Thread(n.name, n.name) for n in nodes))


def _merged(old: tuple, new: tuple, order) -> tuple:
    """`old` with each item of `new` after the last item of `old` that is not after it by `order`
    (both are in `order`): a binary search per new item, the old items copied, never looked at."""
    pieces, start = [], 0
    for item in new:
        end = bisect.bisect_right(old, order(item), lo=start, key=order)
        pieces += (old[start:end], (item,))
        start = end
    pieces.append(old[start:])
    return tuple(itertools.chain.from_iterable(pieces))


def collector_ids(catalogue, comm: int, rank: int) -> tuple[int, int]:
    """(point-to-point collector id, collective collector id) of `rank` on communicator `comm`
    in the catalogue of a run's pathmap; 0 for a kind the run does not collect.

    Found by a binary search, not a scan: the run's collectors come communicator by communicator
    (its rules are in communicator order), and each one's element_id is its communicator's id
    (the index of its element `commC`, or of its tree `commC`)."""
    entries, thread = catalogue.entries, node_name(rank)
    first = bisect.bisect_left(entries, comm, key=_element_id)
    block = entries[first:bisect.bisect_right(entries, comm, lo=first, key=_element_id)]
    p2p = next((e.id for e in block if e.role == "source" and e.thread == thread), 0)
    coll = next((e.id for e in block if e.role == "contribute" and e.thread == thread), 0)
    return p2p, coll


_element_id = operator.attrgetter("element_id")
