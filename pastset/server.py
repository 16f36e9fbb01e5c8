"""The node server: hosts elements for in-process callers and, once served, for remote clients."""

from __future__ import annotations

import difflib
import heapq
import itertools
import os
import threading
import traceback
from bisect import bisect_left
from collections import deque
from operator import attrgetter, methodcaller
from time import monotonic
from urllib.parse import urlsplit

import msgpack
import zmq

from . import protocol as p
from .budget import MemoryBudget
from .element import (WOULD_BLOCK, Element, ElementInfo, RingSlab, _check_index, _check_pattern, _check_timeout,
                      make_element, ring_slots)
from .errors import (AuthError, BadArgument, LimitExceeded, PastSetError, ProtocolError, TemplateMismatch,
                     Timeout, UnknownElement)
from .security import Security, resolve
from .template import Template


class TupleServer:
    """A PastSet node server: a table of elements, usable in-process and over ZeroMQ.

    In-process callers use the elements directly (a lock and a memory copy). `serve()` adds a
    ZeroMQ ROUTER endpoint through which `pastset.connect` clients reach the same elements.
    Thread-safe; every method may be called from any thread.

    What it holds is bounded by its `Limits` (each breach is a LimitExceeded naming the limit):
    - Memory: one budget (`max_memory`, `self.budget`) for its elements' objects, rings and held
      tuples and for big replies in flight, taken before anything is allocated. In-process callers
      are held to it as remote ones are: it is one table in one process, and a node's own elements
      must leave room for what its clients enter (raise the limit for a bigger workload).
    - Elements: `max_elements` in all; a remote client (one connection) may create at most
      `max_elements_per_client` of them, so that a runaway one is refused before its neighbours
      are. An element outlives its creator and any client may bind to it, delete it, or create it
      again, so the share counts what a connection created that still exists. It stops one client
      that loops; a client that reconnects gets a new share, which is why the table as a whole is
      bounded too (count and memory).
    - Blocked requests parked by remote clients: see _Endpoint.
    """

    def __init__(self, name: str = "pastset", limits: p.Limits = p.Limits()):
        self.name = name
        self.limits = limits
        # Elements may hold all of it but room for two of the biggest replies: they can be read.
        self.budget = MemoryBudget(limits.max_memory, limits.max_ring, name,
                                   reserve=min(2 * limits.max_reply, limits.max_memory // 4))
        # The table mutex must be held whenever the element table changes.
        self._table = threading.Lock()
        self._by_name: dict[str, Element] = {}
        self._by_id: dict[int, Element] = {}
        self._ids = itertools.count(1)
        self._creators: dict[int, object] = {}   # element id -> the remote client that created it
        self._created: dict[object, int] = {}    # remote client -> elements it created that exist
        # The names, sorted, for "did you mean" (_close_names): names entered since are sorted in
        # when many have come or a lookup needs them; a delete makes the list stale.
        self._sorted: list[str] = []
        self._unsorted: list[str] = []
        self._sorted_stale = False
        self._endpoints: list[_Endpoint] = []
        self._hosted: dict[str, object] = {}
        self._inline: set[str] = set()   # hosted names that run on the endpoint loop

    def enter(self, name: str, template, keep: int | None = None, delta: int | None = None) -> Element:
        """Bind to the element `name`, creating it if absent.

        Entering an existing element with another template (or another explicit keep/delta)
        raises TemplateMismatch; keep/delta of None accept whatever the element has. Creating one
        past `Limits.max_elements`, or whose ring or objects the memory budget cannot hold, raises
        LimitExceeded.
        """
        return self._enter(name, template, keep, delta, None)

    def _enter(self, name, template, keep, delta, creator) -> Element:
        """`enter`, for `creator` (a remote client, held to its share; None: an in-process caller)."""
        template = Template.of(template)
        self._check_name(name)
        with self._table:
            element = self._by_name.get(name)
            if element is None:
                if len(self._by_name) >= self.limits.max_elements:
                    raise LimitExceeded(
                        f"server {self.name} already hosts {self.limits.max_elements} elements "
                        "(Limits.max_elements); delete some or raise the limit"
                    )
                if creator is not None and self._created.get(creator, 0) >= self.limits.max_elements_per_client:
                    raise LimitExceeded(
                        f"this client (one connection) created {self._created[creator]} elements on server "
                        f"{self.name} that still exist, its share (Limits.max_elements_per_client = "
                        f"{self.limits.max_elements_per_client}); delete some of them, or raise the limit"
                    )
                element = make_element(name, template, keep, delta, next(self._ids), budget=self.budget)
                self._add(element, creator)
                return element
        if element.template != template:
            raise TemplateMismatch(
                f"element {name} exists with template {element.template}, not {template}"
            )
        for what, asked, has in (("keep", keep, element.keep), ("delta", delta, element.delta())):
            if asked is not None and asked != has:
                raise TemplateMismatch(f"element {name} exists with {what}={has}, not {asked}")
        return element

    def element(self, name: str) -> Element:
        """The existing element `name`; raises UnknownElement (with close names) if absent."""
        element = self._by_name.get(name)
        if element is None:
            raise UnknownElement(self._unknown(name))
        return element

    def delete(self, name: str) -> None:
        """Remove the element; callers blocked on it get UnknownElement, and its memory goes back
        to the budget."""
        with self._table:
            element = self._by_name.pop(name, None)
            if element is not None:
                del self._by_id[element.id]
                creator = self._creators.pop(element.id, None)
                if creator is not None:
                    left = self._created[creator] - 1
                    if left:
                        self._created[creator] = left
                    else:
                        del self._created[creator]
                self._sorted_stale = True
        if element is None:
            raise UnknownElement(self._unknown(name))
        element._delete()

    def elements(self) -> list[ElementInfo]:
        """A snapshot of every element, sorted by name."""
        with self._table:
            hosted = sorted(self._by_name.values(), key=lambda e: e.name)
        return [e.info() for e in hosted]

    def latest_many(self, elements, n: int = 1) -> list[tuple[int, list | bytes]]:
        """`latest(n)` of many elements (Element objects or names) at once, in the given order."""
        return [(self.element(e) if isinstance(e, str) else e).latest(n) for e in elements]

    def enter_rings(self, names, template, keep: int) -> list[Element]:
        """Create many binary elements of one template and discard threshold whose rings are rows
        of one slab (pastset.element.RingSlab), so that `latest_records` reads the newest record of
        all of them in one vectorised step. Every name must be new (TemplateMismatch otherwise)."""
        template = Template.of(template)
        if not template.is_binary:
            raise TemplateMismatch(f"rings need a binary template, not {template}")
        names = list(names)
        for name in names:
            self._check_name(name)
        ring = ring_slots(keep, None) * template.record_size
        self.budget.check_ring(ring, f"the ring of element {names[0] if names else '-'}")
        made = []
        with self._table:
            if len(self._by_name) + len(names) > self.limits.max_elements:
                raise LimitExceeded(f"server {self.name} would host more than {self.limits.max_elements} "
                                    "elements (Limits.max_elements); delete some or raise the limit")
            taken = [n for n in names if n in self._by_name]
            if taken or len(set(names)) != len(names):
                raise TemplateMismatch(f"elements {', '.join(taken) or 'named twice'} exist already; "
                                       "rings are entered once, all new")
            # The slab's bytes are taken at once; each element gives its row back when deleted.
            self.budget.take(ring * len(names), f"{len(names)} rings of {ring:,} bytes")
            try:
                slab = RingSlab(template, keep, len(names))
                for row, name in enumerate(names):
                    made.append(make_element(name, template, keep, None, next(self._ids), slab, row, self.budget))
            except BaseException:
                for element in made:
                    element._delete()
                self.budget.give(ring * (len(names) - len(made)))
                raise
            for element in made:
                self._add(element, None)
        return made

    def _add(self, element: Element, creator) -> None:
        """Put a new element in the table (table mutex held)."""
        self._by_name[element.name] = element
        self._by_id[element.id] = element
        if creator is not None:
            self._creators[element.id] = creator
            self._created[creator] = self._created.get(creator, 0) + 1
        unsorted = self._unsorted
        unsorted.append(element.name)
        # Sorted in once they are a quarter as many as the sorted ones: a lookup never sorts many.
        if len(unsorted) > 1024 + len(self._sorted) // 4 and not self._sorted_stale:
            self._sort_names()

    def latest_records(self, elements, n: int = 1) -> bytes:
        """The newest `n` records of many binary elements (Element objects, names or ids), as one
        bytes, in the given order. UnknownElement for one that does not exist, TemplateMismatch
        for a typed one."""
        _check_index(n)
        by_name, by_id = self._by_name, self._by_id
        found = [by_name.get(ref) if isinstance(ref, str) else (ref if isinstance(ref, Element) else by_id.get(ref))
                 for ref in elements]
        slab = getattr(found[0], "_slab", None) if found and n == 1 else None
        if slab is not None and all(getattr(e, "_slab", None) is slab for e in found):
            return slab.newest(found)
        for ref, element in zip(elements, found):
            if element is None:
                raise UnknownElement(self._unknown(ref) if isinstance(ref, str)
                                     else f"no element with id {ref!r} on server {self.name}")
            if not hasattr(element, "latest_records"):
                raise TemplateMismatch(f"element {element.name} is typed; latest_records reads binary "
                                       "elements only (use latest_many)")
        return b"".join(_read_once(found, lambda element: element.latest_records(n)))

    def range_many(self, elements, los, hi: int) -> list[tuple[int, list | bytes]]:
        """`read_range(lo, hi)` of many elements (Element objects or names), each from its own lo."""
        return [(self.element(e) if isinstance(e, str) else e).read_range(lo, hi)
                for e, lo in zip(elements, los)]

    def host(self, name: str, fn, inline: bool = False) -> None:
        """Offer `fn` to remote clients as `client.call(name, *args)`.

        This is how layers above PastSet (PATHS stages) run code inside a node server. A
        hosted callable may block: remote calls run on worker threads (at most
        `Limits.max_calls` at once), never on the endpoint's loop. `inline=True` is for a
        callable that never blocks and returns at once (a clock reading): it runs on the
        loop itself, with no thread hand-off. It receives and returns msgpack-encodable
        values; a PastSetError it raises reaches the caller by name.
        """
        self._check_name(name)
        self._hosted[name] = fn
        if inline:
            self._inline.add(name)
        else:
            self._inline.discard(name)

    def unhost(self, name: str) -> None:
        self._hosted.pop(name, None)

    def call(self, name: str, *args):
        """Run a hosted callable in this thread (the in-process form of `Client.call`)."""
        return self._hosted_fn(name)(*args)

    def _hosted_fn(self, name):
        fn = self._hosted.get(name)
        if fn is None:
            raise UnknownElement(f"nothing is hosted as {name!r} on server {self.name}")
        return fn

    def serve(self, bind: str = "tcp://127.0.0.1:0", security: Security | None = None) -> str:
        """Open a ZeroMQ endpoint for remote clients; returns the bound endpoint.

        Port 0 picks a free port. The endpoint's loop runs in a background thread until
        `close()`. With `security` that serves CURVE (None: the process's keys, see
        `pastset.security.default`), clients must speak CURVE with a key the security's
        authorised directory holds; any other client is refused during its handshake and
        never reaches the loop. No address policy here: see `pastset.security.check_bind`.
        """
        endpoint = _Endpoint(self, bind, resolve(security))
        self._endpoints.append(endpoint)
        return endpoint.endpoint

    @property
    def endpoints(self) -> list[str]:
        return [e.endpoint for e in self._endpoints]

    def close(self) -> None:
        """Stop serving remote clients (in-process use goes on working)."""
        while self._endpoints:
            self._endpoints.pop().close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_name(self, name):
        if not isinstance(name, str) or not name:
            raise BadArgument(f"an element name is a non-empty string, got {name!r}")
        if len(name) > self.limits.max_name:
            raise LimitExceeded(
                f"element name of {len(name)} characters exceeds the limit of {self.limits.max_name}"
            )

    def _unknown(self, name) -> str:
        """What UnknownElement says of `name`: with the closest names there are, if any are close."""
        if not isinstance(name, str) or len(name) > self.limits.max_name:
            # No element has such a name; and comparing megabytes would hold the loop for seconds.
            return f"no element named {name!r:.80}; enter it first"
        close = difflib.get_close_matches(name, self._close_names(name), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; enter it first"
        return f"no element named {name!r}{hint}"

    def _close_names(self, name: str) -> list[str]:
        """The names next to `name` in sorted order, nearest first, as many as a "did you mean"
        may compare: a typo most often keeps the start of a name, and a suggestion must cost the
        server's loop a few milliseconds however many elements it hosts, never a search of all."""
        with self._table:
            if self._sorted_stale or self._unsorted:
                self._sort_names()
            names = self._sorted
            above = bisect_left(names, name)
            below = above - 1
            close: list[str] = []
            work = 0
            while len(close) < _SUGGEST_NAMES and work < _SUGGEST_WORK and (below >= 0 or above < len(names)):
                for i in (above, below):
                    if 0 <= i < len(names):
                        close.append(names[i])
                        work += len(names[i]) * len(name)
                above += 1
                below -= 1
        return close

    def _sort_names(self) -> None:
        """Bring the sorted names up to date (table mutex held)."""
        if self._sorted_stale:
            self._sorted = sorted(self._by_name)
            self._sorted_stale = False
        else:
            self._sorted += self._unsorted
            self._sorted.sort()   # a sorted run and a short one: merged, not sorted again
        self._unsorted = []

    def _element_changed(self, element):
        """Called, element mutex held, when an element with parked remote requests changes."""
        for endpoint in self._endpoints:  # requests may be parked on any of them
            endpoint._element_changed(element)

    def _element_by_id(self, eid) -> Element:
        element = self._by_id.get(eid)
        if element is None:
            raise UnknownElement(f"no element with id {eid!r} on server {self.name} (deleted?)")
        return element


# A "did you mean" compares at most this many names, and names of at most this many characters in
# all times the length of the name asked for (difflib's work grows with both lengths).
_SUGGEST_NAMES = 200
_SUGGEST_WORK = 400_000


def _read_once(keys: list, read) -> list:
    """`[read(k) for k in keys]`, calling `read` once for a key listed more than once."""
    if len(set(keys)) == len(keys):
        return [read(k) for k in keys]
    done: dict = {}
    out = []
    for k in keys:
        if k not in done:
            done[k] = read(k)
        out.append(done[k])
    return out


class _Parked:
    """A remote request waiting for its element to change."""

    __slots__ = ("peer", "rid", "element", "kind", "args", "deadline", "done")

    def __init__(self, peer, rid, element, kind, args, deadline):
        self.peer, self.rid, self.element = peer, rid, element
        self.kind, self.args, self.deadline = kind, args, deadline
        self.done = False


class _Endpoint:
    """One ROUTER socket and the loop thread that answers it.

    The loop never blocks on an element: a request that must wait is parked with its
    element, retried whenever the element changes, and answered with Timeout when its
    deadline passes. In-process threads that change an element with parked requests wake
    the loop through a private inproc socket (the only socket touched outside the loop
    thread, always under `_waker_mutex`).

    Shares, so that one client cannot take what the others need (a client here is one
    connection, a ROUTER peer: `pastset.Client` opens one per thread):
    - Parked requests: a client may park `Limits.max_parked_per_client`, and the server
      `Limits.max_parked` in all, of which the last tenth is kept for clients with fewer than
      `_FEW_PARKED` parked. A greedy client is refused at its share; one that opens many
      connections fills the server only up to the reserve, which stays for clients that wait
      on a few requests each (a well-behaved thread waits on one). The refused get
      LimitExceeded at once, never a request that hangs.
    - Replies: one reply is at most `Limits.max_reply` bytes. A batch read whose reply would
      be bigger is refused before anything is read, from the sizes of what it names (an
      element named twice is read once, but sent twice). A reply of `_TRACKED` bytes or more
      is handed to ZeroMQ without a copy and counted in the memory budget until ZeroMQ has
      sent it (or dropped it with its peer); a client may have at most twice
      `Limits.max_reply` of them unsent, so one that does not read its replies is refused
      further big ones. Smaller replies are copied into ZeroMQ's queue, at most SNDHWM of
      them per peer.
    """

    def __init__(self, server: TupleServer, bind: str, security: Security):
        self.server = server
        self.limits = server.limits
        self._serial = next(_ENDPOINTS)   # with a peer id, names a client of this endpoint
        # Replies (and reads whose replies could be) of this many bytes or more are checked against
        # Limits.max_reply and, from _TRACKED bytes on, against the memory budget.
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

        self._dirty: deque[Element] = deque()     # elements changed while requests are parked
        self._waiting: dict[int, deque[_Parked]] = {}
        self._by_peer: dict[bytes, list[_Parked]] = {}
        self._deadlines: list = []                 # heap of (deadline, seq, _Parked)
        self._seq = itertools.count()
        self._n_parked = 0
        self._lost: list[bytes] = []               # peers a send found disconnected
        self._executor = None                      # worker threads for hosted calls, made on first use
        self._calls = 0                            # hosted calls running
        self._replies: deque = deque()             # (peer, rid, payload) finished by workers
        self._in_flight: list = []                 # (tracker, peer, bytes): big replies ZeroMQ holds
        self._unsent: dict[bytes, int] = {}        # peer -> bytes of its big replies in flight
        self._next_probe = 0.0
        self._rcvtimeo = -1
        self._stopping = False
        self._loop_ident = None
        self._ops = self._op_table()
        # Replies from the loop thread share one Packer (packb would build one per reply).
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._thread = threading.Thread(target=self._run, name=f"pastset-{server.name}", daemon=True)
        self._thread.start()

    def close(self):
        self._stopping = True
        self._wake()
        self._thread.join(timeout=5)
        # Requests still parked are never answered now: their elements must stop counting them.
        for queue in self._waiting.values():
            for waiter in queue:
                if not waiter.done:
                    with waiter.element.mutex:
                        waiter.element.parked -= 1
        self._waiting.clear()
        for _, _, size in self._in_flight:   # dropped with the context below
            self.server.budget.give(size)
        self._in_flight.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._waker.close(linger=0)
        self._destroy()

    def _destroy(self):
        if self._auth is not None:
            self._auth.stop()  # its sockets live in the context: before destroying it
        self._ctx.destroy(linger=0)

    # -- the loop --------------------------------------------------------------------------------

    def _run(self):
        self._loop_ident = threading.get_ident()
        sock = self._sock
        recv, handle = sock.recv_multipart, self._handle
        while not self._stopping:
            try:
                frames = recv()
            except zmq.Again:
                frames = None
            except zmq.ZMQError:
                break  # context terminated
            try:
                if frames is not None:
                    handle(frames)
                if self._dirty:
                    self._service()
                if self._deadlines:
                    self._expire()
                if self._by_peer and monotonic() >= self._next_probe:
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
        sock.close(linger=0)

    def _handle(self, frames):
        if len(frames) != 2:
            if len(frames) > 2:
                self._send(frames[0], p.error_reply(None, ProtocolError("a request is exactly one frame")))
            return
        peer, frame = frames
        if peer == self._waker_id:
            return  # a wake-up: the loop services dirty elements next
        try:
            rid, op, args = p.unpack_request(frame, self.limits)
        except ProtocolError as exc:
            self._send(peer, p.error_reply(None, exc))
            return
        try:
            handler, arity = self._ops[op] if 0 <= op < len(self._ops) else (None, 0)
            if handler is None:
                raise ProtocolError(f"unknown operation {op}; known: {sorted(p.OP_NAMES)}")
            if len(args) != arity:
                raise ProtocolError(
                    f"{p.OP_NAMES[op]} takes {arity} arguments, got {len(args)}"
                )
            result = handler(peer, rid, *args)
        except PastSetError as exc:
            self._send(peer, p.error_reply(rid, exc))
            return
        except Exception as exc:  # a hostile or buggy request must not stop the loop
            self._send(peer, p.error_reply(rid, ProtocolError(
                f"bad arguments for {p.OP_NAMES.get(op, op)}: {type(exc).__name__}: {exc}")))
            return
        if result is not _ANSWERED:
            self._deliver(peer, rid, self._pack([rid, p.OK, result]))

    def _deliver(self, peer, rid, payload) -> bool:
        """Send the reply to request `rid`; a big one goes through _send_large."""
        if len(payload) < self._big:
            return self._send(peer, payload)
        return self._send_large(peer, rid, payload)

    def _send_large(self, peer, rid, payload) -> bool:
        """Send a big reply: one of _TRACKED bytes or more without a copy, counted in the memory
        budget until ZeroMQ lets go of it; or, if it is too big or its peer has too many unsent,
        an error instead."""
        size = len(payload)
        tracked = size >= _TRACKED
        try:
            self._check_reply(size, "this request")
            if tracked:
                # The loop's Packer keeps the buffer it grew for a reply this big: a new one starts small.
                self._pack = msgpack.Packer(use_bin_type=True).pack
                self._reclaim()
                self._check_unsent(peer, size)
                self.server.budget.take_reply(size, f"a reply of {size:,} bytes")
        except LimitExceeded as exc:
            self._send(peer, p.error_reply(rid, exc))
            return False
        if not tracked:
            return self._send(peer, payload)
        unsent = self._unsent.get(peer, 0)
        try:
            self._sock.send(peer, _MORE_NOWAIT)
            tracker = self._sock.send(payload, _NOWAIT, copy=False, track=True)
        except zmq.ZMQError as exc:
            self.server.budget.give(size)
            if exc.errno == zmq.EHOSTUNREACH:
                self._lost.append(peer)
            return False
        self._unsent[peer] = unsent + size
        self._in_flight.append((tracker, peer, size))
        self._set_rcvtimeo()
        return True

    def _reclaim(self):
        """Give back to the budget the big replies ZeroMQ has sent, or dropped with their peer."""
        still = []
        for entry in self._in_flight:
            tracker, peer, size = entry
            if tracker.done:
                self.server.budget.give(size)
                left = self._unsent[peer] - size
                if left:
                    self._unsent[peer] = left
                else:
                    del self._unsent[peer]
            else:
                still.append(entry)
        if len(still) != len(self._in_flight):
            self._in_flight = still
            if not still:
                self._set_rcvtimeo()

    def _check_reply(self, nbytes: int, what: str) -> None:
        if nbytes > self.limits.max_reply:
            raise LimitExceeded(
                f"{what} would be answered with about {nbytes:,} bytes, over the {self.limits.max_reply:,}-byte "
                "reply limit (Limits.max_reply); ask for fewer elements or tuples at once, or raise the limit")

    def _check_unsent(self, peer, nbytes: int) -> None:
        """LimitExceeded if `peer` may not have `nbytes` more of big replies in flight."""
        unsent = self._unsent.get(peer, 0)
        if unsent + nbytes > 2 * self.limits.max_reply:
            raise LimitExceeded(
                f"this client has {unsent:,} bytes of replies it has not read yet; read them before asking "
                f"for more (a client may have up to twice Limits.max_reply = {2 * self.limits.max_reply:,} "
                "bytes of replies unsent)")

    def _check_read(self, peer, bound: int, what: str, size) -> None:
        """Refuse a read before reading if its reply would pass Limits.max_reply or its client's share
        of big replies in flight: `bound` is a quick upper bound of the reply's size (what the elements
        hold, as charged to the memory budget), `size()` the size of what the read would return."""
        if bound >= self._big and (bound > self.limits.max_reply or peer in self._unsent):
            self._reclaim()
            nbytes = size()
            self._check_reply(nbytes, what)
            if nbytes >= _TRACKED:
                self._check_unsent(peer, nbytes)

    def _send(self, peer, payload) -> bool:
        """Send a reply; False if the peer is gone (or so far behind that it stopped reading)."""
        try:
            # Two plain sends with int flags: send_multipart combines enum flags per frame,
            # which costs more than the rest of a small reply.
            self._sock.send(peer, _MORE_NOWAIT)
            self._sock.send(payload, _NOWAIT)
            return True
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                self._lost.append(peer)
            return False

    # How often peers with parked requests are probed (an empty frame, which clients ignore):
    # ROUTER_MANDATORY makes a send to a disconnected peer fail, and its requests are dropped.
    _PROBE_INTERVAL = 2.0

    def _probe(self):
        for peer in list(self._by_peer):
            self._send(peer, b"")
        self._next_probe = monotonic() + self._PROBE_INTERVAL

    # -- operations --------------------------------------------------------------------------------

    def _op_table(self):
        table = [(None, 0)] * (max(p.OP_NAMES) + 1)
        for op, handler, arity in (
            (p.PING, lambda peer, rid: [self.server.name, self.limits.max_frame], 0),
            (p.ENTER, self._op_enter, 4),
            (p.LOOKUP, self._op_lookup, 1),
            (p.MOVE, self._op_move, 3),
            (p.OBSERVE, self._op_observe, 3),
            (p.FIRST, lambda peer, rid, eid: self._el(eid).first(), 1),
            (p.LAST, lambda peer, rid, eid: self._el(eid).last(), 1),
            (p.DELTA, lambda peer, rid, eid, n: self._el(eid).delta(n), 2),
            (p.AXE, lambda peer, rid, eid, i: self._el(eid).axe(i), 2),
            (p.READ_RANGE, self._op_read_range, 3),
            (p.LATEST, self._op_latest, 2),
            (p.LATEST_MANY, self._op_latest_many, 2),
            (p.DELETE, lambda peer, rid, name: self.server.delete(name), 1),
            (p.ELEMENTS, self._op_elements, 0),
            (p.FIND, self._op_find, 4),
            (p.CALL, self._op_call, 2),
            (p.RANGE_MANY, self._op_range_many, 3),
            (p.OBSERVE_INDEXED, self._op_observe_indexed, 3),
            (p.LATEST_RECORDS, self._op_latest_records, 2),
        ):
            table[op] = (handler, arity)
        return table

    def _el(self, eid) -> Element:
        return self.server._element_by_id(eid)

    @staticmethod
    def _describe(element):
        return [element.id, element.template.spec, element.keep, element.delta()]

    def _op_enter(self, peer, rid, name, spec, keep, delta):
        return self._describe(self.server._enter(name, spec, keep, delta, (self._serial, peer)))

    def _op_lookup(self, peer, rid, name):
        return self._describe(self.server.element(name))

    def _op_elements(self, peer, rid):
        return [[i.name, i.template, i.first, i.last, i.keep, i.delta, i.nbytes]
                for i in self.server.elements()]

    def _op_latest(self, peer, rid, eid, n):
        element = self._el(eid)
        if element._held_charge >= self._big:
            self._check_read(peer, element._held_charge, "latest", lambda: element._read_size(newest=n))
        return element.latest(n)

    def _op_read_range(self, peer, rid, eid, lo, hi):
        element = self._el(eid)
        if element._held_charge >= self._big:
            self._check_read(peer, element._held_charge, "read_range", lambda: element._read_size(lo, hi))
        return element.read_range(lo, hi)

    def _batch(self, what, refs) -> list[Element]:
        """The elements a batch read names (ids or names), in order."""
        if not isinstance(refs, list) or len(refs) > self.limits.max_batch:
            raise BadArgument(f"{what} takes a list of at most {self.limits.max_batch} element ids or names")
        by_id, by_name = self.server._by_id, self.server._by_name
        out = []
        for ref in refs:
            element = by_name.get(ref) if isinstance(ref, str) else by_id.get(ref)
            if element is None:
                raise UnknownElement(self.server._unknown(ref) if isinstance(ref, str)
                                     else f"no element with id {ref!r} on server {self.server.name}")
            out.append(element)
        return out

    def _check_batch(self, peer, what, elements, keys, size_of) -> None:
        """_check_read for a batch read of `elements`; `size_of(key)` for each of `keys`."""
        self._check_read(peer, sum(map(_HELD_CHARGE, elements)), what, lambda: sum(_read_once(keys, size_of)))

    def _op_latest_records(self, peer, rid, refs, n):
        elements = self._batch("latest_records", refs)
        self._check_batch(peer, "latest_records", elements, elements, lambda e: e._read_size(newest=n))
        return self.server.latest_records(elements, n)

    def _op_latest_many(self, peer, rid, refs, n):
        elements = self._batch("latest_many", refs)
        self._check_batch(peer, "latest_many", elements, elements, lambda e: e._read_size(newest=n))
        return _read_once(elements, methodcaller("latest", n))   # no Python frame per element

    def _op_move(self, peer, rid, eid, values, timeout):
        return self._attempt_or_park(peer, rid, self._el(eid), p.MOVE, (values,), timeout)

    def _op_observe(self, peer, rid, eid, index, timeout):
        return self._attempt_or_park(peer, rid, self._el(eid), p.OBSERVE, (index,), timeout)

    def _op_observe_indexed(self, peer, rid, eid, index, timeout):
        return self._attempt_or_park(peer, rid, self._el(eid), p.OBSERVE_INDEXED, (index,), timeout)

    def _op_range_many(self, peer, rid, refs, los, hi):
        """read_range(lo, hi) of many elements (a monitor's stream over many trace elements)."""
        if not isinstance(refs, list) or not isinstance(los, list) or len(refs) != len(los):
            raise BadArgument(f"range_many takes equal lists of at most {self.limits.max_batch} "
                              "element ids or names and of start indices, and an end index")
        elements = self._batch("range_many", refs)
        for index in (*los, hi):
            _check_index(index)
        keys = list(zip(elements, los))
        self._check_batch(peer, "range_many", elements, keys, lambda k: k[0]._read_size(k[1], hi))
        return _read_once(keys, lambda k: k[0].read_range(k[1], hi))

    def _op_find(self, peer, rid, eid, pattern, remove, timeout):
        element = self._el(eid)
        if element.template.is_binary:
            raise TemplateMismatch(f"element {element.name}: Linda matching needs a typed template")
        pattern = _check_pattern(pattern, element.template)
        return self._attempt_or_park(peer, rid, element, p.FIND, (pattern, bool(remove)), timeout)

    def _op_call(self, peer, rid, name, args):
        fn = self.server._hosted_fn(name)
        if not isinstance(args, list):
            raise BadArgument("call takes a name and a list of arguments")
        if name in self.server._inline:
            return fn(*args)
        if self._calls >= self.limits.max_calls:
            raise LimitExceeded(f"server {self.server.name} already runs {self.limits.max_calls} hosted calls")
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(self.limits.max_calls, f"pastset-{self.server.name}-call")
        self._calls += 1
        self._executor.submit(self._run_call, peer, rid, name, fn, args)
        return _ANSWERED

    def _run_call(self, peer, rid, name, fn, args):
        """On a worker thread: run the hosted callable, hand the reply to the loop."""
        try:
            payload = p.pack([rid, p.OK, fn(*args)])
        except PastSetError as exc:
            payload = p.error_reply(rid, exc)
        except Exception as exc:
            payload = p.error_reply(rid, ProtocolError(f"hosted call {name} failed: {type(exc).__name__}: {exc}"))
        self._replies.append((peer, rid, payload))
        self._wake()

    # -- blocking operations: attempt now, or park until the element changes ----------------

    def _attempt_or_park(self, peer, rid, element, kind, args, timeout):
        deadline = _deadline(timeout)
        with element.mutex:
            if self._complete(peer, rid, element, kind, args):
                return _ANSWERED
            if timeout == 0:
                raise Timeout(f"{p.OP_NAMES[kind]} on element {element.name} would block")
            self._check_park(peer)
            waiter = _Parked(peer, rid, element, kind, args, deadline)
            self._waiting.setdefault(element.id, deque()).append(waiter)
            self._by_peer.setdefault(peer, []).append(waiter)
            self._n_parked += 1
            element.parked += 1
            element.on_change = self.server._element_changed
            # Tried again now that the element counts this request: a single writer, which appends
            # without the mutex, either published before this try or sees the count and wakes us.
            if self._complete(peer, rid, element, kind, args):
                self._finish(waiter)
                self._prune(element)
                return _ANSWERED
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, next(self._seq), waiter))
        now = monotonic()
        if self._next_probe < now:
            self._next_probe = now + self._PROBE_INTERVAL
        self._set_rcvtimeo()
        return _ANSWERED

    def _check_park(self, peer):
        """LimitExceeded unless `peer` may park one more request (see the class docstring)."""
        limits = self.limits
        mine = self._by_peer.get(peer)
        held = 0 if mine is None else len(mine)
        if held >= limits.max_parked_per_client:
            raise LimitExceeded(
                f"this client (one connection) already has {held} blocked requests parked on server "
                f"{self.server.name}, its share (Limits.max_parked_per_client = {limits.max_parked_per_client}); "
                "wait for them to be answered or give them timeouts")
        reserve = 0 if held < _FEW_PARKED else limits.max_parked // 10
        if self._n_parked >= limits.max_parked - reserve:
            kept = f", the last {reserve} of them kept for clients with fewer than {_FEW_PARKED}" if reserve else ""
            raise LimitExceeded(
                f"server {self.server.name} already holds {self._n_parked} blocked requests (Limits.max_parked "
                f"= {limits.max_parked}{kept}); try again later, or raise the limit")

    def _complete(self, peer, rid, element, kind, args) -> bool:
        """Try the operation once (element mutex held); True when it was answered.

        A consumed or taken tuple is removed only after its reply was handed to the peer,
        so a consumer that disconnected while parked loses nothing and takes nothing.
        """
        try:
            if kind == p.MOVE:
                result = element._try_move(args[0])
                if result is WOULD_BLOCK:
                    return False
                self._send(peer, self._pack([rid, p.OK, result]))
                return True
            if kind == p.OBSERVE or kind == p.OBSERVE_INDEXED:
                found = element._peek(args[0])
                consume = args[0] is None
            else:
                found = element._peek_match(args[0])
                consume = args[1]
            if found is WOULD_BLOCK:
                return False
            reply = found if kind == p.OBSERVE_INDEXED else found[1]
            if self._deliver(peer, rid, self._pack([rid, p.OK, reply])) and consume:
                element._remove(found[0])
            return True
        except PastSetError as exc:
            self._send(peer, p.error_reply(rid, exc))
            return True

    def _element_changed(self, element):
        """Called, element mutex held, by whichever thread changed an element with parked requests."""
        if element.id not in self._waiting:
            return  # they are parked on another endpoint
        self._dirty.append(element)
        if threading.get_ident() != self._loop_ident:
            self._wake()

    def _wake(self):
        with self._waker_mutex:
            try:
                self._waker.send(b"w", zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # a wake-up is already queued, or the endpoint is closing

    def _service(self):
        while self._dirty:
            element = self._dirty.popleft()
            queue = self._waiting.get(element.id)
            if not queue:
                continue
            with element.mutex:
                for waiter in queue:
                    if not waiter.done and self._complete(waiter.peer, waiter.rid, element,
                                                          waiter.kind, waiter.args):
                        self._finish(waiter)
                self._prune(element)

    def _finish(self, waiter):
        waiter.done = True
        self._n_parked -= 1
        waiter.element.parked -= 1
        mine = self._by_peer.get(waiter.peer)
        if mine is not None:
            mine.remove(waiter)
            if not mine:
                del self._by_peer[waiter.peer]

    def _prune(self, element):
        queue = self._waiting.get(element.id)
        if queue is not None:
            kept = deque(w for w in queue if not w.done)
            if kept:
                self._waiting[element.id] = kept
            else:
                del self._waiting[element.id]

    def _expire(self):
        now = monotonic()
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _, _, waiter = heapq.heappop(heap)
            if waiter.done:
                continue
            element = waiter.element
            with element.mutex:
                # One last try: the element may have changed in the same instant.
                if not self._complete(waiter.peer, waiter.rid, element, waiter.kind, waiter.args):
                    self._send(waiter.peer, p.error_reply(waiter.rid, Timeout(
                        f"{p.OP_NAMES[waiter.kind]} on element {element.name} timed out")))
                self._finish(waiter)
                self._prune(element)
        self._set_rcvtimeo()

    def _forget(self, peer):
        """A peer disconnected: its parked requests are dropped, taking nothing with them."""
        for waiter in self._by_peer.pop(peer, []):
            if not waiter.done:
                waiter.done = True
                self._n_parked -= 1
                with waiter.element.mutex:
                    waiter.element.parked -= 1
                    self._prune(waiter.element)

    def _set_rcvtimeo(self):
        heap = self._deadlines
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        ms = -1 if not heap else max(1, int((heap[0][0] - monotonic()) * 1000) + 1)
        if self._by_peer:
            ms = min(ms if ms > 0 else 1 << 30, int(self._PROBE_INTERVAL * 1000))
        if self._in_flight:   # to give the budget back soon after ZeroMQ sent them
            ms = min(ms if ms > 0 else 1 << 30, _RECLAIM_MS)
        if ms != self._rcvtimeo:
            self._sock.setsockopt(zmq.RCVTIMEO, ms)
            self._rcvtimeo = ms


_ANSWERED = object()
_ENDPOINTS = itertools.count()
# Replies of this many bytes or more are sent without a copy and counted in the memory budget
# until ZeroMQ has sent them; below it a copy is cheaper than following the reply (pyzmq's
# tracking costs some 70 µs a message), and above it the copy costs more than that.
_TRACKED = 1 << 20
_RECLAIM_MS = 10
# Clients with fewer parked requests than this may use the reserve of Limits.max_parked.
_FEW_PARKED = 8
_HELD_CHARGE = attrgetter("_held_charge")
_NOWAIT = int(zmq.NOBLOCK)
_MORE_NOWAIT = int(zmq.SNDMORE | zmq.NOBLOCK)


def _deadline(timeout):
    return None if _check_timeout(timeout) is None else monotonic() + timeout


def _bind(sock, bind: str) -> str:
    """Bind, turning port 0 into a free port; returns the endpoint actually bound."""
    parts = urlsplit(bind)
    if parts.scheme == "tcp" and parts.port == 0:
        bind = f"tcp://{parts.hostname}:*"
    sock.bind(bind)
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)
