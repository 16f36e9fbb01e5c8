"""The in-process transport: `local://NAME` names a TupleServer of this process, and its client calls it directly."""

from __future__ import annotations

import itertools
import threading

from . import protocol as p
from . import transport
from .deferred import waited
from .errors import BadArgument, EventSpaceError, PastSetError, ServerGone, hosted_failure
from .template import Template

SCHEME = "local://"

# name -> the server served under it. The mutex must be held whenever the names change.
_served: dict[str, object] = {}
_mutex = threading.Lock()
_suffixes = itertools.count(2)


class Name:
    """A name under which a TupleServer is served in this process (`TupleServer.serve("local://NAME")`);
    `local://` alone takes the server's own name, or that name with a number if it is taken."""

    def __init__(self, server, bind: str):
        name = bind[len(SCHEME):]
        with _mutex:
            if not name:
                name = server.name
                while name in _served:
                    name = f"{server.name}-{next(_suffixes)}"
            elif name in _served:
                raise BadArgument(f"{bind} is served already (by server {_served[name].name}); give another name, "
                                  "or local:// for a new one")
            _served[name] = server
        self.server = server
        self.name = name
        self.endpoint = SCHEME + name

    def element_changed(self, element) -> None:
        pass   # in-process callers wait on the element itself

    def close(self) -> None:
        """Stop serving under this name: clients of it are ServerGone from now on."""
        with _mutex:
            if _served.get(self.name) is self.server:
                del _served[self.name]


def server_at(endpoint: str):
    """The server this process serves as `endpoint`; ServerGone if none is (any more)."""
    server = _served.get(endpoint[len(SCHEME):]) if endpoint.startswith(SCHEME) else None
    if server is None:
        raise ServerGone(f"no node server of this process is served as {endpoint} (not served, or closed)")
    return server


class LocalClient(transport.Transport):
    """A TupleServer of this process, reached by its `local://` name: the client API as direct calls.

    Element handles are the server's own elements, so an operation costs what it costs on the
    server itself. A hosted call runs in the caller's thread (`timeout` and `grace` do not apply:
    it cannot be silent), and fails as it would remotely: an EventSpaceError as raised, anything else
    as a ProtocolError naming it. Once the server stops serving the name, every call is ServerGone.
    """

    def __init__(self, endpoint: str, *, timeout: float = 5.0, gone_after: float = 2.0, grace: float = 30.0,
                 security=None):
        self.endpoint = endpoint
        self._server = server_at(endpoint)
        self.name = self._server.name
        self.limits = self._server.limits
        self._closed = False

    def _live(self):
        """The server, while it is served under this name and this client is open."""
        if self._closed:
            raise PastSetError(f"client of {self.endpoint} is closed")
        server = self._server
        if _served.get(self.endpoint[len(SCHEME):]) is not server:
            raise ServerGone(f"node server {self.name} is no longer served as {self.endpoint}")
        return server

    def enter(self, name: str, template, keep: int | None = None, delta: int | None = None):
        return self._live().enter(name, template, keep, delta)

    def element(self, name: str):
        return self._live().element(name)

    def delete(self, name: str) -> None:
        self._live().delete(name)

    def elements(self) -> list:
        return self._live().elements()

    def latest_many(self, elements, n: int = 1) -> list[tuple[int, list | bytes]]:
        return self._live().latest_many(elements, n)

    def latest_records(self, elements, n: int = 1) -> bytes:
        return self._live().latest_records(elements, n)

    def range_many(self, elements, los, hi: int) -> list[tuple[int, list | bytes]]:
        return self._live().range_many(elements, los, hi)

    def call(self, name: str, *args, timeout: float | None = None, grace: float | None = None):
        fn = self._live().hosted(name)[0]
        try:
            return waited(fn(*args))
        except EventSpaceError:
            raise
        except Exception as exc:
            raise hosted_failure(name, exc) from exc

    def ping(self) -> str:
        return self._live().name

    def submit(self, op: int, args):
        """The request as a direct call of the server (see `Transport.submit`): its result as its
        reply would carry it, but with tuples where the wire has lists."""
        server = self._live()
        run = _OPS[op] if op.__class__ is int and 0 <= op < len(_OPS) else None
        if run is None:
            raise p.unknown_operation(op)
        arity = run.__code__.co_argcount - 2   # (client, server, *its arguments)
        if len(args) != arity:
            raise p.wrong_count(op, arity, len(args))
        try:
            return run(self, server, *args)
        except EventSpaceError:
            raise
        except Exception as exc:   # as the server's endpoint answers it
            raise p.bad_arguments(op, exc) from exc

    def close(self) -> None:
        self._closed = True


def _described(element) -> list:
    return [element.id, element.template.spec, element.keep, element.delta()]


def _row(i) -> list:
    return [i.name, i.template, i.first, i.last, i.keep, i.delta, i.nbytes]


def _page(server, start, most) -> list:
    elements, after = server.table.page(start, min(most, p.ELEMENTS_PAGE))
    return [[_row(element.info()) for element in elements], after]


# op -> how LocalClient.submit makes it: fn(client, server, *its arguments).
_OPS = [None] * (max(p.OP_NAMES) + 1)
for _op, _run in (
    (p.PING, lambda client, server: [server.name, server.limits.max_frame]),
    (p.ENTER, lambda client, server, name, spec, keep, delta: _described(server.enter(name, Template.of(spec),
                                                                                       keep, delta))),
    (p.LOOKUP, lambda client, server, name: _described(server.element(name))),
    (p.MOVE, lambda client, server, eid, values, timeout: server.table.find(eid).move(values, timeout)),
    (p.OBSERVE, lambda client, server, eid, index, timeout: server.table.find(eid).observe(index, timeout)),
    (p.OBSERVE_INDEXED, lambda client, server, eid, index, timeout:
        server.table.find(eid).observe_indexed(index, timeout)),
    (p.FIND, lambda client, server, eid, pattern, remove, timeout:
        server.table.find(eid).find(pattern, remove, timeout)),
    (p.FIRST, lambda client, server, eid: server.table.find(eid).first()),
    (p.LAST, lambda client, server, eid: server.table.find(eid).last()),
    (p.DELTA, lambda client, server, eid, n: server.table.find(eid).delta(n)),
    (p.AXE, lambda client, server, eid, index: server.table.find(eid).axe(index)),
    (p.READ_RANGE, lambda client, server, eid, lo, hi: server.table.find(eid).read_range(lo, hi)),
    (p.LATEST, lambda client, server, eid, n: server.table.find(eid).latest(n)),
    (p.LATEST_MANY, lambda client, server, refs, n: server.latest_many(refs, n)),
    (p.RANGE_MANY, lambda client, server, refs, los, hi: server.range_many(refs, los, hi)),
    (p.LATEST_RECORDS, lambda client, server, refs, n: server.latest_records(refs, n)),
    (p.LATEST_RECORDS_COUNTED, lambda client, server, refs, n: server.latest_records_counted(refs, n)),
    (p.DELETE, lambda client, server, name: server.delete(name)),
    (p.ELEMENTS, lambda client, server, start, most: _page(server, start, most)),
    (p.CALL, lambda client, server, name, args: client.call(name, *args)),
):
    _OPS[_op] = _run


transport.register("local", LocalClient)
