"""Requests over ZeroMQ, one engine for the client and the fan-out: watched sockets, and replies matched by request id."""

from __future__ import annotations

import itertools
import os
import resource
import threading

import msgpack
import zmq

from . import protocol as p
from .connection import Connection
from .security import Security

_NOBODY = object()

_SHARED: zmq.Context | None = None
_SHARED_MUTEX = threading.Lock()


def shared_context() -> zmq.Context:
    """pastset's ZeroMQ context for the process (fan-outs' sockets), allowed as many sockets as the
    process may open files (each takes two): ZeroMQ's default of 1,023 is only five fan-outs over
    64 nodes, a DEALER and its connection watch's two sockets per node. Its own, not
    `zmq.Context.instance()`: the limit must be set before the context's first socket, and so
    must its I/O thread's scheduling (see `_yielding_io`)."""
    global _SHARED
    with _SHARED_MUTEX:
        if _SHARED is None:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            context = zmq.Context()
            if soft == resource.RLIM_INFINITY or soft // 2 > context.get(zmq.MAX_SOCKETS):
                context.set(zmq.MAX_SOCKETS, 65536 if soft == resource.RLIM_INFINITY else soft // 2)
            _yielding_io(context)
            _SHARED = context
        return _SHARED


def _yielding_io(context: zmq.Context) -> None:
    """Run `context`'s I/O thread under SCHED_BATCH where the platform has it (Linux): woken, it
    does not preempt the thread running, but waits for that one to block or use up its slice.
    A fan-out's traffic is an observer's: otherwise a join sending its reads to three nodes is
    switched out for its own I/O thread in the middle of its sends, on every pull, and an
    application thread is switched out when a join's replies arrive. On an idle machine
    nothing waits (the thread goes to an idle CPU); pulls over the paper's layout on two cores
    were 4% faster, near-placed cluster joins gaining a little more (docs/RESULTS.md). A node
    server's endpoint keeps the default policy: it answers the application too."""
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is not None:
        try:
            context.set(zmq.THREAD_SCHED_POLICY, policy)
        except (AttributeError, zmq.ZMQError):
            pass   # a ZeroMQ without the option: the default policy


class Channel:
    """One DEALER socket to one node server, owned by one thread, with its connection watched
    (`connection`: up, down, or refused; see `pastset.connection.Connection`).

    `rcvtimeo` (ms) bounds a blocking `sock.recv()`; `sndhwm` the requests queued for a server
    that does not read them. A reply of over `max_reply` bytes is never read: ZeroMQ drops its
    connection as it arrives, before it is allocated (and connects again), so that its request
    goes unanswered. Raises zmq.ZMQError for an endpoint ZeroMQ cannot connect to.
    """

    def __init__(self, context: zmq.Context, endpoint: str, security: Security, *, max_reply: int,
                 rcvtimeo: int | None = None, sndhwm: int | None = None):
        sock = self.sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, max_reply)
        if rcvtimeo is not None:
            sock.setsockopt(zmq.RCVTIMEO, rcvtimeo)
        if sndhwm is not None:
            sock.setsockopt(zmq.SNDHWM, sndhwm)
        security.configure_client(sock)
        # Watched before it connects: a refusal at the first handshake is never seen otherwise.
        self.connection = Connection(sock, security)
        try:
            sock.connect(endpoint)
        except zmq.ZMQError:
            self.close()
            raise
        self.endpoint = endpoint

    def send(self, frame: bytes) -> bool:
        """Send `frame`; False, at once, if the socket has no connection to queue it on (nothing
        connected yet, a server that refused the handshake, or a queue full behind a paused one),
        where a DEALER would block. The caller's wait sees the refusal, or the silence."""
        try:
            self.sock.send(frame, zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def reachable(self) -> bool:
        """Whether its connection is up now, and was not refused."""
        return self.connection.update() and not self.connection.refused

    def close(self) -> None:
        """Close the socket: requests still queued in it are never delivered."""
        self.connection.close()
        self.sock.close(linger=0)


class Matcher:
    """Request ids and the replies that answer them, for the requests of one thread.

    `request` gives each request a new id and remembers it under the caller's `key`; `match`
    decodes a reply and hands back (key, ok, result) for a request still waited for, where
    `result` is the value, or (ok False) the EventSpaceError the reply names (`protocol.error_of`).
    A reply to a request no longer waited for (one answered already, or abandoned by `clear`: a
    late reply from a server that was given up on) is dropped: `match` returns None. A frame that
    is not a reply, or holds more than `most` values, raises ProtocolError (see
    `protocol.unpack_reply`). Not thread-safe: one per thread.
    """

    def __init__(self, most: int):
        self._most = most
        self._rids = itertools.count(1)
        self._waiting: dict[int, object] = {}
        # A Packer of its own: packb would build one for every request.
        self._pack = msgpack.Packer(use_bin_type=True).pack

    def request(self, op: int, args, key) -> bytes:
        """The frame of request `op(*args)` (arguments given as `protocol.Packed` are spliced in);
        its reply will be matched to `key`. TypeError, ValueError or OverflowError if an argument
        cannot be encoded."""
        rid = next(self._rids)
        frame = p.pack_request(rid, op, args, self._pack)
        self._waiting[rid] = key
        return frame

    def match(self, raw: bytes):
        """(key, ok, result) for the reply `raw`, or None for one nobody waits for (or for a
        server's liveness probe, an empty frame)."""
        if not raw:
            return None
        reply = p.unpack_reply(raw, self._most)
        key = self._waiting.pop(reply[0], _NOBODY)
        if key is _NOBODY:
            return None
        if reply[1] == p.OK:
            return key, True, reply[2]
        return key, False, p.error_of(reply[2], reply[3])

    def clear(self) -> None:
        """Abandon every request still waited for: their replies will be dropped."""
        self._waiting.clear()

    def __len__(self) -> int:
        """Requests still waited for."""
        return len(self._waiting)
