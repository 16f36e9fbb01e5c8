"""The ZeroMQ client: a node server reached over the network, with the same API as `TupleServer`."""

from __future__ import annotations

import threading
import weakref
from dataclasses import replace
from time import monotonic

import zmq

from . import protocol as p
from . import transport
from .checks import check_grace, check_timeout
from .connection import GRACE
from .element import ElementInfo
from .errors import (BadArgument, LimitExceeded, NotAnswering, PastSetError, ProtocolError, Refused, ServerGone,
                     UnknownElement)
from .requests import Channel, Matcher
from .security import Security, resolve
from .template import Template

__all__ = ["Client", "RemoteElement", "GRACE", "check_grace"]

_PING = object()   # the key of a liveness ping's reply
# The operations a server may take its time to answer: they wait for a tuple (parked), or run a
# hosted call. Any other is answered as soon as its server's loop reads it, before a ping sent after it.
_WAITS = frozenset({p.MOVE, p.OBSERVE, p.OBSERVE_INDEXED, p.FIND, p.CALL})


class Client(transport.Transport):
    """A remote node server with the `TupleServer` API (see `pastset.transport.Transport`, and
    `pastset.connect` for the options).

    One client may be shared by many threads: each thread talks over its own DEALER socket,
    so a thread blocked in `observe` never holds up another thread's `move`. Requests carry
    ids; replies to abandoned requests are recognised and dropped (`pastset.requests.Matcher`).

    A server is not trusted: a reply of over `limits.max_reply` bytes is never read (its
    connection is dropped as it arrives), one of more than a sixteenth that many values is not
    decoded whole, and one that is not a reply, or whose result has not the shape of its
    operation's, is a ProtocolError naming the server. A request that does not wait for a tuple
    or a hosted call is answered before a liveness ping sent after it: a server that answers the
    ping first lost it (or is not a node server), and the request ends at once.
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
        # The sockets mutex must be held whenever the channels change. A channel is used and closed by
        # the thread that opened it alone (a ZeroMQ socket is not thread-safe); one whose thread has
        # ended is dropped with it, or closed by `close`.
        self._sockets_mutex = threading.Lock()
        self._channels: weakref.WeakKeyDictionary[Channel, threading.Thread] = weakref.WeakKeyDictionary()
        self._closed = False
        self.name = "?"   # the server's, once it answered
        try:
            self.name, max_frame = self.submit(p.PING, (), timeout, timeout, gone_after=timeout)
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
        return self._handle(name, self.submit(p.ENTER, (name, spec, keep, delta)))

    def element(self, name: str) -> RemoteElement:
        """The existing element `name` on the server; UnknownElement if absent."""
        return self._handle(name, self.submit(p.LOOKUP, (name,)))

    def delete(self, name: str) -> None:
        self.submit(p.DELETE, (name,))

    def elements(self) -> list[ElementInfo]:
        """Every element, sorted by name, asked for a page at a time (`protocol.ELEMENTS_PAGE`): one
        entered or deleted while the pages come may be listed or not."""
        infos, start = [], None
        while True:
            rows, start = self.submit(p.ELEMENTS, (start, p.ELEMENTS_PAGE))
            infos += [ElementInfo(*row) for row in rows]
            if start is None:
                return infos

    def latest_many(self, elements, n: int = 1) -> list[tuple[int, list | bytes]]:
        """`latest(n)` of many elements (handles or names) in one round trip."""
        return [as_batch(reply) for reply in self.submit(p.LATEST_MANY, (refs(elements), n))]

    def latest_records(self, elements, n: int = 1) -> bytes:
        """The newest `n` records of many binary elements (handles or names) as one bytes, one round trip."""
        return self.submit(p.LATEST_RECORDS, (refs(elements), n))

    def range_many(self, elements, los, hi: int) -> list[tuple[int, list | bytes]]:
        """`read_range(lo, hi)` of many elements (handles or names), each from its own lo, in one round trip."""
        return [as_batch(reply) for reply in self.submit(p.RANGE_MANY, (refs(elements), list(los), hi))]

    def call(self, name: str, *args, timeout: float | None = None, grace: float | None = None):
        """Run the callable the server hosts as `name` (see `TupleServer.host`); returns its result.

        `timeout` is how long the callable may take before ServerGone; None waits as long as
        the server answers liveness pings. `grace` overrides the client's for this call: how
        long a server whose connection is open may stay silent before NotAnswering.
        """
        return self.submit(p.CALL, (name, list(args)), timeout, grace)

    def ping(self) -> str:
        """The server's name; raises ServerGone if it does not answer."""
        return self.submit(p.PING, ())[0]

    def close(self) -> None:
        """Close this client; returns at once, whatever its other threads are doing.

        Calls that other threads are waiting in raise PastSetError at once, and each of those
        threads closes its own socket: closing a socket under the thread that uses it crashes or
        hangs ZeroMQ. The socket of another thread that is not in a call is closed by that thread
        at its next call (which raises PastSetError), or dropped when the thread ends; until then
        the client's context ends on a thread of its own.
        """
        if self._closed:   # its context ends already (maybe still waiting for another thread)
            self._drop_channel()
            return
        self._closed = True
        here = threading.current_thread()
        with self._sockets_mutex:
            mine = [c for c, owner in list(self._channels.items()) if owner is here or not owner.is_alive()]
            for channel in mine:
                del self._channels[channel]
            others = len(self._channels)
        for channel in mine:
            channel.close()
        self._local.channel = None
        if others:
            threading.Thread(target=self._ctx.term, name="pastset-client-term", daemon=True).start()
        else:
            self._ctx.term()

    @classmethod
    def link(cls, endpoint: str, context, security: Security, limits) -> Channel:
        """A DEALER of the fan-out's own (see `Transport.link`): no handshake, so that a round is not
        held up by a server that does not answer; it is seen missing when the round ends."""
        return Channel(context, endpoint, security, max_reply=limits.max_reply, sndhwm=1000)

    # -- requests ----------------------------------------------------------------------------------

    def _handle(self, name, reply) -> RemoteElement:
        eid, spec, keep, delta = reply
        return RemoteElement(self, eid, name, Template.of(spec), keep, delta)

    def _channel(self) -> Channel:
        """This thread's socket to the server, opened (and watched) on its first request."""
        channel = getattr(self._local, "channel", None)
        if self._closed:
            self._closed_now()
        if channel is None:
            try:
                channel = Channel(self._ctx, self.endpoint, self.security, max_reply=self.limits.max_reply,
                                  rcvtimeo=int(self._PING_AFTER * 1000))
            except zmq.ZMQError as exc:
                if self._closed:   # closed meanwhile: its context is ending
                    self._closed_now()
                raise
            with self._sockets_mutex:
                self._channels[channel] = threading.current_thread()
            self._local.channel = channel
            self._local.matcher = Matcher(self.limits.max_reply // 16)
        return channel

    def submit(self, op, args, wait=None, grace=None, gone_after=None):
        """Send one request from this thread and wait for its reply (see `Transport.submit`).

        `wait` is how long the server may legitimately take (the operation's own timeout;
        None for as long as it keeps answering pings); `grace` how long it may be silent with
        its connection open (None: the client's); `gone_after` how long with it closed.
        """
        channel = self._channel()
        matcher = self._local.matcher
        matcher.clear()   # one request at a time per thread: whatever was asked before is abandoned
        try:
            frame = matcher.request(op, args, op)
        except (TypeError, ValueError, OverflowError) as exc:
            raise _Unsendable(f"{p.OP_NAMES[op]}: an argument cannot be sent as msgpack ({exc})") from None
        if len(frame) > self.limits.max_frame:
            raise LimitExceeded(
                f"{p.OP_NAMES[op]} request of {len(frame)} bytes exceeds the {self.limits.max_frame}-byte frame limit"
            )
        try:
            # Never blocks: a socket with no connection to queue on is waited on (and judged) below.
            sent = channel.send(frame)
            matched = None
            if sent:
                try:
                    matched = self._match(matcher, channel.sock.recv())  # the common case: a reply within _PING_AFTER
                except zmq.Again:
                    pass
            if matched is None:
                matched = self._wait(channel, matcher, None if sent else frame, op, wait,
                                     gone_after or self._gone_after, grace or self.grace)
        except zmq.ZMQError as exc:   # the context ends: `close` was called
            self._drop_channel()
            raise PastSetError(f"client of {self.endpoint} is closed ({exc})") from None
        if matched[1]:
            try:
                p.check_result(op, matched[2])
            except ProtocolError as exc:
                raise self._malformed(exc) from None
            return matched[2]
        raise matched[2]

    def _match(self, matcher, raw):
        """`matcher.match(raw)`, a frame that is not a reply a ProtocolError naming this server."""
        try:
            return matcher.match(raw)
        except ProtocolError as exc:
            raise self._malformed(exc) from None

    def _malformed(self, exc: ProtocolError) -> ProtocolError:
        """What was wrong with a frame from the server, as an error of this client naming the server;
        the socket goes (what else it holds is no reply either)."""
        self._drop_channel()
        return type(exc)(f"node server {self.name} at {self.endpoint} sent a {exc}; is it a PastSet node "
                         "server of this version?")

    def _wait(self, channel, matcher, unsent, op, wait, gone_after, grace):
        """The slow path of a reply: ping a quiet server, drop stale replies, and tell a server
        that is gone (connection closed, `gone_after` of silence) from one that is not answering
        (connection open, `grace` of silence). `unsent` is the request's frame if it could not be
        queued yet (None once sent). Returns what the matcher matched to the request."""
        connection = channel.connection
        start = monotonic()
        deadline = None if wait is None else start + check_timeout(wait) + self._SLACK
        pinging = False
        # The connection's drops when the request was sent (events are read only here), and when the
        # ping was: a ping sent before the connection dropped is lost with it, and so is the request.
        sent = drops = connection.drops
        heard = start  # when the server last showed it is alive
        while True:
            if self._closed:
                self._closed_now()
            now = monotonic()
            if deadline is not None and now >= deadline:
                self._give_up(f"no reply to {p.OP_NAMES[op]} within {wait + self._SLACK:.2f}s")
            silent = now - heard
            if connection.refused:
                self._drop_channel()
                raise Refused(connection.refused)
            if not connection.up and silent >= gone_after:
                # ZeroMQ drops a connection that brings a reply over Limits.max_reply, for good.
                big = (f", or it sent a reply over this client's {self.limits.max_reply:,}-byte limit "
                       "(Limits.max_reply)") if connection.drops != sent else ""
                self._give_up(f"no reply for {silent:.2f}s, and its connection is closed (its process "
                              f"ended, the connection was reset, or its host cannot be reached{big})")
            if connection.up and silent >= grace:
                raise NotAnswering(f"node server {self.name} at {self.endpoint} did not answer for {grace:g} s "
                                   "though its connection is open (paused, swapping or overloaded?)")
            if unsent is not None and channel.send(unsent):
                unsent = None
            if pinging and connection.drops != drops:
                pinging = False
            if unsent is None and not pinging and silent >= self._PING_AFTER:
                pinging = channel.send(matcher.request(p.PING, (), _PING))  # tried again next time round if not
                drops = connection.drops
            limit = heard + (grace if connection.up else gone_after)
            if deadline is not None:
                limit = min(deadline, limit)
            if not connection.poll(max(1, int(min(limit - now, self._PING_AFTER) * 1000))):
                continue
            raw = channel.sock.recv()
            if not raw:
                heard = monotonic()  # the server's liveness probe
                continue
            matched = self._match(matcher, raw)
            if matched is None:
                continue  # the reply to a request this thread abandoned earlier: dropped
            if matched[0] is _PING:
                if op not in _WAITS:
                    self._lost(op, connection.drops != sent)
                pinging = False
                heard = monotonic()
                continue
            return matched

    def _lost(self, op, dropped: bool):
        """A ping sent after request `op` (one its server answers at once) was answered, and the
        request was not: it will not be."""
        self._drop_channel()
        what = f"node server {self.name} at {self.endpoint} answered a ping sent after the {p.OP_NAMES[op]} request"
        if dropped:
            raise ServerGone(f"{what}, but the request was lost when the connection dropped (did the server "
                             "restart?)")
        raise ProtocolError(f"{what}, but not the request: it lost the request, or it is not a PastSet node server "
                            "of this version")

    def _give_up(self, why):
        self._drop_channel()
        raise ServerGone(f"node server {self.name} at {self.endpoint} is gone: {why}")

    def _drop_channel(self):
        # Close the socket so that requests still queued in it are never delivered later (a
        # server not answering keeps its socket: what it was sent is in its kernel already).
        channel = getattr(self._local, "channel", None)
        if channel is None:
            return
        with self._sockets_mutex:
            self._channels.pop(channel, None)
        self._local.channel = None
        channel.close()

    def _closed_now(self):
        """Raise PastSetError for a call on a closed client, closing this thread's socket first."""
        self._drop_channel()
        raise PastSetError(f"client of {self.endpoint} is closed")


class RemoteElement:
    """An element on a remote node server, with the `Element` API (see `pastset.element.Element`)."""

    __slots__ = ("_client", "_submit", "id", "name", "template", "keep")

    def __init__(self, client: Client, eid: int, name: str, template: Template, keep, delta):
        self._client = client
        self._submit = client.submit
        self.id = eid
        self.name = name
        self.template = template
        self.keep = keep

    def move(self, values, timeout: float | None = None) -> int:
        try:
            return self._submit(p.MOVE, (self.id, values, timeout), timeout)
        except _Unsendable:
            self.template.check(values)  # names the field, as a local move would
            raise

    def move_record(self, record: bytes) -> int:
        """Append one packed record of a binary template."""
        return self.move(self.template.unpack(record))

    def observe(self, index: int | None = None, timeout: float | None = None) -> tuple:
        return tuple(self._submit(p.OBSERVE, (self.id, index, timeout), timeout))

    def observe_indexed(self, index: int | None = None, timeout: float | None = None) -> tuple[int, tuple]:
        found, values = self._submit(p.OBSERVE_INDEXED, (self.id, index, timeout), timeout)
        return found, tuple(values)

    def find(self, pattern, remove: bool = False, timeout: float | None = None) -> tuple:
        return tuple(self._submit(p.FIND, (self.id, pattern, remove, timeout), timeout))

    def first(self) -> int:
        return self._submit(p.FIRST, (self.id,))

    def last(self) -> int:
        return self._submit(p.LAST, (self.id,))

    def delta(self, n: int | None = None) -> int | None:
        return self._submit(p.DELTA, (self.id, n))

    def axe(self, index: int) -> int:
        return self._submit(p.AXE, (self.id, index))

    def read_range(self, lo: int, hi: int) -> tuple[int, list | bytes]:
        return as_batch(self._submit(p.READ_RANGE, (self.id, lo, hi)))

    def latest(self, n: int = 1) -> tuple[int, list | bytes]:
        return as_batch(self._submit(p.LATEST, (self.id, n)))

    def info(self) -> ElementInfo:
        rows, _ = self._submit(p.ELEMENTS, (self.name, 1))
        if rows and rows[0][0] == self.name:
            return ElementInfo(*rows[0])
        raise UnknownElement(f"no element named {self.name!r} on {self._client.endpoint}")

    def __repr__(self):
        return f"<RemoteElement {self.name} {self.template} at {self._client.endpoint}>"


class _Unsendable(BadArgument):
    """An argument msgpack cannot encode, found before anything was sent."""


def refs(elements) -> list:
    """What a batch request names: element names as they are, handles by their ids."""
    return [e if isinstance(e, str) else e.id for e in elements]


def as_batch(reply) -> tuple[int, list | bytes]:
    """(start, items) of a batch read (read_range, latest) as it came over the wire, as the
    element itself gives it: typed items become tuples, binary ones stay one bytes."""
    start, items = reply
    if isinstance(items, list):
        items = [None if item is None else tuple(item) for item in items]
    return start, items


transport.register("tcp", Client)
transport.register("ipc", Client)
