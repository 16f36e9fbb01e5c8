"""What a pathmap may name as code: built-in wrapper types, entry points, and `module:name` from allowed modules."""

from __future__ import annotations

import functools
import importlib
import re
import sys
import types
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
# What may follow the ':' of a reference: one plain name. No dots, because `json:codecs.sys` would
# walk from an allowed module into any module it imported; no dunder names (`__builtins__`,
# `__loader__`), which every module has and none defines for a pathmap.
_NAME = re.compile(r"(?!__)[A-Za-z_]\w*\Z")
# The one way to write a reference, for messages.
REFERENCE_FORM = "module:name (pkg.sub:name for a submodule), one name defined in that module"


def installed(group: str):
    """The entry points of `group`: from one read of every installed package's metadata per search
    path (a read scans all of them: about 10 ms, which a starting node would otherwise pay per group)."""
    return _every_entry_point(tuple(sys.path)).select(group=group)


@functools.lru_cache(maxsize=4)
def _every_entry_point(search_path: tuple[str, ...]):
    return entry_points()


def registered_types() -> frozenset[str]:
    """Every wrapper type known by name: the built-ins and the names of GROUP's entry points.

    Entry points are named, never loaded: validating a pathmap imports no wrapper code.
    """
    return BUILTIN_TYPES | frozenset(installed(GROUP).names)


def is_module_name(text: str) -> bool:
    """True for a dotted module name such as `pkg.sub`."""
    return bool(_MODULE.match(text))


def split_reference(reference: str) -> tuple[str, str] | None:
    """`('pkg.mod', 'name')` for a user reference `pkg.mod:name`, None if it is not one.

    `name` is one plain name: `json:codecs.sys` and `json:__builtins__` are not references.
    """
    module, sep, name = reference.partition(":")
    if not sep or not is_module_name(module) or not _NAME.match(name):
        return None
    return module, name


def module_allowed(module: str, allow_modules: Iterable[str]) -> bool:
    """True if `module` itself is listed in `allow_modules`.

    Listing a package does not allow its submodules: each module a pathmap names is listed.
    """
    return module in tuple(allow_modules)


def reference_problem(reference: str, allow_modules: Iterable[str], what: str) -> str | None:
    """What is wrong with the user reference `module:name` (and what to do), or None.

    The check a pathmap's validation makes: it looks at the text only and imports nothing.
    """
    parts = split_reference(reference)
    if parts is None:
        name = reference.partition(":")[2]
        if "." in name:
            return (f"{reference!r} follows a chain of attributes ({name!r}); name a {what} defined in "
                    f"the module itself: write {REFERENCE_FORM}, and list that module in allow_modules")
        return f"{reference!r} is not a {what} reference; write {REFERENCE_FORM}"
    module = parts[0]
    if module_allowed(module, allow_modules):
        return None
    listed = [m for m in allow_modules if module.startswith(m + ".")]
    hint = f" (listing its package {listed[0]!r} does not allow its submodules)" if listed else ""
    return (f"module {module!r} is not listed in allow_modules{hint}, and a pathmap imports no other; "
            f"add `allow_modules: [{module}]` if you trust it")


# Programs (what a node runs in each application thread) register under this group by name;
# a pathmap may also name `module:function` from one of its allow_modules.
PROGRAMS = "eventspace.programs"
# Packages above `paths` (eventspace) add services to every node server through this group:
# each entry point is a function called with the starting node (see paths.node.NodeServer).
NODE_SERVICES = "eventspace.node_services"


def load_reference(reference: str, allow_modules: Iterable[str], group: str, what: str):
    """The object a pathmap names: an entry point of `group`, or `module:name` from an allowed module.

    This is the only place where a name from a pathmap, a scope stage or a command line becomes
    code. `module` must be listed in `allow_modules` itself, and `name` must be one plain name
    (see `reference_problem`) bound in that module to a class or function defined there: its
    `__module__` is the module's. A module object, something the module merely imported
    (`json:codecs`, `programs:Wrapper`), a builtin, or a value without `__module__` (module-level
    data such as a dict or a number) is refused: a pathmap names code, not data. A callable
    instance of a class defined in the module counts as defined there.

    Raises LookupError saying what to do when the name is unknown, its module not allowed, or
    it names something the module does not define; ImportError if the module does not import.
    """
    if ":" not in reference:
        found = _entry_point(group, reference)
        if found is None:
            known = sorted(installed(group).names)
            raise LookupError(f"unknown {what} {reference!r}; use one of {', '.join(known) or '(none installed)'}, "
                              "or module:name from a module in the pathmap's allow_modules")
        return found
    problem = reference_problem(reference, allow_modules, what)
    if problem is not None:
        raise LookupError(problem)
    module_name, name = split_reference(reference)
    module = importlib.import_module(module_name)
    # The module's own namespace, not getattr: a module-level __getattr__ could hand out anything.
    obj = vars(module).get(name, _ABSENT)
    if obj is _ABSENT:
        raise LookupError(f"module {module_name!r} defines no {name!r}; name a {what} defined there")
    if (isinstance(obj, types.ModuleType) or not callable(obj)
            or getattr(obj, "__module__", None) != module.__name__):
        source = getattr(obj, "__module__", None)
        kind = ("a module" if isinstance(obj, types.ModuleType) else
                f"imported from {source!r}" if isinstance(source, str) and callable(obj) else
                f"a {type(obj).__name__} value")
        raise LookupError(f"{reference!r} is {kind}, not a {what} defined in module {module_name!r}; "
                          "name one defined there, or list the module that defines it in allow_modules")
    return obj


_ABSENT = object()


@functools.lru_cache(maxsize=None)
def _entry_point(group: str, name: str):
    """The object entry point `name` of `group` names, or None (entry point scans are slow: once each)."""
    found = installed(group).select(name=name)
    return next(iter(found)).load() if found else None


def wrapper_class(type_name: str, allow_modules: Iterable[str]):
    """The class of wrapper type `type_name`: a built-in, an entry point, or an allowed `module:Class`."""
    from .collective import BUILTIN as JOINS
    from .wrapper import BUILTIN

    cls = BUILTIN.get(type_name) or JOINS.get(type_name)
    if cls is not None:
        return cls
    return load_reference(type_name, allow_modules, GROUP, "wrapper type")
