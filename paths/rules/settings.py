"""The rules of a pathmap's settings: allow_modules, the clock's reference node, security (the bounds of
the clock's samples and scheme and of the liveness grace are the schema's: paths.sections)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pastset.security import problems as key_problems

from ..registry import is_module_name
from .checker import Checker


def check(c: Checker) -> None:
    pm = c.pm
    for i, module in enumerate(pm.allow_modules):
        if not is_module_name(module):
            c.add(("allow_modules", i), f"{module!r} is not a module name; write a dotted "
                                        "module name such as mylib.wrappers")
    reference = pm.clock.reference
    if reference is not None and reference not in c.nodes:
        c.unknown(("clock", "reference"), "node", reference, c.nodes)
    _check_security(c)


def _check_security(c: Checker) -> None:
    for i, endpoint in enumerate(c.pm.security.join_endpoints):
        parts = urlsplit(endpoint) if isinstance(endpoint, str) else None
        if parts is None or not (parts.scheme == "tcp" and parts.hostname and _port(parts)
                                 or parts.scheme == "ipc" and len(endpoint) > len("ipc://")):
            c.add(("security", "join_endpoints", i), f"{endpoint!r} is not an endpoint; write tcp://HOST:PORT "
                                                     "or ipc://PATH")
    keys = c.pm.security.keys
    if keys is None:
        return
    if not isinstance(keys, str) or not keys.strip():
        c.add(("security", "keys"), f"keys must name a key directory, got {keys!r}; "
                                    "write e.g. keys: path/to/keydir")
        return
    # Every node serves and connects with these keys: it needs all of them.
    for what in key_problems(keys, serve=True):
        c.add(("security", "keys"), what)


def _port(parts) -> int | None:
    try:
        return parts.port
    except ValueError:   # not a number, or out of range
        return None
