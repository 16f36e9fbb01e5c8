"""SystemMon: every node's newest system summary (CPU, memory, communication per interval), as SESAME showed them."""

from __future__ import annotations

from eventspace import system
from eventspace.scope import EventScope
from eventspace.system import NodeSample

from .scoped import ScopeMon

VIEW = "role:system"


class SystemMon(ScopeMon):
    """Streams the nodes' system summary records (a scope over `role:system` in stream mode; see
    eventspace.system) and keeps each node's newest sample. `poll()` pulls once and returns
    them by node, in the pathmap's order; a node whose sampler is switched off (or that has not
    sampled yet) has none. `missing` names the nodes that did not answer the last poll."""

    def __init__(self, run, *, tree: str = "flat", placement: str = "monitor", timeout: float = 2.0):
        self.scope = EventScope(run, VIEW, mode="stream", tree=tree, placement=placement, timeout=timeout,
                                name="system")
        self.nodes = [n.name for n in self.scope.pathmap.nodes]
        self.newest: dict[str, NodeSample] = {}
        self.missing: set[str] = set()

    def poll(self) -> list[NodeSample]:
        pulled = self.scope.pull()
        self.missing = pulled.missing
        self.newest.update(system.newest(pulled.records, self.scope.catalogue))
        return [self.newest[n] for n in self.nodes if n in self.newest]
