"""Fan-out: many requests to many node servers in flight at once, their replies collected within a deadline."""

from __future__ import annotations

import itertools
from time import monotonic

import msgpack
import zmq

from . import protocol as p
from .connection import Connection
from .errors import ERRORS_BY_NAME, ProtocolError, ServerGone
from .security import Security, resolve

_unpackb = msgpack.unpackb


class Fanout:
    """Pipelined requests to several node servers: send them all, then collect every reply.

    One DEALER socket per endpoint, all owned by the thread that uses the Fanout (it is not
    thread-safe: give each thread its own). `request` never blocks past its deadline: a server
    that does not answer in time is reported missing, and its late replies are recognised by
    request id and dropped. `gone(missing)` tells which of the missing nodes are gone (their
    connection is closed) rather than not answering (connected, but paused, swapping or busy).
    Counts the bytes it sends and receives. `security` holds the CURVE keys its sockets speak
    with (None: the process's, see `pastset.security.default`); a server that refuses them
    never answers, so its node is reported missing (and gone).
    """

    def __init__(self, endpoints: dict[str, str], context: zmq.Context | None = None,
                 security: Security | None = None):
        self._ctx = context or zmq.Context.instance()
        self._security = resolve(security)
        self._endpoints = dict(endpoints)
        self._sockets: dict[str, zmq.Socket] = {}
        self._connections: dict[str, Connection] = {}
        self._node_of: dict[zmq.Socket, str] = {}
        self._poller = zmq.Poller()
        self._rids = itertools.count(1)
        self.bytes_sent = 0
        self.bytes_received = 0

    def add(self, node: str, endpoint: str) -> None:
        """Learn (or change) where `node` listens."""
        if self._endpoints.get(node) != endpoint:
            self._drop(node)
            self._endpoints[node] = endpoint

    def request(self, requests: list[tuple[str, int, tuple]], timeout: float,
                sequential: bool = False) -> tuple[list, set[str]]:
        """Send each (node, op, args) request; return (results, missing nodes).

        `results[i]` is request i's result, or the PastSetError its server answered with, or
        None for a node in `missing` (no answer within `timeout` seconds, or unreachable).
        `sequential` waits for each reply before sending the next request.
        """
        results: list = [None] * len(requests)
        missing: set[str] = set()
        deadline = monotonic() + timeout
        if sequential:
            for i, request in enumerate(requests):
                if request[0] in missing:
                    continue
                self._round([request], [i], results, missing, deadline)
        else:
            self._round(requests, range(len(requests)), results, missing, deadline)
        return results, missing

    def gone(self, nodes) -> set[str]:
        """Of `nodes` (a request's missing ones), those that are gone: their connection is closed,
        refused or was never made (the process ended, or its host cannot be reached). The others
        are connected but did not answer in time: paused, swapping or overloaded."""
        return {node for node in nodes if not self._reachable(node)}

    def _reachable(self, node: str) -> bool:
        connection = self._connections.get(node)
        return connection is not None and connection.update() and not connection.refused

    def _round(self, requests, positions, results, missing, deadline) -> None:
        waiting: dict[int, tuple[int, str]] = {}  # request id -> (position, node)
        # Replies still owed per socket: a socket is read until it has paid them, not until a
        # non-blocking read fails (pyzmq raises for that, which costs more than the read).
        owed: dict[zmq.Socket, int] = {}
        for position, (node, op, args) in zip(positions, requests):
            if node in missing:
                continue
            sock = self._socket(node)
            rid = next(self._rids)
            frame = p.pack_request(rid, op, args)
            try:
                sock.send(frame, zmq.NOBLOCK)
            except zmq.Again:  # nothing connected (a dead peer), or a queue full behind a paused one
                missing.add(node)
                if not self._reachable(node):
                    self._drop(node)
                continue
            self.bytes_sent += len(frame)
            waiting[rid] = (position, node)
            owed[sock] = owed.get(sock, 0) + 1
        while waiting:
            remaining = deadline - monotonic()
            if remaining <= 0:
                break
            for sock, _ in self._poller.poll(max(1, int(remaining * 1000))):
                if not owed.get(sock):
                    _drain(sock)  # only late replies or probes there: read out, so that poll waits
                    continue
                while owed[sock]:
                    try:
                        raw = sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if not raw:
                        continue  # the server's liveness probe
                    self.bytes_received += len(raw)
                    reply = _unpackb(raw, raw=False)
                    found = waiting.pop(reply[0], None)
                    if found is None:
                        continue  # a late reply to a request given up on
                    owed[sock] -= 1
                    position = found[0]
                    if reply[1] == p.OK:
                        results[position] = reply[2]
                    else:
                        results[position] = ERRORS_BY_NAME.get(reply[2], ProtocolError)(reply[3])
        if waiting:
            late = {node for _, node in waiting.values()}
            missing.update(late)
            for node in late:
                if not self._reachable(node):
                    self._drop(node)  # a fresh socket next time: no stale queue behind a dead peer
                # A connected node keeps its socket: a new connection to a paused server would only
                # wait in its kernel's accept queue; its late replies are dropped by request id.

    def _socket(self, node: str) -> zmq.Socket:
        sock = self._sockets.get(node)
        if sock is None:
            endpoint = self._endpoints.get(node)
            if endpoint is None:
                raise ServerGone(f"no endpoint known for node {node}")
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 1000)
            self._security.configure_client(sock)
            self._connections[node] = Connection(sock, self._security)
            sock.connect(endpoint)
            self._sockets[node] = sock
            self._node_of[sock] = node
            self._poller.register(sock, zmq.POLLIN)
        return sock

    def _drop(self, node: str) -> None:
        sock = self._sockets.pop(node, None)
        if sock is not None:
            self._poller.unregister(sock)
            del self._node_of[sock]
            self._connections.pop(node).close()
            sock.close(linger=0)

    def close(self) -> None:
        for node in list(self._sockets):
            self._drop(node)


def _drain(sock: zmq.Socket) -> None:
    """Read and drop every message waiting on `sock`."""
    while True:
        try:
            sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            return
