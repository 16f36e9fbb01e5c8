"""Fan-out: many requests to many node servers in flight at once, their replies collected within a deadline."""

from __future__ import annotations

import sys
from array import array
from time import monotonic

import zmq

from . import protocol as p
from .client import as_batch
from .deferred import Deferred
from .errors import BadArgument, EventSpaceError, PastSetError, ProtocolError, ServerGone
from .requests import Channel, Matcher, shared_context
from .security import Security, resolve
from .transport import Transport, backend_of

# Batch reads: per-element lists, then one value; such reads to one node in one round merge into one request.
_BATCH_READS = (p.LATEST_MANY, p.RANGE_MANY, p.LATEST_RECORDS)
# Encoded name lists kept for rounds to come (see Round): a monitor's few joins, several times over.
_NAMES_KEPT = 256
# Seconds of silence after which a round looks whether the nodes it still waits for are connected:
# a node whose connection closed will never answer, and is given up at once, not at the deadline.
_LOOK_EVERY = 0.1


class Fanout:
    """Requests to several node servers, each by name (`node`), sent in rounds: all of a round's
    requests are in flight at once (or one after another), and its replies are collected within
    a deadline. See `Round`.

    Nodes are reached through the backends their endpoints' schemes name, as `pastset.connect`
    reaches them, each through what its backend's `Transport.link` gives: a ZeroMQ node (`tcp://`,
    `ipc://`) through a DEALER socket of this fan-out's own, whose requests are in flight at once;
    a node of any other backend (`local://`) through a client of it, whose `submit` makes each
    request, in `wait`, while the remote replies are on their way. Not thread-safe: give each
    thread its own. A node that does not answer in time is reported missing, and its late replies
    are recognised by request id and dropped. `gone(missing)` tells which of the missing nodes are
    gone (their connection is closed, or a local one is no longer served) rather than not
    answering (connected, but paused, swapping or busy). Counts the bytes it sends and receives
    (`bytes_sent`, `bytes_received`). `security` holds the CURVE keys its sockets speak with
    (None: the process's, see `pastset.security.default`); a server that refuses them never
    answers, so its node is reported missing (and gone). Servers are not trusted, as
    `pastset.Client` does not trust them (`limits.max_reply`): what a node sends that is not a
    reply, or a result of the wrong shape, answers its requests with a ProtocolError naming it.
    """

    def __init__(self, endpoints: dict[str, str], context: zmq.Context | None = None,
                 security: Security | None = None, limits: p.Limits = p.Limits()):
        self._ctx = context or shared_context()
        self._security = resolve(security)
        self._limits = limits
        self._endpoints = dict(endpoints)
        self._links: dict[str, Channel | _Direct] = {}   # node -> what it is reached through
        self._node_of: dict[zmq.Socket, str] = {}
        self._poller = zmq.Poller()
        self._matcher = Matcher(limits.max_reply // 16)
        self._names: dict[tuple, tuple] = {}   # ids of name lists -> (copies of them, their names encoded)
        self.bytes_sent = 0
        self.bytes_received = 0

    def add(self, node: str, endpoint: str) -> None:
        """Learn (or change) where `node` listens."""
        if self._endpoints.get(node) != endpoint:
            self._drop(node)
            self._endpoints[node] = endpoint

    def round(self, timeout: float, sequential: bool = False) -> Round:
        """A new round of requests, answered within `timeout` seconds of its `wait`."""
        return Round(self, timeout, sequential)

    def gone(self, nodes) -> set[str]:
        """Of `nodes` (a round's missing ones), those that are gone: their connection is closed,
        refused or was never made (the process ended, or its host cannot be reached), or a local
        node is no longer served. The others are connected but did not answer in time: paused,
        swapping or overloaded."""
        return {node for node in nodes if not self._reachable(node)}

    def close(self) -> None:
        for node in list(self._links):
            self._drop(node)

    # -- the legs of a round ---------------------------------------------------------------------

    def _reachable(self, node: str) -> bool:
        link = self._links.get(node)
        return link is not None and link.reachable()

    def _link(self, node: str) -> Channel | _Direct:
        """What `node` is reached through (see `Transport.link`), made on first use: ServerGone if no
        endpoint is known for it, or its backend finds no server there (a local one not served)."""
        link = self._links.get(node)
        if link is None:
            endpoint = self._endpoint(node)
            link = backend_of(endpoint).link(endpoint, self._ctx, self._security, self._limits)
            if isinstance(link, Transport):
                link = _Direct(link)
            else:
                self._node_of[link.sock] = node
                self._poller.register(link.sock, zmq.POLLIN)
            self._links[node] = link
        return link

    def _endpoint(self, node: str) -> str:
        endpoint = self._endpoints.get(node)
        if endpoint is None:
            raise ServerGone(f"no endpoint known for node {node}")
        return endpoint

    def _drop(self, node: str) -> None:
        link = self._links.pop(node, None)
        if link is None:
            return
        if link.sock is not None:
            self._poller.unregister(link.sock)
            del self._node_of[link.sock]
        link.close()

    def _names_of(self, lists: list) -> p.Packed:
        """The names of `lists` run together and encoded, once for as long as the same lists (the
        same objects, with the same names) come back round after round: a monitor pulling hundreds
        of trace elements would otherwise spend most of its time encoding their names again."""
        key = tuple(map(id, lists))
        kept = self._names.get(key)
        if kept is not None and kept[0] == lists:
            return kept[1]
        if len(self._names) >= _NAMES_KEPT:
            del self._names[next(iter(self._names))]
        packed = p.Packed([name for names in lists for name in names])
        self._names[key] = ([list(names) for names in lists], packed)
        return packed

    def _give_up_late(self, late: set[str], missing: set[str]) -> None:
        """The nodes `late` did not answer by the deadline: missing; an unreachable one's socket goes."""
        missing.update(late)
        for node in late:
            if not self._reachable(node):
                self._drop(node)  # a fresh socket next time: no stale queue behind a dead peer
            # A connected node keeps its socket: a new connection to a paused server would only
            # wait in its kernel's accept queue; its late replies are dropped by request id.

    def _give_up_gone(self, waiting: dict, missing: set[str]) -> None:
        """Take the nodes of `waiting` whose connection has closed since their request was sent out
        of it, into `missing`: they are gone, and their sockets are dropped."""
        gone = {node for node in set(waiting.values()) if node in self._links and not self._reachable(node)}
        if not gone:
            return
        for on_reply, node in list(waiting.items()):
            if node in gone:
                del waiting[on_reply]
        missing.update(gone)
        for node in gone:
            self._drop(node)


class Reply:
    """The reply to one request of a round, once the round's `wait` returned: `value` if it was
    answered with one, `error` (an EventSpaceError) if it was answered with that, neither if its node
    did not answer (`answered` False: the node is in the round's `missing`)."""

    __slots__ = ("node", "value", "error", "answered")

    def __init__(self, node: str):
        self.node = node
        self.value = None
        self.error: EventSpaceError | None = None
        self.answered = False

    @property
    def ok(self) -> bool:
        """Answered, with a value."""
        return self.answered and self.error is None

    def result(self):
        """The value; raises the error, or ServerGone if the node did not answer."""
        if self.error is not None:
            raise self.error
        if not self.answered:
            raise ServerGone(f"node {self.node} did not answer")
        return self.value

    def _set(self, ok: bool, result) -> None:
        self.answered = True
        if ok:
            self.value = result
        else:
            self.error = result

    def __repr__(self):
        state = "value" if self.ok else "error" if self.error is not None else "no answer"
        return f"<Reply from {self.node}: {state}>"


class Round:
    """One round of requests of a `Fanout`: add requests in `Transport` terms, each naming its
    node (each returns its `Reply`), then `wait()` once.

    `wait` sends every request, then collects every reply within the round's timeout; with
    `sequential`, it sends each request only once the one before it was answered, and skips
    further requests to a node that did not answer. Batch reads of the same kind to the same node
    (and the same `n` or `hi`) travel as one request, each getting its own part of the reply;
    names are encoded once for as long as the same lists come back (lists given to a round are
    read, never kept or changed: pass the same list objects round after round, and do not change
    one while a round holds it). Requests to a node reached by direct calls (`local://`) are made
    in `wait` while the remote replies are on their way.
    """

    def __init__(self, fanout: Fanout, timeout: float, sequential: bool = False):
        self._fanout = fanout
        self.timeout = timeout
        self.sequential = sequential
        self._requests: list[tuple] = []   # (node, op, names, lists, last, reply)
        self.missing: set[str] = set()

    def latest_records(self, node: str, names: list, n: int = 1) -> Reply:
        """`latest_records(names, n)` on `node`: bytes."""
        return self._add(node, p.LATEST_RECORDS, names, (), n)

    def latest_many(self, node: str, names: list, n: int = 1) -> Reply:
        """`latest_many(names, n)` on `node`: [(start, items), ...]."""
        return self._add(node, p.LATEST_MANY, names, (), n)

    def range_many(self, node: str, names: list, los: list, hi: int) -> Reply:
        """`range_many(names, los, hi)` on `node`: [(start, items), ...]."""
        return self._add(node, p.RANGE_MANY, names, (los,), hi)

    def call(self, node: str, name: str, *args) -> Reply:
        """`call(name, *args)` on `node`: what the hosted callable returns."""
        return self._add(node, p.CALL, name, (), list(args))

    def ping(self, node: str) -> Reply:
        """`ping()` of `node`: its server's name."""
        return self._add(node, p.PING, None, (), None)

    def _add(self, node, op, names, lists, last) -> Reply:
        reply = Reply(node)
        self._requests.append((node, op, names, lists, last, reply))
        return reply

    def wait(self) -> set[str]:
        """Send the round's requests and collect their replies: returns (and keeps in `missing`) the
        nodes that did not answer within the timeout (or could not be reached). ServerGone for a
        node the fan-out knows no endpoint of."""
        return self.start().wait()

    def start(self) -> Exchange:
        """Send the round's requests (all of them, or with `sequential` the first), make its
        direct calls, and return without waiting: the `Exchange` collects the replies, as `wait`
        does, or step by step in the caller's own loop (a node server's, see
        `pastset.deferred`). Its result is the round's `missing`."""
        deadline = monotonic() + self.timeout
        groups = [[r] for r in self._requests] if self.sequential else _merged(self._requests)
        return Exchange(self._fanout, [self._send(group) for group in groups], self.missing, deadline, self.sequential)

    def _send(self, group) -> tuple:
        """(node, op, args, on_reply, the operation its errors name) of the one request that carries
        `group`, its requests merged."""
        node, op, names, lists, last, reply = group[0]
        if op not in _BATCH_READS:
            args = () if op == p.PING else (names, last) if op == p.CALL else None
            return node, op, args, _whole(op, reply), op
        encoded = self._fanout._names_of([request[2] for request in group])
        merged = [[x for request in group for x in request[3][i]] for i in range(len(lists))]
        if len(group) == 1:
            return node, op, (encoded, *merged, last), _whole(op, reply), op
        if op == p.LATEST_RECORDS:
            return node, p.LATEST_RECORDS_COUNTED, (encoded, *merged, last), _cut_records(group), op
        return node, op, (encoded, *merged, last), _cut_lists(group), op


class Exchange(Deferred):
    """A round's remote requests in flight and the collection of their replies (`Round.start`):
    the Deferred whose result is the round's `missing`. Requests to a node reached by direct
    calls are made as they are sent, after the others (their replies do not travel).

    `readable(sock)` reads the replies waiting on one of its `sockets()`; `tick()` gives up, at
    the deadline, the nodes still silent (and sooner, after `_LOOK_EVERY` of silence, those
    whose connection closed); `wait()` does both until done. One at a time (`sequential`), each
    request is sent once the one before it was answered, skipping a node already missing.
    Replies to an earlier exchange of the same fan-out are late: dropped.
    """

    def __init__(self, fanout: Fanout, sends: list, missing: set[str], deadline: float, one_at_a_time: bool):
        super().__init__()
        self._fanout = fanout
        self._missing = missing
        self._deadline = deadline
        self._queue = list(reversed(sends)) if one_at_a_time else []
        # Replies still owed per socket: a socket is read until it has paid them, not until a
        # non-blocking read fails (pyzmq raises for that, which costs more than the read).
        self._owed: dict[zmq.Socket, int] = {}
        self._waiting: dict[object, str] = {}   # on_reply -> its node
        self._heard = monotonic()               # when a reply last came (or the round began)
        fanout._matcher.clear()   # replies to earlier rounds are late: dropped
        if one_at_a_time:
            self._send_next()
        else:
            direct = []
            for send in sends:
                if self._send(*send) is False:
                    direct.append(send)
            for send in direct:   # while the remote requests travel
                self._send(*send, now=True)
        self._check_done()

    def sockets(self) -> list:
        # Only those this exchange sent on (a pooled fan-out may hold sockets to many more nodes,
        # and every socket polled costs the loop system calls on each wake-up), and of those the
        # ones still open (a gone node's is dropped; a closed socket polls as always ready).
        node_of = self._fanout._node_of
        return [sock for sock in self._owed if sock in node_of]

    def wake_at(self) -> float:
        return min(self._deadline, self._heard + _LOOK_EVERY)

    def readable(self, sock) -> None:
        owed = self._owed
        if sock.closed:   # dropped since the poll that found it readable
            return
        if not owed.get(sock):
            _drain(sock)  # only late replies or probes there: read out, so that poll waits
            return
        fanout, matcher, waiting = self._fanout, self._fanout._matcher, self._waiting
        while owed[sock]:
            try:
                raw = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            fanout.bytes_received += len(raw)
            try:
                matched = matcher.match(raw)
            except ProtocolError as exc:
                self._malformed(sock, exc)
                break
            if matched is None:
                continue  # the server's liveness probe, or a late reply to a request given up on
            key, ok, result = matched
            node = waiting.pop(key)
            owed[sock] -= 1
            self._heard = monotonic()
            on_reply, op, named = key
            if ok and not p.fits(op, result):   # a server is not trusted: its results have their op's shape
                ok, result = False, _malformed(node, named, result)
            on_reply(ok, result)
            self._send_next()
        self._check_done()

    def _malformed(self, sock, exc: ProtocolError) -> None:
        """`sock`'s node sent what is not a reply: each of its requests still waited for is answered
        with the error, and its socket goes (what else it holds is no reply either)."""
        fanout = self._fanout
        node = fanout._node_of[sock]
        error = type(exc)(f"node {node} at {fanout._endpoints[node]} sent a {exc}")
        for key, of in list(self._waiting.items()):
            if of == node:
                del self._waiting[key]
                key[0](False, error)
        self._owed.pop(sock, None)
        fanout._drop(node)
        self._heard = monotonic()
        self._send_next()

    def tick(self) -> None:
        now = monotonic()
        if now >= self._deadline:
            self._queue.clear()
            if self._waiting:
                late = set(self._waiting.values())
                self._waiting.clear()
                self._fanout._give_up_late(late, self._missing)
        elif now >= self._heard + _LOOK_EVERY:
            self._fanout._give_up_gone(self._waiting, self._missing)
            self._heard = now
            self._send_next()
        self._check_done()

    def wait(self):
        """Collect the replies here, blocking, until done; the result."""
        poller = self._fanout._poller
        while not self.done:
            ready = poller.poll(max(1, int((self.wake_at() - monotonic()) * 1000)))
            for sock, _ in ready:
                self.readable(sock)
            self.tick()
        return self.result()

    def _send_next(self) -> None:
        while self._queue and not self._waiting:
            self._send(*self._queue.pop(), now=True)

    def _send(self, node, op, args, on_reply, named, now: bool = False) -> bool | None:
        """Send the request, or (`now`) make it if its node is reached by direct calls; False if it
        is such a request and not `now`: it is left to be made."""
        fanout, missing = self._fanout, self._missing
        if node in missing:
            return None
        try:
            link = fanout._link(node)
        except ServerGone:
            if node not in fanout._endpoints:
                raise
            missing.add(node)   # its backend finds no server there: gone, as a node whose process ended
            return None
        if link.sock is None:
            if now:
                link.submit(node, op, args, on_reply, missing)
            return now
        key = (on_reply, op, named)
        try:
            frame = fanout._matcher.request(op, args, key)
        except (TypeError, ValueError, OverflowError) as exc:
            on_reply(False, BadArgument(f"{p.OP_NAMES[op]}: an argument cannot be sent as msgpack ({exc})"))
            return None
        if not link.send(frame):   # nothing connected (a dead peer), or a queue full behind a paused one
            missing.add(node)
            if not link.reachable():
                fanout._drop(node)
            return None
        fanout.bytes_sent += len(frame)
        self._waiting[key] = node
        self._owed[link.sock] = self._owed.get(link.sock, 0) + 1
        return None

    def _check_done(self) -> None:
        if not self._waiting and not self._queue and not self.done:
            self._settle(self._missing)


def _merged(requests: list) -> list[list]:
    """The requests in groups that travel as one: batch reads of one kind to one node with the same
    last argument together (where the first of them was), every other request alone."""
    groups: dict = {}
    out = []
    for request in requests:
        node, op, _, _, last, _ = request
        key = (node, op, last) if op in _BATCH_READS else id(request)
        group = groups.get(key)
        if group is None:
            group = groups[key] = []
            out.append(group)
        group.append(request)
    return out


def _whole(op, reply: Reply):
    def on_reply(ok, result):
        if op == p.PING:
            reply._set(ok, result[0] if ok else result)
        elif op in (p.LATEST_MANY, p.RANGE_MANY):
            reply._set(ok, _batches(result) if ok else result)
        else:
            reply._set(ok, result)
    return on_reply


def _cut_lists(group):
    """How a merged LATEST_MANY or RANGE_MANY reply is shared out: each request its slice."""
    op = group[0][1]
    names = sum(len(request[2]) for request in group)

    def on_reply(ok, result):
        if ok and len(result) != names:
            ok, result = False, _malformed(group[0][0], op, result)
        start = 0
        for request in group:
            end = start + len(request[2])
            request[5]._set(ok, _batches(result[start:end]) if ok else result)
            start = end
    return on_reply


def _cut_records(group):
    """How a merged LATEST_RECORDS_COUNTED reply is shared out: each request the bytes its elements gave."""
    names = sum(len(request[2]) for request in group)

    def on_reply(ok, result):
        lengths = _counts(result, names) if ok else None
        if ok and lengths is None:
            ok, result = False, _malformed(group[0][0], p.LATEST_RECORDS, result)
        if not ok:
            for request in group:
                request[5]._set(False, result)
            return
        records = result[1]
        total = sum(lengths)
        record_size = len(records) // total if total else 0
        first = offset = 0
        for request in group:
            last = first + len(request[2])
            size = sum(lengths[first:last]) * record_size
            request[5]._set(True, records[offset:offset + size])
            first, offset = last, offset + size
    return on_reply


def _counts(result, names: int) -> array | None:
    """The record count of each of `names` elements in a LATEST_RECORDS_COUNTED result, if its
    records are that many records of one size; None if they are not."""
    if len(result[0]) != 4 * names:
        return None
    counts = array("I", result[0])
    if sys.byteorder == "big":
        counts.byteswap()
    total = sum(counts)
    return counts if (len(result[1]) % total == 0 if total else not result[1]) else None


class _Direct:
    """A node reached by direct calls: a client of its backend (see `Transport.link`), whose
    `submit` makes each request in the caller's thread; it has no socket."""

    sock = None

    def __init__(self, client: Transport):
        self.client = client

    def submit(self, node: str, op: int, args, on_reply, missing: set[str]) -> None:
        """Make the request; its reply to `on_reply`, as a remote one would come, or `node` into
        `missing` if it is not served (any more)."""
        try:
            result = self.client.submit(op, [a.obj if a.__class__ is p.Packed else a for a in args])
        except ServerGone:
            missing.add(node)   # gone, as a node whose process ended
            return
        except EventSpaceError as exc:
            on_reply(False, exc)
            return
        on_reply(True, result)

    def reachable(self) -> bool:
        try:
            self.client.ping()
        except PastSetError:
            return False
        return True

    def close(self) -> None:
        self.client.close()


def _malformed(node: str, op: int, result) -> ProtocolError:
    return ProtocolError(f"node {node} sent a malformed reply to {p.OP_NAMES[op]}: {result!r:.60}")


def _batches(result) -> list:
    """[(start, items), ...] as the Transport API gives them, from a batch reply's lists."""
    return [(start, items) if items.__class__ is bytes else as_batch((start, items)) for start, items in result]


def _drain(sock: zmq.Socket) -> None:
    """Read and drop every message waiting on `sock`."""
    while True:
        try:
            sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            return
