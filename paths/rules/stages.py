"""The rules of the stages section: wrapper types, parameters, functions, filters, element stages."""

from __future__ import annotations

from ..document import Key, listing, suggest
from ..expression import ExpressionError
from ..registry import reference_problem, registered_types
from ..wrapper import Filter
from .checker import Checker
from ..sections import tuples_problem
from .values import is_plain


def check(c: Checker) -> None:
    c.unique(c.pm.stages, "stages", "id")
    types = registered_types()
    for stage in c.pm.stages:
        key = ("stages", stage.id)
        if not _check_type(c, stage.type, key + ("type",), types):
            c.bad_type.add(stage.id)
        if stage.node not in c.nodes:
            c.unknown(key + ("node",), "node", stage.node, c.nodes)
        params = stage.params
        for name, value in params.items():
            if not (is_plain(value) or (isinstance(value, list) and all(map(is_plain, value)))):
                c.add(key + ("params", name), f"{value!r} is not a plain value; parameters are "
                                              "numbers, text, true/false, or lists of them")
        if stage.type == "element":
            _check_element_stage(c, stage, key)
        fn = params.get("fn")
        if fn is not None:
            _check_function(c, fn, key + ("params", "fn"))
        if stage.type == "convert" and "fn" not in params:
            c.add(key + ("params",), "a convert stage needs a function; add params: {fn: module:function}")
        if stage.type == "filter":
            _check_filter(c, params, key + ("params",))
        if stage.type == "buffer" and "size" in params and tuples_problem(params["size"], "size"):
            c.add(key + ("params", "size"), tuples_problem(params["size"], "size"))


def _check_type(c: Checker, type_name: str, key: Key, types: frozenset[str]) -> bool:
    """True if the type is one the pathmap may use."""
    if ":" in type_name:
        problem = reference_problem(type_name, c.pm.allow_modules, "wrapper type")
        if problem is not None:
            c.add(key, problem)
            return False
    elif type_name not in types:
        c.add(key, f"unknown wrapper type {type_name!r}{suggest(type_name, types)}; use one of "
                   f"{listing(sorted(types), 20)}, or module:Class from a module in allow_modules")
        return False
    return True


def _check_function(c: Checker, fn, key: Key) -> None:
    if not isinstance(fn, str):
        c.add(key, f"{fn!r} is not a function name; write a built-in name (sum, min, max, count) "
                   "or module:function")
        return
    if ":" not in fn:
        return  # a built-in name; the wrapper that uses it knows its own
    problem = reference_problem(fn, c.pm.allow_modules, "function")
    if problem is not None:
        c.add(key, problem)


def _check_filter(c: Checker, params: dict, key: Key) -> None:
    """The parse the filter stage makes when its node builds it (paths.wrapper.Filter.parse)."""
    if not isinstance(params.get("where"), str):
        c.add(key, "a filter stage needs an expression; add params: {where: f0 > 0}")
        return
    try:
        Filter.parse(params)
    except ExpressionError as exc:
        c.add(key + ("where",), str(exc))


def _check_element_stage(c: Checker, stage, key: Key) -> None:
    name = stage.params.get("element")
    if name is None:
        c.add(key + ("params",), "an element stage needs the element it ends at; "
                                 "add params: {element: NAME}")
    elif not isinstance(name, str):
        c.add(key + ("params", "element"), f"{name!r} is not an element name; write element: NAME")
    elif name not in c.elements:
        c.unknown(key + ("params", "element"), "element", str(name), c.elements)
    elif c.placed(stage, c.elements[name]) and c.elements[name].node != stage.node:
        home = c.elements[name].node
        c.add(key + ("node",), f"element {name} is on node {home}, but its stage runs on "
                               f"{stage.node}; an element stage runs on its element's node: node: {home}")
