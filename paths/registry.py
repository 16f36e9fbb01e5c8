"""The wrapper type names a pathmap may use: built-ins, entry points, and allowed user modules."""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib.metadata import entry_points

# Packages above `paths` (eventspace's `collector`) contribute wrapper types through this
# entry-point group, so that `paths` never imports them.
GROUP = "eventspace.wrappers"

BUILTIN_TYPES = frozenset({
    "element", "remote", "buffer", "reduce", "gather", "filter", "sort", "convert", "barrier",
    "broadcast",
})

# The kinds of tree, and the wrapper type of each kind's joins: the stages of a tree that wait
# for one contribution per child and combine them.
JOIN_TYPE_OF_KIND = {"allreduce": "reduce", "reduce": "reduce", "broadcast": "broadcast",
                     "barrier": "barrier", "gather": "gather"}
TREE_KINDS = tuple(JOIN_TYPE_OF_KIND)
JOIN_TYPES = frozenset(JOIN_TYPE_OF_KIND.values())

_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")


def registered_types() -> frozenset[str]:
    """Every wrapper type known by name: the built-ins and the names of GROUP's entry points.

    Entry points are named, never loaded: validating a pathmap imports no wrapper code.
    """
    return BUILTIN_TYPES | frozenset(entry_points(group=GROUP).names)


def is_module_name(text: str) -> bool:
    """True for a dotted module name such as `pkg.sub`."""
    return bool(_MODULE.match(text))


def split_reference(reference: str) -> tuple[str, str] | None:
    """`('pkg.mod', 'Name')` for a user reference `pkg.mod:Name`, None if it is not one."""
    module, sep, attr = reference.partition(":")
    if not sep or not is_module_name(module) or not is_module_name(attr):
        return None
    return module, attr


def module_allowed(module: str, allow_modules: Iterable[str]) -> bool:
    """True if `module`, or a package it belongs to, is listed in `allow_modules`."""
    return any(module == m or module.startswith(m + ".") for m in allow_modules)
