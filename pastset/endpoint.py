"""A node server's ZeroMQ endpoint: one ROUTER socket and the loop thread that answers its requests."""

from __future__ import annotations

import itertools
import os
import threading
import traceback
from collections import deque
from operator import attrgetter, methodcaller
from time import monotonic
from urllib.parse import urlsplit

import msgpack
import zmq

from . import protocol as p
from .budget import release_freed
from .caller import Caller
from .checks import check_index, check_timeout
from .deferred import Deferred, waited
from .element import FIND, MOVE, OBSERVE, WOULD_BLOCK, Element
from .errors import (AuthError, BadArgument, EventSpaceError, LimitExceeded, PastSetError, ProtocolError, Timeout,
                     hosted_failure)
from .parking import Parked, Parking
from .security import Security
from .table import read_once
from .template import Template
from .workers import Workers


class Endpoint:
    """One ROUTER socket of a `TupleServer` and the loop thread that answers it.

    The loop never blocks on an element: a request that must wait is parked with its element
    (`pastset.parking`), retried whenever the element changes, and answered with Timeout when its
    deadline passes. In-process threads that change an element with parked requests wake the loop
    through a private inproc socket (the only socket touched outside the loop thread, always under
    `_waker_mutex`). Hosted calls run on worker threads, which hand their replies to the loop.

    Shares, so that one client cannot take what the others need (a client here is one
    connection, a ROUTER peer: `pastset.Client` opens one per thread):
    - Parked requests: see `pastset.parking.Parking`.
    - Deferred calls (inline hosted calls waiting on other servers): a client may have
      `Limits.max_deferred_per_client` on their way, and the endpoint `Limits.max_calls` in all,
      of which the last tenth is kept for clients with fewer than `FEW_DEFERRED` (a monitor's pull
      is one at a time); as for parked requests, the refused get LimitExceeded at once.
    - Replies: one reply is at most `Limits.max_reply` bytes. A batch read whose reply would
      be bigger is refused before anything is read, from the sizes of what it names (an
      element named twice is read once, but sent twice). Every reply is counted in the memory
      budget (its bytes and ZeroMQ's `_ENVELOPE`) from when it is handed to ZeroMQ until ZeroMQ
      has written it to its connection (or dropped it with its peer), and a client may have at
      most twice `Limits.max_reply` of them unread, and at most `_BIG_UNREAD` of `_TRACKED` bytes
      or more: past that, or past the budget, it is answered LimitExceeded instead (a read is
      refused before anything is read). Errors and probes are counted but not refused; to a
      client more than `_SLACK` beyond its share they are dropped (it reads nothing anyway).
      ZeroMQ tells when it has let go of a message only for one sent without a copy and
      tracked, which costs some 12 µs: a reply is sent so when the replies to its peer since
      its last tracked one, it included, reach `_MARK` bytes (so every reply that big is), the
      others are copied; a peer left with fewer gets an empty tracked frame at the next probe
      (clients ignore empty frames). ZeroMQ writes a peer's messages in order, so a tracked one
      let go of means every one before it was too.
    """

    def __init__(self, server, bind: str, security: Security):
        """Bind `bind` for `server` (a TupleServer) and start answering."""
        self.server = server
        self.table = server.table
        self.limits = server.limits
        self._serial = next(_ENDPOINTS)   # with a peer id, names a client of this endpoint
        self.msgs_in = self.bytes_in = self.msgs_out = self.bytes_out = 0   # TupleServer.traffic
        # Replies (and reads whose replies could be) of this many bytes or more are checked against
        # Limits.max_reply (smaller ones only when their client nears its share of unread replies).
        self._big = min(_TRACKED, self.limits.max_reply + 1)
        self._ctx = zmq.Context()
        sock = self._sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # libzmq drops a peer that sends a message far beyond the frame limit before we
        # allocate it; anything between the two limits gets a proper error reply.
        sock.setsockopt(zmq.MAXMSGSIZE, 2 * self.limits.max_frame)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        # CURVE is the socket's and the ZAP thread's business, settled per connection at its
        # handshake: the loop below does no per-request work for it.
        try:
            self._auth = security.start_server(self._ctx, sock)
        except AuthError:
            self._ctx.destroy(linger=0)
            raise
        # Under CURVE a request's frame carries the key its client authenticated with (a hosted
        # call may ask, see Caller): frames are received as zmq.Frames then, the last one kept.
        self._recv = self._recv_plain if self._auth is None else self._recv_keyed
        self._request: zmq.Frame | None = None
        try:
            self.endpoint = _bind(sock, bind)
        except zmq.ZMQError as exc:
            self._destroy()
            raise PastSetError(f"cannot bind {bind}: {exc}") from None
        inproc = f"inproc://pastset-waker-{id(self)}"
        sock.bind(inproc)
        self._waker_id = b"!waker-" + os.urandom(16)
        self._waker = self._ctx.socket(zmq.DEALER)
        self._waker.setsockopt(zmq.ROUTING_ID, self._waker_id)
        self._waker.setsockopt(zmq.LINGER, 0)
        self._waker.connect(inproc)
        self._waker_mutex = threading.Lock()

        self._parking = Parking(self.limits, server.name, self._answer, self._wake, server.element_changed)
        self._lost: list[bytes] = []               # peers a send found disconnected
        self._workers = Workers(self.limits.max_calls, f"pastset-{server.name}-call")   # for hosted calls
        self._calls = 0                            # hosted calls running
        self._replies: deque = deque()             # (peer, rid, payload) finished by workers
        # Replies ZeroMQ may still hold (see the class docstring), counted in the memory budget.
        self._unread: dict[bytes, int] = {}        # peer -> bytes of its replies ZeroMQ may hold
        self._loose: dict[bytes, int] = {}         # peer -> of them, sent since its last tracked one
        self._in_flight: list = []                 # (tracker, peer, bytes it gives back when done, big?)
        self._share = 2 * self.limits.max_reply    # bytes of replies one peer may leave unread
        self._mark = min(_MARK, self._share // 16)
        self._credit = 0                           # bytes taken from the budget for replies to come
        self._held = 0                             # bytes of replies ZeroMQ may hold, for every peer
        self._held_peak = 0                        # the most of them since the heap was last trimmed
        self._unread_big: dict[bytes, int] = {}    # peer -> its replies of _TRACKED bytes or more in flight
        self._next_probe = 0.0
        self._rcvtimeo = -1
        self._stopping = False
        self._ops = self._op_table()
        # Deferred answers of inline hosted calls, by (peer, rid), and the sockets of theirs this
        # loop polls beside its own (see pastset.deferred).
        self._deferred: dict[tuple, Deferred] = {}
        self._deferred_of: dict[bytes, int] = {}   # peer -> how many of them are its
        self._watched: dict[zmq.Socket, Deferred] = {}
        self._sockets_of: dict[Deferred, list] = {}
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        # Replies from the loop thread share one Packer (packb would build one per reply); those of
        # reads, which may be big, another (see _pack_read).
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=False)
        self._thread = threading.Thread(target=self._run, name=f"pastset-{server.name}", daemon=True)
        self._thread.start()

    def element_changed(self, element: Element) -> None:
        """Called, element mutex held, by whichever thread changed an element with parked requests."""
        self._parking.changed(element)

    def close(self):
        self._stopping = True
        self._wake()
        self._thread.join(timeout=5)
        self._parking.close()
        self.server.budget.give(sum(self._unread.values()) + self._credit)   # dropped with the context below
        self._credit = 0
        self._unread.clear()
        self._loose.clear()
        self._unread_big.clear()
        self._in_flight.clear()
        self._workers.close()
        self._waker.close(linger=0)
        self._destroy()

    def _destroy(self):
        if self._auth is not None:
            self._auth.stop()  # its sockets live in the context: before destroying it
        self._ctx.destroy(linger=0)

    # -- the loop --------------------------------------------------------------------------------

    def _run(self):
        parking = self._parking
        parking.loop_ident = threading.get_ident()
        recv, handle = self._recv, self._handle
        while not self._stopping:
            try:
                frames = recv() if not self._deferred else self._poll_deferred()
            except zmq.Again:
                frames = None
            except zmq.ZMQError:
                break  # context terminated
            try:
                if frames is not None:
                    handle(frames)
                if self._deferred:
                    self._settle_deferred()
                if parking.dirty:
                    parking.service()
                if parking.deadlines:
                    parking.expire(self._timed_out)
                    self._set_rcvtimeo()
                if (parking.by_peer or self._loose) and monotonic() >= self._next_probe:
                    self._probe()
                while self._replies:
                    self._calls -= 1
                    self._deliver(*self._replies.popleft())
                while self._lost:
                    self._forget(self._lost.pop())
                if self._in_flight:
                    self._reclaim()
            except Exception:  # a bug must not stop a server that others depend on
                traceback.print_exc()
        for deferred in self._deferred.values():
            self._unwatch(deferred)
        self._deferred.clear()
        self._deferred_of.clear()
        self._sock.close(linger=0)

    def _recv_plain(self, flags=0) -> list[bytes]:
        """A request's frames: a ROUTER's message is its peer's id and at least one frame, read as
        two, then one look whether more follow (recv_multipart looks after each: some 2 µs of a
        round trip)."""
        sock = self._sock
        frames = [sock.recv(flags), sock.recv(flags)]
        while sock.get(_RCVMORE):
            frames.append(sock.recv(flags))
        return frames

    def _recv_keyed(self, flags=0) -> list[bytes]:
        """A request's frames, its last one kept for the CURVE key of its client (see _caller)."""
        frames = self._sock.recv_multipart(flags, copy=False)
        self._request = frames[-1]
        return [f.bytes for f in frames]

    def _caller(self, peer) -> Caller:
        """Who sent the request being handled: its connection, and under CURVE its key."""
        key = self._request.get("User-Id") if self._request is not None else None
        return Caller((self._serial, peer), key)

    # -- deferred answers: hosted calls that wait on other servers, carried by this loop ---------

    def _defer(self, peer, rid, deferred: Deferred) -> None:
        if deferred.done:
            self._deliver_deferred(peer, rid, deferred)
            return
        self._deferred[(peer, rid)] = deferred
        self._deferred_of[peer] = self._deferred_of.get(peer, 0) + 1
        self._watch(deferred)

    def _watch(self, deferred: Deferred) -> None:
        """Poll the deferred's sockets as they are now (it may have opened or closed some) beside ours."""
        now, had = deferred.sockets(), self._sockets_of.get(deferred, ())
        if now == had:
            return
        for s in had:
            if s not in now:
                del self._watched[s]
                self._poller.unregister(s)   # before the fan-out closes it
        for s in now:
            if s not in had:
                self._watched[s] = deferred
                self._poller.register(s, zmq.POLLIN)
        self._sockets_of[deferred] = now

    def _unwatch(self, deferred: Deferred) -> None:
        for s in self._sockets_of.pop(deferred, ()):
            del self._watched[s]
            self._poller.unregister(s)

    def _poll_deferred(self):
        """With deferred answers on their way: wait for a request or for input of theirs, until
        the next of their wake-ups (or the loop's own timeout); a request's frames, or None."""
        wake = min(d.wake_at() for d in self._deferred.values())
        ms = max(0, int((wake - monotonic()) * 1000) + 1)
        if self._rcvtimeo >= 0:
            ms = min(ms, self._rcvtimeo)
        request = False
        for s, _ in self._poller.poll(ms):
            if s is self._sock:
                request = True
            else:
                deferred = self._watched.get(s)
                if deferred is not None and not deferred.done:
                    _step(deferred, deferred.readable, s)
        return self._recv(zmq.NOBLOCK) if request else None

    def _settle_deferred(self) -> None:
        """Give each deferred answer its tick, send those done, and poll the sockets each uses now."""
        now = monotonic()
        for key, deferred in list(self._deferred.items()):
            if not deferred.done and now >= deferred.wake_at():
                _step(deferred, deferred.tick)
            if deferred.done:
                del self._deferred[key]
                peer = key[0]
                left = self._deferred_of[peer] - 1
                if left:
                    self._deferred_of[peer] = left
                else:
                    del self._deferred_of[peer]
                self._unwatch(deferred)
                self._deliver_deferred(*key, deferred)
            else:
                self._watch(deferred)

    def _deliver_deferred(self, peer, rid, deferred: Deferred) -> None:
        try:
            payload = p.pack([rid, p.OK, deferred.result()])
        except EventSpaceError as exc:
            payload = p.error_reply(rid, exc)
        except Exception as exc:
            payload = p.error_reply(rid, hosted_failure("a deferred call", exc))
        self._deliver(peer, rid, payload)

    def _handle(self, frames):
        if len(frames) != 2:
            if len(frames) > 2:
                self._send(frames[0], p.error_reply(None, ProtocolError("a request is exactly one frame")))
            return
        peer, frame = frames
        if peer == self._waker_id:
            return  # a wake-up: the loop services dirty elements next
        self.msgs_in += 1
        self.bytes_in += len(frame)
        try:
            rid, op, args = p.unpack_request(frame, self.limits)
        except ProtocolError as exc:
            self._send(peer, p.error_reply(p.request_id(frame), exc))
            return
        try:
            handler, arity = self._ops[op] if 0 <= op < len(self._ops) else (None, 0)
            if handler is None:
                raise p.unknown_operation(op)
            if len(args) != arity:
                raise p.wrong_count(op, arity, len(args))
            result = handler(peer, rid, *args)
        except EventSpaceError as exc:
            self._send(peer, p.error_reply(rid, exc))
            return
        except Exception as exc:  # a hostile or buggy request must not stop the loop
            self._send(peer, p.error_reply(rid, p.bad_arguments(op, exc)))
            return
        if result is not _ANSWERED:
            self._deliver(peer, rid, (self._pack_read if op in _READS else self._pack)([rid, p.OK, result]))

    # -- replies ---------------------------------------------------------------------------------

    def _pack_read(self, reply):
        """The frame of `reply` to a read: bytes, or, for one of _TRACKED bytes or more, a view of
        the Packer's own buffer, sent without a copy (ZeroMQ keeps it, and with it that Packer, until
        it has sent it; the loop takes a new one). A copy of a big reply is fresh memory, which costs
        more than the copy: a page fault every 4 KiB, 25-45 ms for 10 MB on a virtual machine. (Half
        a microsecond more than `_pack` for a small one.)"""
        packer = self._packer
        packer.pack(reply)
        view = packer.getbuffer()
        if len(view) < _TRACKED:
            frame = bytes(view)
            view.release()
            packer.reset()
            return frame
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=False)
        return view

    def _deliver(self, peer, rid, payload) -> bool:
        """Send the reply to request `rid`; or LimitExceeded instead, and False, if it is over
        Limits.max_reply, or its peer's share of unread replies or the memory budget cannot take it."""
        size = len(payload) + _ENVELOPE
        unread = self._unread.get(peer, 0)
        if size > self._credit or size >= self._big or unread + size > self._share:
            try:
                self._check_reply(size - _ENVELOPE, "this request")
                self._reclaim()
                self._check_unread(peer, size)
                self._take(size, False)
            except LimitExceeded as exc:
                self._send(peer, p.error_reply(rid, exc))
                return False
            unread = self._unread.get(peer, 0)
        self._credit -= size
        return self._queue(peer, unread, payload, size, False)

    def _send(self, peer, payload, track: bool = False) -> bool:
        """Send what the server owes whatever its budget (an error, a probe): counted, never refused;
        dropped (False) if its peer is more than _SLACK past its share, or gone."""
        size = len(payload) + _ENVELOPE
        unread = self._unread.get(peer, 0)
        if unread + size > self._share + _SLACK:
            return False
        if size > self._credit:
            self._take(size, True)
        self._credit -= size
        return self._queue(peer, unread, payload, size, track)

    def _take(self, size: int, owed: bool) -> None:
        """Take from the memory budget what the credit lacks for a reply of `size` bytes, and _CREDIT
        more if the budget has it (so that most replies take no lock); LimitExceeded if it has not,
        unless the reply is `owed`: then it is counted anyway."""
        need = size - self._credit
        budget = self.server.budget
        try:
            budget.take_reply(need + _CREDIT, "a reply")
            self._credit += need + _CREDIT
        except LimitExceeded:
            if owed:
                budget.charge(need)
            else:
                budget.take_reply(need, f"a reply of {size:,} bytes")
            self._credit += need

    def _queue(self, peer, unread: int, payload, size: int, track: bool) -> bool:
        """Hand `payload` to ZeroMQ for `peer` (which has `unread` bytes of replies ZeroMQ may hold),
        its `size` taken from the credit already (and given back if it cannot be sent): copied, or
        tracked (see the class docstring)."""
        loose = self._loose.get(peer, 0) + size
        track = track or loose >= self._mark
        # Counted before it is sent: its peer, once answered, reads the counts with it in them.
        self.msgs_out += 1
        self.bytes_out += len(payload)
        try:
            # Two plain sends with int flags: send_multipart combines enum flags per frame,
            # which costs more than the rest of a small reply.
            self._sock.send(peer, _MORE_NOWAIT)
            if track:
                tracker = self._sock.send(zmq.Frame(payload, copy=False, track=True), _NOWAIT, copy=False, track=True)
            else:
                self._sock.send(payload, _NOWAIT)
        except zmq.ZMQError as exc:
            self.msgs_out -= 1
            self.bytes_out -= len(payload)
            self._credit += size
            if exc.errno == zmq.EHOSTUNREACH:
                self._lost.append(peer)
            return False
        self._unread[peer] = unread + size
        self._held += size
        if self._held > self._held_peak:
            self._held_peak = self._held
        if track:
            self._loose.pop(peer, None)
            big = size >= _TRACKED
            if big:
                self._unread_big[peer] = self._unread_big.get(peer, 0) + 1
            self._in_flight.append((tracker, peer, loose, big))
            if len(self._in_flight) == 1:
                self._set_rcvtimeo()
        else:
            first = not self._loose
            self._loose[peer] = loose
            if first:   # after it is counted: the receive timeout is set from what is loose
                self._arm_probe()
        return True

    def _reclaim(self):
        """Give back to the budget the replies ZeroMQ has let go of (sent, or dropped with their peer)."""
        still = []
        given = 0
        for entry in self._in_flight:
            tracker, peer, size, big = entry
            if tracker.done:
                given += size
                left = self._unread[peer] - size
                if left:
                    self._unread[peer] = left
                else:
                    del self._unread[peer]
                if big:
                    left = self._unread_big[peer] - 1
                    if left:
                        self._unread_big[peer] = left
                    else:
                        del self._unread_big[peer]
            else:
                still.append(entry)
        if given:
            self._in_flight = still
            self._give_back(given)
            if not still:
                self._set_rcvtimeo()

    def _forget(self, peer) -> None:
        """`peer` is gone: drop its parked requests, and give back its replies ZeroMQ dropped with it
        (the tracked ones come back as their trackers say)."""
        self._parking.forget(peer)
        loose = self._loose.pop(peer, 0)
        if loose:
            left = self._unread[peer] - loose
            if left:
                self._unread[peer] = left
            else:
                del self._unread[peer]
            self._give_back(loose)
            if not self._loose:
                self._set_rcvtimeo()

    def _give_back(self, nbytes: int) -> None:
        """`nbytes` of replies are gone: back to the credit, and what the credit holds beyond _CREDIT
        (all of it once no reply is unread) to the budget. After a burst (replies held reached
        _TRIM_PEAK, and are down to a quarter of that) their memory goes back to the system: not
        after every reply, since memory the system has to give again costs a page fault every 4 KiB
        (10 MB: 25-45 ms on a virtual machine, where a warm heap packs a 10 MB reply in 4 ms)."""
        credit = self._credit + nbytes
        keep = _CREDIT if self._unread else 0
        if credit > keep:
            self.server.budget.give(credit - keep)
            credit = keep
        self._credit = credit
        self._held -= nbytes
        if self._held_peak >= _TRIM_PEAK and self._held <= self._held_peak // 4:
            release_freed()
            self._held_peak = self._held

    def _check_reply(self, nbytes: int, what: str) -> None:
        if nbytes > self.limits.max_reply:
            raise LimitExceeded(
                f"{what} would be answered with about {nbytes:,} bytes, over the {self.limits.max_reply:,}-byte "
                "reply limit (Limits.max_reply); ask for fewer elements or tuples at once, or raise the limit")

    def _check_unread(self, peer, nbytes: int) -> None:
        """LimitExceeded if `peer` may not have `nbytes` more of replies unread, or (for a reply of
        _TRACKED bytes or more) another big one: a slow reader holds at most _BIG_UNREAD of them, and
        every new one costs the loop fresh memory."""
        unread = self._unread.get(peer, 0)
        if unread + nbytes > self._share:
            raise LimitExceeded(
                f"this client has {unread:,} bytes of replies it has not read yet; read them before asking "
                f"for more (a client may have up to twice Limits.max_reply = {self._share:,} "
                "bytes of replies unread)")
        if nbytes >= _TRACKED and self._unread_big.get(peer, 0) >= _BIG_UNREAD:
            raise LimitExceeded(
                f"this client has {_BIG_UNREAD} replies of a megabyte or more it has not read yet; read them "
                "before asking for another")

    def _check_read(self, peer, bound: int, what: str, size) -> None:
        """Refuse a read before reading if its reply would pass Limits.max_reply or its client's share
        of big replies in flight: `bound` is a quick upper bound of the reply's size (what the elements
        hold, as charged to the memory budget), `size()` the size of what the read would return."""
        if bound >= self._big and (bound > self.limits.max_reply or self._unread.get(peer, 0) + bound > self._share
                                   or peer in self._unread_big):
            self._reclaim()
            nbytes = size()
            self._check_reply(nbytes, what)
            self._check_unread(peer, nbytes)

    # How often peers with parked requests are probed (an empty frame, which clients ignore):
    # ROUTER_MANDATORY makes a send to a disconnected peer fail, and its requests are dropped.
    _PROBE_INTERVAL = 2.0

    def _probe(self):
        """Probe the peers with parked requests, and those with loose replies: an empty frame, tracked
        (so it tells when the replies before it are gone too, see the class docstring)."""
        for peer in {*self._parking.by_peer, *self._loose}:
            self._send(peer, b"", True)
        self._next_probe = monotonic() + self._PROBE_INTERVAL

    def _arm_probe(self):
        """Probe within _PROBE_INTERVAL from now (not at once, if the last probe was long ago)."""
        now = monotonic()
        if self._next_probe < now:
            self._next_probe = now + self._PROBE_INTERVAL
        self._set_rcvtimeo()

    def _set_rcvtimeo(self):
        deadline = self._parking.next_deadline()
        ms = -1 if deadline is None else max(1, int((deadline - monotonic()) * 1000) + 1)
        if self._parking.by_peer or self._loose:
            ms = min(ms if ms > 0 else 1 << 30, int(self._PROBE_INTERVAL * 1000))
        if self._in_flight:   # to give the budget back soon after ZeroMQ sent them
            ms = min(ms if ms > 0 else 1 << 30, _RECLAIM_MS)
        if ms != self._rcvtimeo:
            self._sock.setsockopt(zmq.RCVTIMEO, ms)
            self._rcvtimeo = ms

    # -- operations --------------------------------------------------------------------------------

    def _op_table(self):
        table = [(None, 0)] * (max(p.OP_NAMES) + 1)
        for op, handler, arity in (
            (p.PING, lambda peer, rid: [self.server.name, self.limits.max_frame], 0),
            (p.ENTER, self._op_enter, 4),
            (p.LOOKUP, self._op_lookup, 1),
            (p.MOVE, self._op_move, 3),
            (p.OBSERVE, self._op_observe, 3),
            (p.FIRST, lambda peer, rid, eid: self.table.find(eid).first(), 1),
            (p.LAST, lambda peer, rid, eid: self.table.find(eid).last(), 1),
            (p.DELTA, lambda peer, rid, eid, n: self.table.find(eid).delta(n), 2),
            (p.AXE, lambda peer, rid, eid, i: self.table.find(eid).axe(i), 2),
            (p.READ_RANGE, self._op_read_range, 3),
            (p.LATEST, self._op_latest, 2),
            (p.LATEST_MANY, self._op_latest_many, 2),
            (p.DELETE, lambda peer, rid, name: self.server.delete(name), 1),
            (p.ELEMENTS, self._op_elements, 2),
            (p.FIND, self._op_find, 4),
            (p.CALL, self._op_call, 2),
            (p.RANGE_MANY, self._op_range_many, 3),
            (p.OBSERVE_INDEXED, self._op_observe_indexed, 3),
            (p.LATEST_RECORDS, self._op_latest_records, 2),
            (p.LATEST_RECORDS_COUNTED, self._op_latest_records_counted, 2),
        ):
            table[op] = (handler, arity)
        return table

    @staticmethod
    def _describe(element):
        return [element.id, element.template.spec, element.keep, element.delta()]

    def _op_enter(self, peer, rid, name, spec, keep, delta):
        return self._describe(self.table.enter(name, Template.of(spec), keep, delta, (self._serial, peer)))

    def _op_lookup(self, peer, rid, name):
        return self._describe(self.table.named(name))

    def _op_elements(self, peer, rid, start, most):
        """A page of the element table: at most ELEMENTS_PAGE elements (`most`, if fewer) in name order
        from `start` on (None: the first), and the name the next page starts at (None: no more)."""
        if not (start is None or start.__class__ is str) or most.__class__ is not int or most < 1:
            raise BadArgument("elements takes the name to list from (or None) and how many to list at most")
        elements, after = self.table.page(start, min(most, p.ELEMENTS_PAGE))
        return [[[i.name, i.template, i.first, i.last, i.keep, i.delta, i.nbytes] for i in map(Element.info, elements)],
                after]

    def _op_latest(self, peer, rid, eid, n):
        element = self.table.find(eid)
        if element.held_charge >= self._big:
            self._check_read(peer, element.held_charge, "latest", lambda: element.read_size(newest=n))
        return element.latest(n)

    def _op_read_range(self, peer, rid, eid, lo, hi):
        element = self.table.find(eid)
        if element.held_charge >= self._big:
            self._check_read(peer, element.held_charge, "read_range", lambda: element.read_size(lo, hi))
        return element.read_range(lo, hi)

    def _batch(self, what, refs) -> list[Element]:
        """The elements a batch read names (ids or names), in order."""
        if not isinstance(refs, list) or len(refs) > self.limits.max_batch:
            raise BadArgument(f"{what} takes a list of at most {self.limits.max_batch} element ids or names")
        return self.table.find_all(refs)

    def _check_batch(self, peer, what, elements, keys, size_of) -> None:
        """_check_read for a batch read of `elements`; `size_of(key)` for each of `keys`."""
        self._check_read(peer, sum(map(_HELD_CHARGE, elements)), what, lambda: sum(read_once(keys, size_of)))

    def _op_latest_records(self, peer, rid, refs, n):
        elements = self._batch("latest_records", refs)
        self._check_batch(peer, "latest_records", elements, elements, lambda e: e.read_size(newest=n))
        return self.server.latest_records(elements, n)

    def _op_latest_records_counted(self, peer, rid, refs, n):
        elements = self._batch("latest_records", refs)
        self._check_batch(peer, "latest_records", elements, elements, lambda e: e.read_size(newest=n))
        return self.server.latest_records_counted(elements, n)

    def _op_latest_many(self, peer, rid, refs, n):
        elements = self._batch("latest_many", refs)
        self._check_batch(peer, "latest_many", elements, elements, lambda e: e.read_size(newest=n))
        return read_once(elements, methodcaller("latest", n))   # no Python frame per element

    def _op_range_many(self, peer, rid, refs, los, hi):
        """read_range(lo, hi) of many elements (a monitor's stream over many trace elements)."""
        if not isinstance(refs, list) or not isinstance(los, list) or len(refs) != len(los):
            raise BadArgument(f"range_many takes equal lists of at most {self.limits.max_batch} "
                              "element ids or names and of start indices, and an end index")
        elements = self._batch("range_many", refs)
        for index in (*los, hi):
            check_index(index)
        keys = list(zip(elements, los))
        self._check_batch(peer, "range_many", elements, keys, lambda k: k[0].read_size(k[1], hi))
        return read_once(keys, lambda k: k[0].read_range(k[1], hi))

    def _op_call(self, peer, rid, name, args):
        fn, inline = self.server.hosted(name, self._caller(peer))
        if not isinstance(args, list):
            raise BadArgument("call takes a name and a list of arguments")
        if inline:
            self._check_deferred_share(peer)
            result = fn(*args)
            if isinstance(result, Deferred):
                self._defer(peer, rid, result)
                return _ANSWERED
            return result
        if self._calls >= self.limits.max_calls:
            raise LimitExceeded(f"server {self.server.name} already runs {self.limits.max_calls} hosted calls")
        self._calls += 1
        self._workers.submit(lambda: self._run_call(peer, rid, name, fn, args))
        return _ANSWERED

    def _check_deferred_share(self, peer) -> None:
        """LimitExceeded unless `peer` may have one more deferred call on its way (see the class)."""
        limits = self.limits
        held = self._deferred_of.get(peer, 0)
        if held >= limits.max_deferred_per_client:
            raise LimitExceeded(
                f"this client (one connection) already has {held} calls waiting on other servers at server "
                f"{self.server.name}, its share (Limits.max_deferred_per_client = "
                f"{limits.max_deferred_per_client}); wait for their answers before asking more")
        reserve = 0 if held < FEW_DEFERRED else limits.max_calls // 10
        if len(self._deferred) >= limits.max_calls - reserve:
            kept = f", the last {reserve} of them kept for clients with fewer than {FEW_DEFERRED}" if reserve else ""
            raise LimitExceeded(
                f"server {self.server.name} already carries {len(self._deferred)} calls waiting on other servers "
                f"(Limits.max_calls = {limits.max_calls}{kept}); try again later, or raise the limit")

    def _run_call(self, peer, rid, name, fn, args):
        """On a worker thread: run the hosted callable, hand the reply to the loop."""
        try:
            payload = p.pack([rid, p.OK, waited(fn(*args))])
        except EventSpaceError as exc:
            payload = p.error_reply(rid, exc)
        except Exception as exc:
            payload = p.error_reply(rid, hosted_failure(name, exc))
        self._replies.append((peer, rid, payload))
        self._wake()

    # -- blocking operations: attempt now, or park until the element changes ----------------

    def _op_move(self, peer, rid, eid, values, timeout):
        return self._attempt_or_park(Parked(peer, rid, self.table.find(eid), p.MOVE, MOVE, values, False,
                                            _deadline(timeout)), timeout)

    def _op_observe(self, peer, rid, eid, index, timeout):
        return self._attempt_or_park(Parked(peer, rid, self.table.find(eid), p.OBSERVE, OBSERVE, index,
                                            index is None, _deadline(timeout)), timeout)

    def _op_observe_indexed(self, peer, rid, eid, index, timeout):
        return self._attempt_or_park(Parked(peer, rid, self.table.find(eid), p.OBSERVE_INDEXED, OBSERVE, index,
                                            index is None, _deadline(timeout)), timeout)

    def _op_find(self, peer, rid, eid, pattern, remove, timeout):
        element = self.table.find(eid)
        pattern = element.check_pattern(pattern)
        return self._attempt_or_park(Parked(peer, rid, element, p.FIND, FIND, pattern, bool(remove),
                                            _deadline(timeout)), timeout)

    def _attempt_or_park(self, waiter: Parked, timeout):
        element = waiter.element
        with element.mutex:
            if self._answer(waiter):
                return _ANSWERED
            if timeout == 0:
                raise Timeout(f"{p.OP_NAMES[waiter.op]} on element {element.name} would block")
            self._parking.park(waiter)
        self._arm_probe()
        return _ANSWERED

    def _answer(self, waiter: Parked) -> bool:
        """Try the request once (element mutex held) and send its reply; True when it was answered.

        A consumed or taken tuple is removed only after its reply was handed to the peer,
        so a consumer that disconnected while parked loses nothing and takes nothing.
        """
        peer, rid, element = waiter.peer, waiter.rid, waiter.element
        try:
            found = element.attempt(waiter.kind, waiter.arg)
            if found is WOULD_BLOCK:
                return False
            if waiter.kind == MOVE:
                self._send(peer, self._pack([rid, p.OK, found]))
                return True
            reply = found if waiter.op == p.OBSERVE_INDEXED else found[1]
            # A tuple is at most what its element holds: from a small element, packed as bytes at once.
            pack = self._pack_read if element.held_charge >= _TRACKED else self._pack
            if self._deliver(peer, rid, pack([rid, p.OK, reply])) and waiter.consumes:
                element.commit(found[0])
            return True
        except PastSetError as exc:
            self._send(peer, p.error_reply(rid, exc))
            return True

    def _timed_out(self, waiter: Parked) -> None:
        self._send(waiter.peer, p.error_reply(waiter.rid, Timeout(
            f"{p.OP_NAMES[waiter.op]} on element {waiter.element.name} timed out")))

    def _wake(self):
        with self._waker_mutex:
            try:
                self._waker.send(b"w", zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # a wake-up is already queued, or the endpoint is closing


_ANSWERED = object()
# Clients with fewer deferred calls on their way than this may use the reserve of Limits.max_calls.
FEW_DEFERRED = 4
_ENDPOINTS = itertools.count()
# A reply this big is sent from the buffer it was packed in (see _pack_read), and a client may leave at
# most _BIG_UNREAD of them unread: one it reads, and one it asked for next (ZeroMQ tells it sent the
# first a moment after it has).
_TRACKED = 1 << 20
_BIG_UNREAD = 2
# The operations whose replies may be big: the reads, and hosted calls (a scope join's pull).
_READS = frozenset({p.READ_RANGE, p.LATEST, p.LATEST_MANY, p.RANGE_MANY, p.LATEST_RECORDS, p.LATEST_RECORDS_COUNTED,
                    p.CALL})
# A peer's replies sent since its last tracked one make the next one tracked once they reach this
# many bytes (or a sixteenth of its share, if less): one small reply in hundreds, and every reply
# whose copy would cost more than tracking it (pyzmq's tracking costs some 12 µs a message).
_MARK = 64 * 1024
# What ZeroMQ holds for a reply besides its bytes: the message for its peer's id and its own, in
# its queue (64 bytes each), and the header and allocation of a copy.
_ENVELOPE = 192
# Replies take their bytes from the memory budget this many at a time (see _take).
_CREDIT = 256 * 1024
# Errors and probes may pass a peer's share by this much before they are dropped.
_SLACK = 1 << 20
# The heap is trimmed (see budget.release_freed) when the replies held, after reaching this many
# bytes, are down to a quarter of that (see _give_back).
_TRIM_PEAK = 64 << 20
_RECLAIM_MS = 10
_HELD_CHARGE = attrgetter("held_charge")
_NOWAIT = int(zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)
_MORE_NOWAIT = int(zmq.SNDMORE | zmq.NOBLOCK)


def _step(deferred: Deferred, step, *args) -> None:
    """Move a deferred answer on; if that raises, it ends with the error (a bug in one call must
    not stop the loop that carries every other)."""
    try:
        step(*args)
    except Exception as exc:
        deferred.fail(exc)


def _deadline(timeout):
    return None if check_timeout(timeout) is None else monotonic() + timeout


def _bind(sock, bind: str) -> str:
    """Bind, turning port 0 into a free port; returns the endpoint actually bound."""
    parts = urlsplit(bind)
    if parts.scheme == "tcp" and parts.port == 0:
        bind = f"tcp://{parts.hostname}:*"
    sock.bind(bind)
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)
