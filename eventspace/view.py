"""Views: selections of trace elements (collectors) by thread, node, cluster, tree point, and their unions and intersections."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from .catalogue import SYSTEM_ROLE, Catalogue, Entry

KINDS = ("all", "collector", "thread", "node", "cluster", "element", "path", "tree", "role")
TREE_ROLES = ("departure", "arrival", "contribute")


class ViewError(ValueError):
    """A view that does not parse, names something the pathmap does not have, or selects nothing."""


@dataclass(frozen=True)
class View:
    """A selection of collectors, as text: terms `KIND:NAME[,NAME...]` joined by `&` (and) and
    `|` (or; `&` binds tighter). Kinds: `all`, `collector:3,4`, `thread:T0`, `node:A`,
    `cluster:c1`, `element:E`, `path:P`, `tree:NAME` or `tree:NAME:departure|arrival|contribute`,
    `role:source|sink|contribute|arrival|departure|stage|system`.
    Example: `node:A & tree:count:arrival | thread:T3`.

    A node's system summary element (role `system`) is chosen only by an alternative that names
    it, by role or by id: `role:system`, `role:system & node:B`, `all | role:system`; `all` and
    `node:B` alone choose collectors.
    """

    text: str
    alternatives: tuple[tuple[tuple[str, tuple[str, ...]], ...], ...]

    @classmethod
    def parse(cls, text: str | View) -> View:
        """The view `text` describes; ViewError saying what to write if it does not parse."""
        if isinstance(text, View):
            return text
        if not isinstance(text, str) or not text.strip():
            raise ViewError("an empty view; write e.g. `all`, `thread:T0` or `node:A & role:source`")
        alternatives = []
        for alternative in text.split("|"):
            terms = []
            for term in alternative.split("&"):
                terms.append(_term(term.strip(), text))
            alternatives.append(tuple(terms))
        return cls(text.strip(), tuple(alternatives))

    def __or__(self, other: View | str) -> View:
        other = View.parse(other)
        return View(f"{self.text} | {other.text}", self.alternatives + other.alternatives)

    def __and__(self, other: View | str) -> View:
        other = View.parse(other)
        combined = tuple(a + b for a in self.alternatives for b in other.alternatives)
        return View(f"({self.text}) & ({other.text})", combined)

    def __str__(self) -> str:
        return self.text

    def select(self, catalogue: Catalogue) -> tuple[Entry, ...]:
        """The collectors in the view, by id; ViewError for an unknown name or an empty selection."""
        for alternative in self.alternatives:
            for kind, values in alternative:
                _check_names(kind, values, catalogue)
        chosen = [e for e in catalogue.entries + catalogue.system
                  if any(_chooses(alt, e) for alt in self.alternatives)]
        if not chosen:
            raise ViewError(f"view {self.text!r} selects no collector of pathmap {catalogue.pathmap.name} "
                            f"({len(catalogue)} collectors); {_hint(catalogue)}")
        return tuple(chosen)


def _term(term: str, text: str) -> tuple[str, tuple[str, ...]]:
    kind, _, rest = term.partition(":")
    kind = kind.strip()
    if kind == "all" and not rest:
        return "all", ()
    if kind not in KINDS:
        close = difflib.get_close_matches(kind, KINDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ViewError(f"view {text!r}: unknown term {term!r}{hint}; terms are KIND:NAME with KIND one of "
                        f"{', '.join(KINDS)}")
    if not rest.strip():
        raise ViewError(f"view {text!r}: {kind} needs a name, e.g. {kind}:{_EXAMPLE[kind]}")
    if kind == "tree":
        name, _, role = rest.partition(":")
        if role and role not in TREE_ROLES:
            raise ViewError(f"view {text!r}: unknown tree point {role!r}; use {', '.join(TREE_ROLES)}")
        return ("tree", (name.strip(), role.strip()))
    values = tuple(v.strip() for v in rest.split(",") if v.strip())
    if kind == "collector":
        try:
            values = tuple(str(int(v)) for v in values)
        except ValueError:
            raise ViewError(f"view {text!r}: collector ids are numbers, e.g. collector:3,4") from None
    return kind, values


_EXAMPLE = {"collector": "3", "thread": "T0", "node": "A", "cluster": "c1", "element": "row_0_1",
            "path": "T0/row_0_1", "tree": "count:arrival", "role": "source"}
_ATTRIBUTE = {"thread": "thread", "node": "node", "cluster": "cluster", "element": "element",
              "path": "path", "role": "role"}


def _chooses(alternative, entry: Entry) -> bool:
    if entry.role == SYSTEM_ROLE and not any(kind in ("role", "collector") for kind, _ in alternative):
        return False
    return all(_matches(entry, kind, values) for kind, values in alternative)


def _matches(entry: Entry, kind: str, values) -> bool:
    if kind == "all":
        return True
    if kind == "collector":
        return str(entry.id) in values
    if kind == "tree":
        name, role = values
        return entry.tree == name and (not role or entry.role == role)
    return getattr(entry, _ATTRIBUTE[kind]) in values


def _known(kind: str, catalogue: Catalogue) -> list[str]:
    pm = catalogue.pathmap
    return {
        "thread": [t.name for t in pm.threads], "node": [n.name for n in pm.nodes],
        "cluster": list(pm.clusters), "element": [e.name for e in pm.elements],
        "path": [p.name for p in pm.paths], "tree": [t.name for t in pm.trees],
        "role": ["source", "sink", "contribute", "arrival", "departure", "stage", SYSTEM_ROLE],
        "collector": [str(e.id) for e in catalogue.entries + catalogue.system],
    }.get(kind, [])


def _check_names(kind, values, catalogue: Catalogue) -> None:
    if kind == "all":
        return
    names = values[:1] if kind == "tree" else values
    known = _known(kind, catalogue)
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {_listing(known)}"
            raise ViewError(f"unknown {kind} {name!r} in pathmap {catalogue.pathmap.name}{hint}")


def _hint(catalogue: Catalogue) -> str:
    if not catalogue.entries:
        return "the pathmap has no collectors: instrument it (`eventspace pathmap instrument FILE --all`)"
    roles = sorted({e.role for e in catalogue.entries})
    threads = sorted({e.thread for e in catalogue.entries if e.thread})
    return (f"its collectors are at roles {', '.join(roles)}"
            + (f", on threads {_listing(threads)}" if threads else ""))


def _listing(names, most=8) -> str:
    names = list(names)
    return ", ".join(names[:most]) + (f", ... ({len(names) - most} more)" if len(names) > most else "")
