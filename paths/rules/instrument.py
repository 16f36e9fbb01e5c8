"""The rules of the instrument section: its location, and collector rules that select something (its
keep's bound is the schema's: paths.sections)."""

from __future__ import annotations

from ..document import listing, suggest
from ..instrument import PATH_ROLES, ROLES, TREE_ROLES, roles_of, select
from .checker import Checker


def check(c: Checker) -> None:
    instrument = c.pm.instrument
    key = ("instrument",)
    if instrument.location != "local" and instrument.location not in c.nodes:
        c.add(key + ("location",), f"unknown location {instrument.location!r}; use local "
                                   f"(each collector's own node) or a node: {listing(c.nodes)}")
    tables = {"paths": c.paths, "threads": c.threads, "nodes": c.nodes,
              "elements": c.elements, "trees": c.trees, "stages": c.stages}
    for i, selector in enumerate(instrument.collectors):
        skey = key + ("collectors", i)
        before = len(c.problems)
        if not any(getattr(selector, f) for f in ("at", *tables)):
            c.add(skey, "selects nothing; name points and what to pick them from, e.g. "
                        "{at: [source]} for every path")
            continue
        if selector.stages and any(getattr(selector, f) for f in ("at", *tables) if f != "stages"):
            c.add(skey + ("stages",), "stages stands alone; put the other names in a rule of their own")
        for j, role in enumerate(selector.at):
            if role not in ROLES:
                c.add(skey + ("at", j), f"unknown point {role!r}{suggest(role, ROLES)}; "
                                        f"use {', '.join(ROLES)}")
        for field_name, table in tables.items():
            for j, name in enumerate(getattr(selector, field_name)):
                if name not in table:
                    c.unknown(skey + (field_name, j), field_name[:-1], name, table)
        roles = set(roles_of(selector))
        if selector.trees and roles <= set(PATH_ROLES):
            c.add(skey + ("trees",), "trees pick tree points, but at: names only path points; "
                                     f"add tree points to at: {', '.join(TREE_ROLES)}")
        if (selector.paths or selector.elements) and roles <= set(TREE_ROLES):
            c.add(skey + ("at",), "paths and elements pick path points, but at: names only tree "
                                  f"points; add path points to at: {', '.join(PATH_ROLES)}")
        if len(c.problems) == before and not select(c.pm, selector):
            c.add(skey, "selects no collector point; check that its names go together "
                        "(e.g. that the thread uses the element)")
