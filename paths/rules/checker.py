"""One pass of the rules over a pathmap: what it has found so far, and how problems are told."""

from __future__ import annotations

from ..document import Key, listing, suggest


class Checker:
    """The problems found in one pathmap (a paths.Pathmap), as (key path, message), in the order
    the rules find them, with the lookup tables every rule reads (`nodes`, `threads`,
    `elements`, `stages`, `paths`, `trees`: the pathmap's index, by name) and what earlier rules
    learnt for later ones (`tree_of`, `bad_type`)."""

    def __init__(self, pm):
        self.pm = pm
        self.problems: list[tuple[Key, str]] = []
        index = pm.index
        self.nodes, self.threads, self.elements = index.nodes, index.threads, index.elements
        self.stages, self.paths, self.trees = index.stages, index.paths, index.trees
        self.tree_of: dict[str, str] = {}  # stage id -> the tree it belongs to
        # Stages whose type is already reported: what a path does with them is not judged.
        self.bad_type: set[str] = set()

    def add(self, key: Key, what: str) -> None:
        self.problems.append((key, what))

    def told(self, key: Key) -> bool:
        """True if a problem at `key` was found already."""
        return any(told == key for told, _ in self.problems)

    def placed(self, *things) -> bool:
        """True if every thing's node is known: where one is not, that is reported once, and
        comparing nodes would only repeat it."""
        return all(thing.node in self.nodes for thing in things)

    def unknown(self, key: Key, what: str, name: str, known) -> None:
        self.add(key, f"unknown {what} {name!r}{suggest(name, known)}; "
                      f"use one of the pathmap's {what}s: {listing(known)}")

    def unique(self, items, section: str, attr: str) -> None:
        """Duplicates can only come from a pathmap built in code: YAML keys are checked on reading."""
        seen = set()
        for item in items:
            name = getattr(item, attr)
            if name in seen:
                self.add((section, name), f"duplicate name {name!r}; give each its own name")
            seen.add(name)
