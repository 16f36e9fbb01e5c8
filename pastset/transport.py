"""One request API over every transport: `connect(endpoint)` picks the backend by the endpoint's scheme."""

from __future__ import annotations

from abc import ABC, abstractmethod

from .connection import GRACE
from .errors import BadArgument
from .security import Security

# scheme -> the backend: its client class, a Transport
_BACKENDS: dict[str, type[Transport]] = {}


class Transport(ABC):
    """A node server as a caller sees it, whatever carries the requests: the `TupleServer` API.

    Backends: `pastset.client.Client` over ZeroMQ (`tcp://HOST:PORT`, `ipc://PATH`) and
    `pastset.local.LocalClient` in-process (`local://NAME`, direct calls into a server this
    process serves under that name). Many requests to many servers at once go through
    `pastset.fanout.Fanout`, over the same backends.

    Errors are the same whatever the backend: every failure is a PastSetError, one that the
    server raised arrives as the same class with the same message (so does a hosted callable's
    EventSpaceError of a layer above, such as a PathsError), one that fails with another error
    is a ProtocolError naming it, and a server that cannot be reached is
    ServerGone (NotAnswering when its connection is open but it is silent).

    `endpoint` is what was connected to; `name` the server's name.

    A backend is a subclass that implements these methods, `submit` (every request of the
    protocol, by its operation code) and, if its requests can be in flight to many servers at
    once, `link`; `register` makes `connect` and `Fanout` reach its scheme through it.
    """

    endpoint: str
    name: str

    @abstractmethod
    def enter(self, name: str, template, keep: int | None = None, delta: int | None = None):
        """Bind to (create if absent) element `name`; its handle, with the `Element` API."""

    @abstractmethod
    def element(self, name: str):
        """The existing element `name`'s handle; UnknownElement if absent."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Remove element `name`; its blocked callers get UnknownElement."""

    @abstractmethod
    def elements(self) -> list:
        """An ElementInfo of every element, sorted by name."""

    @abstractmethod
    def latest_many(self, elements, n: int = 1) -> list[tuple[int, list | bytes]]:
        """`latest(n)` of many elements (handles or names), in order, at once."""

    @abstractmethod
    def latest_records(self, elements, n: int = 1) -> bytes:
        """The newest `n` records of many binary elements (handles or names) as one bytes, in order."""

    @abstractmethod
    def range_many(self, elements, los, hi: int) -> list[tuple[int, list | bytes]]:
        """`read_range(lo, hi)` of many elements (handles or names), each from its own lo, at once."""

    @abstractmethod
    def call(self, name: str, *args, timeout: float | None = None, grace: float | None = None):
        """Run the callable the server hosts as `name` (see `TupleServer.host`); its result."""

    @abstractmethod
    def ping(self) -> str:
        """The server's name; ServerGone if it does not answer."""

    @abstractmethod
    def submit(self, op: int, args):
        """The result of request `op` (an operation code of `pastset.protocol`) with its arguments
        `args` (a sequence), in the shape its reply carries it (see the operation codes; an in-process
        backend may give tuples for lists): the one request path of the backend. Raises the
        PastSetError the request is answered with (the errors above), ProtocolError for arguments
        its operation cannot take (`protocol.bad_arguments`)."""

    @classmethod
    def link(cls, endpoint: str, context, security: Security, limits):
        """What a `pastset.fanout.Fanout` reaches the server at `endpoint` through: by default a
        client of this backend (`cls(endpoint, security=security)`), whose `submit` a round calls for
        each of its requests to that server, after it sent its other requests (ServerGone: the
        server is missing from the round). A backend whose requests travel as ZeroMQ frames returns
        a `pastset.requests.Channel` on `context` instead (replies at most `limits.max_reply`
        bytes): the round sends its requests' frames on it, and they are all in flight at once."""
        return cls(endpoint, security=security)

    @abstractmethod
    def close(self) -> None:
        """Let go of the server; calls after (and, remote, still waiting) raise PastSetError."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<{type(self).__name__} {self.endpoint}>"


def register(scheme: str, backend: type[Transport]) -> None:
    """Make `connect` reach endpoints `scheme://...` through `backend(endpoint, **options)`, and a
    `Fanout` through `backend.link` (see `Transport`)."""
    _BACKENDS[scheme] = backend


def backend_of(endpoint: str) -> type[Transport]:
    """The backend that reaches `endpoint`, by its scheme; BadArgument for an endpoint of no known scheme."""
    scheme, sep, _ = endpoint.partition("://") if isinstance(endpoint, str) else ("", "", "")
    backend = _BACKENDS.get(scheme) if sep else None
    if backend is None:
        raise BadArgument(f"cannot connect to {endpoint!r}: an endpoint looks like tcp://HOST:PORT, "
                          f"ipc://PATH or local://NAME (known schemes: {', '.join(sorted(_BACKENDS))})")
    return backend


def connect(endpoint: str, *, timeout: float = 5.0, gone_after: float = 2.0, grace: float = GRACE,
            security: Security | None = None) -> Transport:
    """A client of the node server at `endpoint`, through the backend its scheme names.

    `tcp://HOST:PORT` or `ipc://PATH`: over ZeroMQ (`pastset.client.Client`). Raises ServerGone
    if nothing answers within `timeout` seconds (NotAnswering, a ServerGone, if something
    accepted the connection but did not answer), or Refused (a ServerGone) as soon as the server
    refuses the security handshake. Afterwards a caller whose server answers neither its request
    nor a liveness ping is told what the connection says (see `pastset.connection.Connection`):
    a server whose connection is closed (its process ended, the connection was reset, connecting
    is refused) is gone, ServerGone after `gone_after` seconds of silence; one whose connection is
    still open is paused, swapping or overloaded, and is waited for until it has been silent for
    `grace` seconds, then NotAnswering. No call hangs. `security` holds the CURVE keys to speak
    with (None: the process's, see `pastset.security.default`).

    `local://NAME`: a server of this process served under that name (`TupleServer.serve`), called
    directly (`pastset.local.LocalClient`); ServerGone if no server is served so. The options
    above do not apply: such a server is never silent, and gone only when it stops serving.

    BadArgument for an endpoint of no known scheme.
    """
    return backend_of(endpoint)(endpoint, timeout=timeout, gone_after=gone_after, grace=grace, security=security)


def scheme_of(endpoint: str) -> str:
    """The scheme of `endpoint` ('tcp', 'local', ...)."""
    return endpoint.partition("://")[0]
