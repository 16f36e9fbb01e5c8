"""The remote client: a node server reached over ZeroMQ, with the same API as `TupleServer`."""

from __future__ import annotations

import itertools
import threading
from dataclasses import replace
from time import monotonic

import msgpack
import zmq

from . import protocol as p
from .connection import Connection
from .element import MAX_TIMEOUT, ElementInfo, _check_timeout
from .errors import BadArgument, LimitExceeded, NotAnswering, PastSetError, Refused, ServerGone, UnknownElement
from .security import Security, resolve
from .template import Template

_unpackb = msgpack.unpackb

# Seconds a server whose connection is open may stay silent before a waiting caller gives up on
# it (NotAnswering): long enough for a GC pause, swapping or a busy host.
GRACE = 30.0


def connect(endpoint: str, *, timeout: float = 5.0, gone_after: float = 2.0, grace: float = GRACE,
            security: Security | None = None) -> Client:
    """A client of the node server at `endpoint` (e.g. "tcp://127.0.0.1:5555").

    Raises ServerGone if nothing answers within `timeout` seconds (NotAnswering, a ServerGone,
    if something accepted the connection but did not answer), or Refused (a ServerGone) as soon
    as the server refuses the security handshake.

    Afterwards a caller whose server answers neither its request nor a liveness ping is told
    what the connection says (see `pastset.connection.Connection`): a server whose connection
    is closed (its process ended, the connection was reset, connecting is refused) is gone,
    ServerGone after `gone_after` seconds of silence; one whose connection is still open is
    paused, swapping or overloaded, and is waited for until it has been silent for `grace`
    seconds, then NotAnswering. No call hangs. `security` holds the CURVE keys to speak with
    (None: the process's, see `pastset.security.default`).
    """
    return Client(endpoint, timeout=timeout, gone_after=gone_after, grace=grace, security=security)


class Client:
    """A remote node server with the `TupleServer` API (enter, element, delete, elements, latest_many).

    One client may be shared by many threads: each thread talks over its own DEALER socket,
    so a thread blocked in `observe` never holds up another thread's `move`. Requests carry
    ids; replies to abandoned requests are recognised and dropped.
    """

    # Silence after which a waiting caller pings the server to learn whether it is alive.
    _PING_AFTER = 0.25
    # How long past an operation's own timeout we wait for the server's Timeout reply.
    _SLACK = 0.5

    def __init__(self, endpoint: str, *, timeout: float = 5.0, gone_after: float = 2.0, grace: float = GRACE,
                 limits: p.Limits = p.Limits(), security: Security | None = None):
        self.endpoint = endpoint
        self.limits = limits
        self.security = resolve(security)
        self._gone_after = gone_after
        self.grace = check_grace(grace)
        self._ctx = zmq.Context()
        self._local = threading.local()
        # The sockets mutex must be held whenever the set of sockets changes.
        self._sockets_mutex = threading.Lock()
        self._sockets: set[zmq.Socket] = set()
        self._rids = itertools.count(1)
        self._closed = False
        self.name = "?"   # the server's, once it answered
        try:
            self.name, max_frame = self._hello(timeout)
        except Refused as exc:
            self.close()
            raise Refused(f"node server at {endpoint} refused this client: {exc}") from None
        except NotAnswering:
            self.close()
            raise NotAnswering(f"something at {endpoint} accepts connections but did not answer within "
                               f"{timeout:g} s (a node server that is paused, swapping or overloaded?)") from None
        except ServerGone:
            self.close()
            raise ServerGone(f"no node server answers at {endpoint} (waited {timeout}s)") from None
        except zmq.ZMQError as exc:  # an endpoint zmq cannot connect to at all
            self.close()
            raise BadArgument(f"cannot connect to {endpoint!r}: {exc}; an endpoint looks like "
                              "tcp://HOST:PORT") from None
        # A frame far beyond the server's limit is dropped with its connection, unanswered:
        # such a request must never leave this client.
        if max_frame < limits.max_frame:
            self.limits = replace(limits, max_frame=max_frame)

    # -- the TupleServer API -------------------------------------------------------------------

    def enter(self, name: str, template, keep: int | None = None, delta: int | None = None) -> RemoteElement:
        """As `TupleServer.enter`, on the remote server."""
        spec = Template.of(template).spec
        return self._handle(name, self._call(p.ENTER, (name, spec, keep, delta)))

    def element(self, name: str) -> RemoteElement:
        """The existing element `name` on the server; UnknownElement if absent."""
        return self._handle(name, self._call(p.LOOKUP, (name,)))

    def delete(self, name: str) -> None:
        self._call(p.DELETE, (name,))

    def elements(self) -> list[ElementInfo]:
        return [ElementInfo(*row) for row in self._call(p.ELEMENTS, ())]

    def latest_many(self, elements, n: int = 1) -> list[tuple[int, list | bytes]]:
        """`latest(n)` of many elements (handles or names) in one round trip."""
        refs = [e if isinstance(e, str) else e.id for e in elements]
        return [_batch(reply) for reply in self._call(p.LATEST_MANY, (refs, n))]

    def latest_records(self, elements, n: int = 1) -> bytes:
        """The newest `n` records of many binary elements (handles or names) as one bytes, one round trip."""
        return self._call(p.LATEST_RECORDS, ([e if isinstance(e, str) else e.id for e in elements], n))

    def range_many(self, elements, los, hi: int) -> list[tuple[int, list | bytes]]:
        """`read_range(lo, hi)` of many elements (handles or names), each from its own lo, in one round trip."""
        refs = [e if isinstance(e, str) else e.id for e in elements]
        return [_batch(reply) for reply in self._call(p.RANGE_MANY, (refs, list(los), hi))]

    def call(self, name: str, *args, timeout: float | None = None, grace: float | None = None):
        """Run the callable the server hosts as `name` (see `TupleServer.host`); returns its result.

        `timeout` is how long the callable may take before ServerGone; None waits as long as
        the server answers liveness pings. `grace` overrides the client's for this call: how
        long a server whose connection is open may stay silent before NotAnswering.
        """
        return self._call(p.CALL, (name, list(args)), timeout, grace)

    def ping(self) -> str:
        """The server's name; raises ServerGone if it does not answer."""
        return self._call(p.PING, ())[0]

    def close(self) -> None:
        """Close every socket of this client; calls still waiting raise PastSetError."""
        self._closed = True
        with self._sockets_mutex:
            self._sockets.clear()
        self._ctx.destroy(linger=0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<Client {self.endpoint}>"

    # -- requests ----------------------------------------------------------------------------------

    def _handle(self, name, reply) -> RemoteElement:
        eid, spec, keep, delta = reply
        return RemoteElement(self, eid, name, Template.of(spec), keep, delta)

    def _socket(self) -> zmq.Socket:
        sock = getattr(self._local, "sock", None)
        if sock is None:
            sock = self._open()
            sock.connect(self.endpoint)
        return sock

    def _open(self) -> zmq.Socket:
        """A new socket for this thread, configured, registered and watched, not connected yet."""
        if self._closed:
            raise PastSetError(f"client of {self.endpoint} is closed")
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, int(self._PING_AFTER * 1000))
        self.security.configure_client(sock)
        with self._sockets_mutex:
            self._sockets.add(sock)
        self._local.sock = sock
        self._local.connection = Connection(sock, self.security)
        # A Packer of its own per thread: packb would build one for every request.
        self._local.pack = msgpack.Packer(use_bin_type=True).pack
        return sock

    def _hello(self, timeout):
        """The first request: a ping, with the connection watched, so that a server that refuses
        the handshake is told apart from silence (and at once, not after `timeout`)."""
        sock = self._open()
        sock.connect(self.endpoint)
        rid = next(self._rids)
        _send_unless_unconnected(sock, p.pack([rid, p.PING]))
        raw = self._wait(sock, rid, p.PING, timeout, timeout, timeout)
        reply = _unpackb(raw, raw=False)
        if reply[1] == p.OK:
            return reply[2]
        p.raise_error(reply[2], reply[3])

    def _call(self, op, args, wait=None, grace=None):
        """Send one request from this thread and wait for its reply.

        `wait` is how long the server may legitimately take (the operation's own timeout;
        None for as long as it keeps answering pings); `grace` how long it may be silent with
        its connection open (None: the client's).
        """
        sock = self._socket()
        rid = next(self._rids)
        try:
            frame = self._local.pack([rid, op, *args])
        except (TypeError, ValueError, OverflowError) as exc:
            raise _Unsendable(f"{p.OP_NAMES[op]}: an argument cannot be sent as msgpack ({exc})") from None
        if len(frame) > self.limits.max_frame:
            raise LimitExceeded(
                f"{p.OP_NAMES[op]} request of {len(frame)} bytes exceeds the {self.limits.max_frame}-byte frame limit"
            )
        try:
            sock.send(frame)
            try:
                raw = sock.recv()  # the common case: an answer within _PING_AFTER
            except zmq.Again:
                raw = self._wait(sock, rid, op, wait, self._gone_after, grace or self.grace)
        except zmq.ZMQError as exc:
            raise PastSetError(f"client of {self.endpoint} is closed ({exc})") from None
        reply = _unpackb(raw, raw=False) if raw else None
        if reply is None or reply[0] != rid:
            raw = self._wait(sock, rid, op, wait, self._gone_after, grace or self.grace, early=reply)
            reply = _unpackb(raw, raw=False)
        if reply[1] == p.OK:
            return reply[2]
        p.raise_error(reply[2], reply[3])

    def _wait(self, sock, rid, op, wait, gone_after, grace, early=None) -> bytes:
        """The slow path of a reply: ping a quiet server, drop stale replies, and tell a server
        that is gone (connection closed, `gone_after` of silence) from one that is not answering
        (connection open, `grace` of silence). `early` is a reply the fast path already read
        that was not ours (None: none)."""
        connection = self._local.connection
        start = monotonic()
        deadline = None if wait is None else start + _check_timeout(wait) + self._SLACK
        ping_rid = None
        heard = start  # when the server last showed it is alive
        while True:
            if early is None:
                now = monotonic()
                if deadline is not None and now >= deadline:
                    self._give_up(sock, f"no reply to {p.OP_NAMES[op]} within {wait + self._SLACK:.2f}s")
                silent = now - heard
                if connection.refused:
                    self._drop_socket(sock)
                    raise Refused(connection.refused)
                if not connection.up and silent >= gone_after:
                    self._give_up(sock, f"no reply for {silent:.2f}s, and its connection is closed (its process "
                                        "ended, the connection was reset, or its host cannot be reached)")
                if connection.up and silent >= grace:
                    raise NotAnswering(f"node server {self.name} at {self.endpoint} did not answer for {grace:g} s "
                                       "though its connection is open (paused, swapping or overloaded?)")
                if ping_rid is None and silent >= self._PING_AFTER:
                    ping_rid = next(self._rids)
                    if not _send_unless_unconnected(sock, p.pack([ping_rid, p.PING])):
                        ping_rid = None  # tried again next time round
                limit = heard + (grace if connection.up else gone_after)
                if deadline is not None:
                    limit = min(deadline, limit)
                ready = connection.poll(max(1, int(min(limit - now, self._PING_AFTER) * 1000)))
                if not ready:
                    continue
                raw = sock.recv()
                if not raw:
                    heard = monotonic()  # the server's liveness probe
                    continue
                reply = _unpackb(raw, raw=False)
            else:
                reply, early = early, None
                raw = p.pack(reply)
            if reply[0] == rid:
                return raw
            if ping_rid is not None and reply[0] == ping_rid:
                ping_rid = None
                heard = monotonic()
            # anything else answers a request this thread abandoned earlier: drop it

    def _give_up(self, sock, why):
        self._drop_socket(sock)
        raise ServerGone(f"node server {self.name} at {self.endpoint} is gone: {why}")

    def _drop_socket(self, sock):
        # Close the socket so that requests still queued in it are never delivered later (a
        # server not answering keeps its socket: what it was sent is in its kernel already).
        with self._sockets_mutex:
            self._sockets.discard(sock)
        self._local.sock = None
        self._local.connection.close()
        sock.close(linger=0)


def _send_unless_unconnected(sock: zmq.Socket, frame: bytes) -> bool:
    """Send `frame`; False, at once, if the socket has no connection to queue it on (one whose
    handshake the server refused is dropped, and a DEALER would then block in send for ever).
    The caller's wait sees the refusal, or the silence, within its timeout."""
    try:
        sock.send(frame, zmq.NOBLOCK)
    except zmq.Again:
        return False
    return True


class RemoteElement:
    """An element on a remote node server, with the `Element` API (see `pastset.element.Element`)."""

    __slots__ = ("_client", "_call", "id", "name", "template", "keep")

    def __init__(self, client: Client, eid: int, name: str, template: Template, keep, delta):
        self._client = client
        self._call = client._call
        self.id = eid
        self.name = name
        self.template = template
        self.keep = keep

    def move(self, values, timeout: float | None = None) -> int:
        try:
            return self._call(p.MOVE, (self.id, values, timeout), timeout)
        except _Unsendable:
            self.template.check(values)  # names the field, as a local move would
            raise

    def move_record(self, record: bytes) -> int:
        """Append one packed record of a binary template."""
        return self.move(self.template.unpack(record))

    def observe(self, index: int | None = None, timeout: float | None = None) -> tuple:
        return tuple(self._call(p.OBSERVE, (self.id, index, timeout), timeout))

    def observe_indexed(self, index: int | None = None, timeout: float | None = None) -> tuple[int, tuple]:
        found, values = self._call(p.OBSERVE_INDEXED, (self.id, index, timeout), timeout)
        return found, tuple(values)

    def find(self, pattern, remove: bool = False, timeout: float | None = None) -> tuple:
        return tuple(self._call(p.FIND, (self.id, pattern, remove, timeout), timeout))

    def first(self) -> int:
        return self._call(p.FIRST, (self.id,))

    def last(self) -> int:
        return self._call(p.LAST, (self.id,))

    def delta(self, n: int | None = None) -> int | None:
        return self._call(p.DELTA, (self.id, n))

    def axe(self, index: int) -> int:
        return self._call(p.AXE, (self.id, index))

    def read_range(self, lo: int, hi: int) -> tuple[int, list | bytes]:
        return _batch(self._call(p.READ_RANGE, (self.id, lo, hi)))

    def latest(self, n: int = 1) -> tuple[int, list | bytes]:
        return _batch(self._call(p.LATEST, (self.id, n)))

    def info(self) -> ElementInfo:
        for info in self._client.elements():
            if info.name == self.name:
                return info
        raise UnknownElement(f"no element named {self.name!r} on {self._client.endpoint}")

    def __repr__(self):
        return f"<RemoteElement {self.name} {self.template} at {self._client.endpoint}>"


def check_grace(grace) -> float:
    """The grace in seconds, if it is a number above 0 and at most a year; BadArgument otherwise."""
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 < grace <= MAX_TIMEOUT:
        raise BadArgument(f"grace must be a positive number of seconds (at most {MAX_TIMEOUT}), got {grace!r}")
    return float(grace)


class _Unsendable(BadArgument):
    """An argument msgpack cannot encode, found before anything was sent."""


def _batch(reply) -> tuple[int, list | bytes]:
    """(start, items) from a batch reply: typed items become tuples, binary ones stay one bytes."""
    start, items = reply
    if isinstance(items, list):
        items = [None if item is None else tuple(item) for item in items]
    return start, items
