"""The bounds the schema (paths.sections) sets on each key's value, checked on every section of a pathmap."""

from __future__ import annotations

from collections.abc import Iterator

from ..document import Key
from ..sections import ENTRIES, NAMED, SECTION, checked, label, schema
from .checker import Checker


def check(c: Checker) -> None:
    for key, what in key_problems(c.pm):
        c.add(key, what)


def key_problems(entry, key: Key = ()) -> Iterator[tuple[Key, str]]:
    """(key path, what is wrong; what to do) for each value of `entry` (a section, or a whole
    pathmap at key path ()) and of the sections within it that breaks its KeySpec's bound."""
    for s in schema(type(entry)):
        value = getattr(entry, s.name)
        if s.spec.check is not None:
            problem = s.spec.check(value)
            if problem:
                yield key + (s.name,), problem
        elif s.spec.section is None or not checked(s.spec.section):
            continue
        elif s.spec.holds == SECTION:
            yield from key_problems(value, key + (s.name,))
        elif s.spec.holds == ENTRIES:
            for i, item in enumerate(value):
                yield from key_problems(item, key + (s.name, i))
        elif s.spec.holds == NAMED:
            name = label(s.spec.section)
            for item in value:
                yield from key_problems(item, key + (s.name, getattr(item, name)))
