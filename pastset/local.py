"""The in-process transport: `local://NAME` names a TupleServer of this process, and its client calls it directly."""

from __future__ import annotations

import itertools
import threading

from . import transport
from .deferred import waited
from .errors import BadArgument, EventSpaceError, PastSetError, ServerGone, hosted_failure

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

    def close(self) -> None:
        self._closed = True


transport.register("local", LocalClient)
