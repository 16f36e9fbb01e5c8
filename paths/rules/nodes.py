"""The rules of the nodes section, and of the threads and elements placed on the nodes."""

from __future__ import annotations

from ..sections import bound_problems
from .checker import Checker
from .values import template_problem


def check(c: Checker) -> None:
    _check_nodes(c)
    c.unique(c.pm.threads, "threads", "name")
    for thread in c.pm.threads:
        if thread.node not in c.nodes:
            c.unknown(("threads", thread.name, "node"), "node", thread.node, c.nodes)
    _check_elements(c)


def _check_nodes(c: Checker) -> None:
    if not c.pm.nodes:
        c.add(("nodes",), "no nodes; a pathmap needs at least one, e.g. nodes: {A: {host: 127.0.0.1}}")
    c.unique(c.pm.nodes, "nodes", "name")
    endpoints: dict[tuple[str, int], str] = {}
    for node in c.pm.nodes:
        key = ("nodes", node.name)
        if not node.host.strip():
            c.add(key + ("host",), "empty host; give the host name or address the node runs on")
        if node.port and not c.told(key + ("port",)):  # a port out of range is told by the schema
            other = endpoints.setdefault((node.host, node.port), node.name)
            if other != node.name:
                c.add(key + ("port",), f"node {other} already listens on {node.host}:{node.port}; "
                                       "give each node its own port, or 0 to pick a free one")


def _check_elements(c: Checker) -> None:
    c.unique(c.pm.elements, "elements", "name")
    for element in c.pm.elements:
        key = ("elements", element.name)
        if element.node not in c.nodes:
            c.unknown(key + ("node",), "node", element.node, c.nodes)
        problem = template_problem(element.template)
        if problem:
            c.add(key + ("template",), problem)
        for what, problem in bound_problems(element.keep, element.delta):
            c.add(key + (what,), problem)
