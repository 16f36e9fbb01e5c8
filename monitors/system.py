"""SystemMon: every node's newest system summary (CPU, memory, communication per interval), as SESAME showed them."""

from __future__ import annotations

from dataclasses import dataclass, field

from eventspace import system
from eventspace.scope import EventScope
from eventspace.system import NodeSample

from .scoped import ScopeMon

VIEW = "role:system"


@dataclass(frozen=True)
class SystemReport:
    """Each node's newest system summary, in the pathmap's order (a node whose sampler is switched
    off, or that has not sampled yet, has none), and the nodes that did not answer the read."""

    nodes: tuple[NodeSample, ...]
    missing: frozenset[str] = field(default_factory=frozenset)

    def as_dict(self) -> dict:
        return {"nodes": [node.as_dict() for node in self.nodes], "missing": sorted(self.missing)}


class SystemMon(ScopeMon):
    """Streams the nodes' system summary records (a scope over `role:system` in stream mode; see
    eventspace.system) and keeps each node's newest sample. `read()` pulls once and reports them
    (SystemReport). `missing` names the nodes that did not answer the last read."""

    def __init__(self, run, *, tree: str = "flat", placement: str = "monitor", timeout: float = 2.0):
        self.scope = EventScope(run, VIEW, mode="stream", tree=tree, placement=placement, timeout=timeout,
                                name="system")
        self.nodes = [n.name for n in self.scope.pathmap.nodes]
        self.newest: dict[str, NodeSample] = {}
        self.missing: set[str] = set()

    def read(self) -> SystemReport:
        pulled = self.scope.pull()
        self.missing = pulled.missing
        self.newest.update(system.newest(pulled.records, self.scope.catalogue))
        return SystemReport(tuple(self.newest[n] for n in self.nodes if n in self.newest), frozenset(pulled.missing))
