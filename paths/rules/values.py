"""Rules about one value (a template, a stage parameter), shared by pathmaps and the generators' inputs."""

from __future__ import annotations

import struct

from pastset.errors import PastSetError
from pastset.template import Template

# Binary records travel whole in every batch; a format like '=99999999999I' must be refused
# before anything expands it.
_MAX_RECORD = 1 << 20


def template_problem(spec) -> str | None:
    """What is wrong with an element template (plain form), or None."""
    if isinstance(spec, str) and spec.startswith("="):
        try:
            size = struct.calcsize(spec)
        except struct.error:
            size = 0  # Template.of below says what is wrong with it
        if size > _MAX_RECORD:
            return (f"invalid template: records of {spec!r} take {size} bytes; a binary record "
                    f"takes at most {_MAX_RECORD} bytes: use fewer or smaller fields")
    try:
        Template.of(list(spec) if isinstance(spec, tuple) else spec)
    except PastSetError as exc:
        told = str(exc)
        if ";" in told:  # pastset's message already says what to do
            return f"invalid template: {told}"
        return (f"invalid template: {told}; write a list of field types such as [int, bytes], "
                "or a struct format starting with '=' such as '=HHIIIIQQ'")
    return None


def is_plain(value) -> bool:
    """True for a value a stage parameter may hold (a number, text, true/false or null)."""
    return value is None or isinstance(value, (int, float, str, bool))
