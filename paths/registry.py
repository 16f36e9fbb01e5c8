"""The wrapper type names a pathmap may use: built-ins, entry points, and allowed user modules."""

from __future__ import annotations

import functools
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


# Programs (what a node runs in each application thread) register under this group by name;
# a pathmap may also name `module:function` from one of its allow_modules.
PROGRAMS = "eventspace.programs"
# Packages above `paths` (eventspace) add services to every node server through this group:
# each entry point is a function called with the starting node (see paths.node.NodeServer).
NODE_SERVICES = "eventspace.node_services"


def load_reference(reference: str, allow_modules: Iterable[str], group: str, what: str):
    """The object a pathmap names: an entry point of `group`, or `module:attr` from an allowed module.

    Raises LookupError saying what to do when the name is unknown or its module not allowed.
    """
    if ":" not in reference:
        found = _entry_point(group, reference)
        if found is None:
            known = sorted(entry_points(group=group).names)
            raise LookupError(f"unknown {what} {reference!r}; use one of {', '.join(known) or '(none installed)'}, "
                              "or module:name from a module in the pathmap's allow_modules")
        return found
    parts = split_reference(reference)
    if parts is None:
        raise LookupError(f"{reference!r} is not a {what} reference; write module.sub:name")
    module, attr = parts
    if not module_allowed(module, allow_modules):
        raise LookupError(f"module {module!r} is not listed in the pathmap's allow_modules; "
                          f"add `allow_modules: [{module}]` if you trust it")
    import importlib

    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@functools.lru_cache(maxsize=None)
def _entry_point(group: str, name: str):
    """The object entry point `name` of `group` names, or None (entry point scans are slow: once each)."""
    found = entry_points(group=group, name=name)
    return next(iter(found)).load() if found else None


def wrapper_class(type_name: str, allow_modules: Iterable[str]):
    """The class of wrapper type `type_name`: a built-in, an entry point, or an allowed `module:Class`."""
    from .collective import BUILTIN as JOINS
    from .wrapper import BUILTIN

    cls = BUILTIN.get(type_name) or JOINS.get(type_name)
    if cls is not None:
        return cls
    return load_reference(type_name, allow_modules, GROUP, "wrapper type")
