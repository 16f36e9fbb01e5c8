"""A client socket's connection to its server, as ZeroMQ sees it: up, down, or refused at the handshake."""

from __future__ import annotations

import struct

import zmq

from .security import Security

# Seconds a server whose connection is open may stay silent before a waiting caller gives up on
# it (NotAnswering): long enough for a GC pause, swapping or a busy host.
GRACE = 30.0


class Connection:
    """Watches one socket's connection through a ZeroMQ socket monitor: what tells a server that
    is gone from one that is only not answering.

    `up` is True while a TCP connection to the server is established. A server that is paused
    (SIGSTOP), swapping or busy keeps it up, since its kernel holds the connection (and accepts
    new ones); it goes down when the server's process ends or the connection is reset, and stays
    down while connecting is refused or the host cannot be reached. So silence with `up` means
    "not answering", and silence without it "gone".

    `drops` counts the times it went down after it was up (what was on its way went with it).

    `refused` says why, once the server refused the security handshake: a mechanism mismatch
    (CURVE on one side only, or a wrong server key) or a client key its authenticator does not
    accept.

    Events are read only when asked (`poll`, `update`), never on a call's fast path. Only changes
    of the connection are watched, not connect retries, which repeat every few hundred
    milliseconds while a server is down and would pile up unread on an idle socket. The watch
    starts before the socket connects: libzmq may not retry after a mechanism mismatch, so a
    refusal missed then would never be seen again.
    """

    _REFUSED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    _EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | _REFUSED

    def __init__(self, sock: zmq.Socket, security: Security):
        """Watch `sock`, which must not be connected yet."""
        # No handshake deadline: a paused server's kernel accepts the connection, and libzmq would
        # otherwise drop and redo it every 30 s, making it look gone for a moment each time.
        sock.setsockopt(zmq.HANDSHAKE_IVL, 0)
        self._sock = sock
        self._security = security
        self._events = sock.get_monitor_socket(self._EVENTS)
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        self._poller.register(self._events, zmq.POLLIN)
        self.up = False
        self.drops = 0   # how often it went down after it was up
        self.refused: str | None = None

    def poll(self, ms: int) -> bool:
        """Wait up to `ms` for a message on the socket (True) or a change of the connection."""
        ready = dict(self._poller.poll(ms))
        if self._events in ready:
            self.update()
        return self._sock in ready

    def update(self) -> bool:
        """Read every change reported so far; whether the connection is up now."""
        while self._events.poll(0):
            # A monitor message's first frame is the event (u16) and its value (u32); pyzmq's own
            # reader would import asyncio (a fifth of a second at every process's start).
            self._apply(struct.unpack_from("=H", self._events.recv_multipart()[0])[0])
        return self.up

    def _apply(self, event: int) -> None:
        if event == zmq.EVENT_CONNECTED:
            self.up = True
        elif event == zmq.EVENT_DISCONNECTED:
            self.drops += self.up
            self.up = False
        else:
            self.up = False
            self.refused = self._why(event)

    def _why(self, event) -> str:
        sec = self._security
        if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            key = f" ({sec.keys}/client.key)" if sec.keys else ""
            return (f"it does not authorise this client's CURVE key{key}; copy the client's public "
                    "key file into the server's authorized_clients directory, or use the run's own "
                    "key directory")
        if not sec.connects:
            return ("the security handshake failed: the server uses CURVE and this client has no "
                    "keys; set EVENTSPACE_KEYS to the run's key directory (see `eventspace keys generate`)")
        key = f" (this client expects the one in {sec.keys}/server.key)" if sec.keys else ""
        return (f"the CURVE handshake failed: the server does not use CURVE, or uses another server "
                f"key{key}")

    def close(self) -> None:
        """Stop watching (before or after the socket closes, also while its context ends)."""
        if not self._sock.closed:
            try:
                self._sock.disable_monitor()
            except zmq.ZMQError:
                pass   # the context is ending: the monitor goes with the socket
        self._events.close(linger=0)
