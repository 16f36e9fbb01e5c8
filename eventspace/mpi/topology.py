"""The topology of an MPI run: which cluster (switch) each host is on, read from a small YAML file."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field

from paths.document import Document, Origin, PathmapError, listing, read_text

# The format (hosts as MPI.Get_processor_name() gives them, or shell-style patterns):
#
#   clusters:
#     rack1: [node01, node02]
#     rack2: ["node1*"]
DEFAULT_CLUSTER = "default"
EXAMPLE = "clusters: {rack1: [node01, node02], rack2: [\"node1*\"]}"


@dataclass(frozen=True)
class Topology:
    """Clusters and the hosts on each (names or fnmatch patterns), in file order; the first
    cluster whose pattern matches a host holds it. No topology: every host in one cluster."""

    clusters: tuple[tuple[str, tuple[str, ...]], ...] = ()
    origin: Origin = field(default=Origin(), compare=False, repr=False)

    @classmethod
    def load(cls, file: str | os.PathLike) -> Topology:
        """Read a topology file; PathmapError (file:line, key, what to write) or OSError."""
        return cls.loads(read_text(file), os.fspath(file))

    @classmethod
    def loads(cls, text: str, source: str = "<string>") -> Topology:
        doc = Document(text, source)
        clusters = []
        if doc.root is not None:
            top = doc.fields(doc.root, (), ("clusters",), required={"clusters": EXAMPLE}, example=EXAMPLE)
            for name, node in doc.named(top.node("clusters"), ("clusters",), "{rack1: [node01, node02]}"):
                hosts = doc.names(node, ("clusters", name))
                if not hosts and not doc.problems:
                    doc.fail(("clusters", name), node, "no hosts; list the hosts of this cluster, e.g. [node01, node02]")
                clusters.append((name, hosts))
            if "clusters" in top and not clusters and not doc.problems:
                doc.fail(("clusters",), top.node("clusters"), f"no clusters; write e.g. {EXAMPLE}")
        elif not doc.problems:
            doc.fail((), None, f"the topology is empty; write e.g. {EXAMPLE}")
        if doc.problems:
            raise PathmapError(doc.problems)
        return cls(tuple(clusters), doc.origin)

    def cluster_of(self, hosts: list[str]) -> dict[str, str]:
        """Host -> cluster for every host given. ValueError naming the hosts no cluster holds."""
        if not self.clusters:
            return {host: DEFAULT_CLUSTER for host in hosts}
        out, lost = {}, []
        for host in dict.fromkeys(hosts):
            found = next((name for name, patterns in self.clusters
                          if any(fnmatch.fnmatchcase(host, p) for p in patterns)), None)
            if found is None:
                lost.append(host)
            out[host] = found
        if lost:
            raise ValueError(f"{self.origin.source}: no cluster holds host{'s' if len(lost) > 1 else ''} "
                             f"{listing(lost)}; add {'them' if len(lost) > 1 else 'it'} under clusters "
                             f"(clusters: {{{self.clusters[0][0]}: [{lost[0]}]}}), or a pattern such as \"*\"")
        return out
