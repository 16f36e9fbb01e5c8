"""The rules of a pathmap's settings: allow_modules, clock, security and liveness."""

from __future__ import annotations

from urllib.parse import urlsplit

from pastset.client import check_grace
from pastset.errors import PastSetError
from pastset.security import problems as key_problems

from ..registry import is_module_name
from ..sections import CLOCK_SCHEMES
from .checker import Checker


def check(c: Checker) -> None:
    pm = c.pm
    for i, module in enumerate(pm.allow_modules):
        if not is_module_name(module):
            c.add(("allow_modules", i), f"{module!r} is not a module name; write a dotted "
                                        "module name such as mylib.wrappers")
    _check_clock(c)
    _check_security(c)
    try:
        check_grace(pm.liveness.grace)
    except PastSetError as exc:
        c.add(("liveness", "grace"), f"{exc}; write e.g. grace: 30")


def _check_clock(c: Checker) -> None:
    clock = c.pm.clock
    if not (isinstance(clock.samples, int) and clock.samples >= 1):
        c.add(("clock", "samples"), f"samples must be at least 1, got {clock.samples!r}; "
                                    "write e.g. samples: 8")
    if clock.reference is not None and clock.reference not in c.nodes:
        c.unknown(("clock", "reference"), "node", clock.reference, c.nodes)
    if clock.scheme not in CLOCK_SCHEMES:
        c.add(("clock", "scheme"), f"unknown clock scheme {clock.scheme!r}; use {' or '.join(CLOCK_SCHEMES)} "
                                   "(direct: the monitor asks every node; tree: each cluster's first node asks "
                                   "the others, the monitor asks the first nodes)")


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
