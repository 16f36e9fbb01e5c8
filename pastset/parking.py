"""Parked requests: blocked remote requests that wait, without a thread, until their element changes."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from time import monotonic

from .element import Element
from .errors import LimitExceeded
from .protocol import Limits

# Clients with fewer parked requests than this may use the reserve of Limits.max_parked.
FEW_PARKED = 8


class Parked:
    """A remote request waiting for its element to change: request `rid` of `peer`, operation `op`
    (a protocol code, which names it and shapes its reply), tried as `element.attempt(kind, arg)`,
    finished by `element.commit` when it `consumes`; answered with Timeout at `deadline`."""

    __slots__ = ("peer", "rid", "element", "op", "kind", "arg", "consumes", "deadline", "done")

    def __init__(self, peer, rid, element: Element, op: int, kind: int, arg, consumes: bool, deadline):
        self.peer, self.rid, self.element, self.op = peer, rid, element, op
        self.kind, self.arg, self.consumes, self.deadline = kind, arg, consumes, deadline
        self.done = False


class Parking:
    """The requests one endpoint has parked, by element, by peer and by deadline.

    Every method runs on the endpoint's loop thread, except `changed`, which whichever thread
    changes an element with parked requests calls (element mutex held), through the server's
    `on_change` (which tells every endpoint of the server): it queues the element and wakes the
    loop (`wake`), which then tries its requests again (`service`). `answer(waiter)` tries one
    request once, element mutex held, and sends its reply: True when it was answered.

    Shares, so that one client cannot take what the others need (a client is one connection, a
    ROUTER peer): a client may park `Limits.max_parked_per_client`, and the server
    `Limits.max_parked` in all, of which the last tenth is kept for clients with fewer than
    `FEW_PARKED` parked. A greedy client is refused at its share; one that opens many connections
    fills the server only up to the reserve, which stays for clients that wait on a few requests
    each (a well-behaved thread waits on one). The refused get LimitExceeded at once, never a
    request that hangs.
    """

    def __init__(self, limits: Limits, server: str, answer, wake, on_change):
        self.limits = limits
        self.server = server
        self._answer = answer
        self._wake = wake
        self._on_change = on_change
        self.loop_ident = None                     # the loop thread, once it runs
        self._dirty: deque[Element] = deque()      # elements changed while requests are parked
        self._waiting: dict[int, deque[Parked]] = {}
        self.by_peer: dict[bytes, list[Parked]] = {}
        self._deadlines: list = []                 # heap of (deadline, seq, Parked)
        self._seq = itertools.count()
        self.count = 0

    def park(self, waiter: Parked) -> None:
        """Park a request that could not be answered now (element mutex held); LimitExceeded if its
        peer or the server may not park one more. It is tried again at once, now that the element
        counts it: a single writer, which appends without the mutex, either published before the
        first try or sees the count and wakes the loop."""
        self._check_share(waiter.peer)
        element = waiter.element
        self._waiting.setdefault(element.id, deque()).append(waiter)
        self.by_peer.setdefault(waiter.peer, []).append(waiter)
        self.count += 1
        element.park(self._on_change)
        if self._answer(waiter):
            self._finish(waiter)
            self._prune(element)
        elif waiter.deadline is not None:
            heapq.heappush(self._deadlines, (waiter.deadline, next(self._seq), waiter))

    def changed(self, element: Element) -> None:
        """Called, element mutex held, by whichever thread changed an element with parked requests."""
        if element.id not in self._waiting:
            return  # they are parked on another endpoint
        self._dirty.append(element)
        if threading.get_ident() != self.loop_ident:
            self._wake()

    @property
    def dirty(self) -> bool:
        """Whether elements with parked requests changed since the last `service`."""
        return bool(self._dirty)

    @property
    def deadlines(self) -> bool:
        """Whether requests with deadlines are (or were, until `expire` or `next_deadline`) parked."""
        return bool(self._deadlines)

    def service(self) -> None:
        """Try again the requests parked on every element changed since the last time."""
        while self._dirty:
            element = self._dirty.popleft()
            queue = self._waiting.get(element.id)
            if not queue:
                continue
            with element.mutex:
                for waiter in queue:
                    if not waiter.done and self._answer(waiter):
                        self._finish(waiter)
                self._prune(element)

    def expire(self, timed_out) -> None:
        """Answer every request whose deadline passed: tried once more, else `timed_out(waiter)`."""
        now = monotonic()
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _, _, waiter = heapq.heappop(heap)
            if waiter.done:
                continue
            element = waiter.element
            with element.mutex:
                # One last try: the element may have changed in the same instant.
                if not self._answer(waiter):
                    timed_out(waiter)
                self._finish(waiter)
                self._prune(element)

    def next_deadline(self) -> float | None:
        """The earliest deadline of a request still parked, if any has one."""
        heap = self._deadlines
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def forget(self, peer) -> None:
        """A peer disconnected: its parked requests are dropped, taking nothing with them."""
        for waiter in self.by_peer.pop(peer, []):
            if not waiter.done:
                waiter.done = True
                self.count -= 1
                with waiter.element.mutex:
                    waiter.element.unpark()
                    self._prune(waiter.element)

    def close(self) -> None:
        """Requests still parked are never answered now: their elements stop counting them."""
        for queue in self._waiting.values():
            for waiter in queue:
                if not waiter.done:
                    with waiter.element.mutex:
                        waiter.element.unpark()
        self._waiting.clear()

    def _check_share(self, peer) -> None:
        """LimitExceeded unless `peer` may park one more request (see the class docstring)."""
        limits = self.limits
        mine = self.by_peer.get(peer)
        held = 0 if mine is None else len(mine)
        if held >= limits.max_parked_per_client:
            raise LimitExceeded(
                f"this client (one connection) already has {held} blocked requests parked on server "
                f"{self.server}, its share (Limits.max_parked_per_client = {limits.max_parked_per_client}); "
                "wait for them to be answered or give them timeouts")
        reserve = 0 if held < FEW_PARKED else limits.max_parked // 10
        if self.count >= limits.max_parked - reserve:
            kept = f", the last {reserve} of them kept for clients with fewer than {FEW_PARKED}" if reserve else ""
            raise LimitExceeded(
                f"server {self.server} already holds {self.count} blocked requests (Limits.max_parked "
                f"= {limits.max_parked}{kept}); try again later, or raise the limit")

    def _finish(self, waiter: Parked) -> None:
        waiter.done = True
        self.count -= 1
        waiter.element.unpark()
        mine = self.by_peer.get(waiter.peer)
        if mine is not None:
            mine.remove(waiter)
            if not mine:
                del self.by_peer[waiter.peer]

    def _prune(self, element: Element) -> None:
        queue = self._waiting.get(element.id)
        if queue is not None:
            kept = deque(w for w in queue if not w.done)
            if kept:
                self._waiting[element.id] = kept
            else:
                del self._waiting[element.id]
