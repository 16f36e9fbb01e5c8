"""A Linda facade over PastSet: out, in_, rd, inp, rdp with wildcard templates."""

from __future__ import annotations

from .errors import Timeout

ANY = object()
"""A wildcard that matches any value in a pattern (as does a type: `int` matches any int)."""

_TYPE_NAMES = {int: "int", float: "float", str: "str", bytes: "bytes", bool: "bool"}


class Linda:
    """Linda's tuple-space verbs on a `TupleServer` or a `connect`ed client.

    Tuples of each arity live in one typed element (`<prefix>/<arity>`, fields of type any),
    so `out` is a move and `in_` a matching take. A pattern holds values (matched by
    equality), types (`int`, `str`, ...: any value of that type) or `ANY`.
    `in_` and `rd` block (up to `timeout` seconds, then Timeout); `inp` and `rdp` never
    block and return None when nothing matches.
    """

    def __init__(self, space, prefix: str = "linda"):
        self._space = space
        self._prefix = prefix
        self._elements = {}

    def out(self, *values) -> None:
        self._element(len(values)).move(values)

    def in_(self, *pattern, timeout: float | None = None) -> tuple:
        return self._element(len(pattern)).find(_encode(pattern), True, timeout)

    def rd(self, *pattern, timeout: float | None = None) -> tuple:
        return self._element(len(pattern)).find(_encode(pattern), False, timeout)

    def inp(self, *pattern) -> tuple | None:
        return self._try(pattern, True)

    def rdp(self, *pattern) -> tuple | None:
        return self._try(pattern, False)

    def _try(self, pattern, remove):
        try:
            return self._element(len(pattern)).find(_encode(pattern), remove, 0)
        except Timeout:
            return None

    def _element(self, arity):
        element = self._elements.get(arity)
        if element is None:
            element = self._space.enter(f"{self._prefix}/{arity}", ["any"] * arity)
            self._elements[arity] = element
        return element


def _encode(pattern):
    """The element-level pattern: (1, type name) for wildcards, (0, value) for actual values."""
    if not pattern:
        raise TypeError("a Linda tuple needs at least one field")
    out = []
    for value in pattern:
        if value is ANY:
            out.append((1, "any"))
        elif isinstance(value, type) and value in _TYPE_NAMES:
            out.append((1, _TYPE_NAMES[value]))
        else:
            out.append((0, value))
    return out
