"""The pathmap of an MPI run: ranks as nodes and threads, communicators as elements and trees."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from paths import AppMap, ClusterMap, Instrument, Node, Pathmap, Placement, Selector, generate
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
    if instrument not in INSTRUMENT:
        raise ValueError(f"unknown instrumentation {instrument!r}; use {', '.join(INSTRUMENT)}")
    ranks = [node_name(r) for r in range(len(hosts))]
    cluster = ClusterMap(tuple(Node(node_name(r), host=host, port=0, cluster=clusters[host])
                               for r, host in enumerate(hosts)))
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


def collector_ids(catalogue, comm: int, rank: int) -> tuple[int, int]:
    """(point-to-point collector id, collective collector id) of `rank` on communicator `comm`;
    0 for a kind the run does not collect."""
    name, thread = comm_name(comm), node_name(rank)
    p2p = next((e.id for e in catalogue if e.role == "source" and e.path == f"{thread}/{name}"), 0)
    coll = next((e.id for e in catalogue if e.role == "contribute" and e.tree == name
                 and e.thread == thread), 0)
    return p2p, coll
