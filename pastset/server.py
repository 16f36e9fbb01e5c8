"""The node server: hosts elements for in-process callers and, once served, for remote clients."""

from __future__ import annotations

from functools import partial

from . import local
from .caller import IN_PROCESS, Caller
from .budget import MemoryBudget
from .checks import check_index
from .deferred import waited
from .element import Element, ElementInfo
from .errors import TemplateMismatch, UnknownElement
from .protocol import Limits
from .security import Security, resolve
from .table import ElementTable, read_once
from .template import Template


class TupleServer:
    """A PastSet node server: a table of elements, usable in-process and over ZeroMQ.

    In-process callers use the elements directly (a lock and a memory copy). `serve()` adds a
    ZeroMQ ROUTER endpoint through which `pastset.connect` clients reach the same elements, or
    a name (`local://NAME`) through which `pastset.connect` gives callers in this process the
    client API with direct calls. Thread-safe; every method may be called from any thread.

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
    - Blocked requests parked by remote clients: see `pastset.endpoint.Endpoint`.
    """

    def __init__(self, name: str = "pastset", limits: Limits = Limits()):
        self.name = name
        self.limits = limits
        # Elements may hold all of it but room for two of the biggest replies: they can be read.
        self.budget = MemoryBudget(limits.max_memory, limits.max_ring, name,
                                   reserve=min(2 * limits.max_reply, limits.max_memory // 4))
        self.table = ElementTable(name, limits, self.budget)
        self._endpoints: list = []    # ZeroMQ endpoints and in-process names, as served
        self._hosted: dict[str, object] = {}
        self._inline: set[str] = set()   # hosted names that run on the endpoint loop
        self._asks_caller: set[str] = set()   # hosted names called with their Caller first

    def enter(self, name: str, template, keep: int | None = None, delta: int | None = None) -> Element:
        """Bind to the element `name`, creating it if absent.

        Entering an existing element with another template (or another explicit keep/delta)
        raises TemplateMismatch; keep/delta of None accept whatever the element has. Creating one
        past `Limits.max_elements`, or whose ring or objects the memory budget cannot hold, raises
        LimitExceeded.
        """
        return self.table.enter(name, Template.of(template), keep, delta, None)

    def element(self, name: str) -> Element:
        """The existing element `name`; raises UnknownElement (with close names) if absent."""
        return self.table.named(name)

    def delete(self, name: str) -> None:
        """Remove the element; callers blocked on it get UnknownElement, and its memory goes back
        to the budget."""
        self.table.delete(name).mark_deleted()

    def elements(self) -> list[ElementInfo]:
        """A snapshot of every element, sorted by name."""
        return [e.info() for e in self.table.snapshot()]

    def latest_many(self, elements, n: int = 1) -> list[tuple[int, list | bytes]]:
        """`latest(n)` of many elements (Element objects, names or ids) at once, in the given order."""
        return [e.latest(n) for e in self.table.find_all(elements)]

    def enter_rings(self, names, template, keep: int) -> list[Element]:
        """Create many binary elements of one template and discard threshold whose rings are rows
        of one slab (pastset.ring.RingSlab), so that `latest_records` reads the newest record of
        all of them in one vectorised step. Every name must be new (TemplateMismatch otherwise)."""
        return self.table.enter_rings(names, Template.of(template), keep)

    def latest_records(self, elements, n: int = 1) -> bytes:
        """The newest `n` records of many binary elements (Element objects, names or ids), as one
        bytes, in the given order. UnknownElement for one that does not exist, TemplateMismatch
        for a typed one."""
        return self._newest(self.table.find_all(elements), n, False)

    def latest_records_counted(self, elements, n: int = 1) -> tuple[bytes, bytes]:
        """`latest_records`, with how many records each element gave (fewer than `n` when it holds
        fewer) as little-endian u32s: (counts, records). What a caller that asked for the records
        of several parties at once cuts the reply by (pastset.fanout)."""
        return self._newest(self.table.find_all(elements), n, True)

    def _newest(self, found: list[Element], n: int, counted: bool):
        check_index(n)
        slab = found[0].slab if found and n == 1 else None
        if slab is not None and all(e.slab is slab for e in found):
            return slab.newest(found, counted)
        for element in found:
            if not hasattr(element, "latest_records"):
                raise TemplateMismatch(f"element {element.name} is typed; latest_records reads binary "
                                       "elements only (use latest_many)")
        chunks = read_once(found, lambda element: element.latest_records(n))
        records = b"".join(chunks)
        if not counted:
            return records
        size = found[0].template.record_size if found else 1
        return b"".join((len(c) // size).to_bytes(4, "little") for c in chunks), records

    def range_many(self, elements, los, hi: int) -> list[tuple[int, list | bytes]]:
        """`read_range(lo, hi)` of many elements (Element objects, names or ids), each from its own lo."""
        return [e.read_range(lo, hi) for e, lo in zip(self.table.find_all(elements), los)]

    def host(self, name: str, fn, inline: bool = False, caller: bool = False) -> None:
        """Offer `fn` to remote clients as `client.call(name, *args)`.

        This is how layers above PastSet (PATHS stages) run code inside a node server. A
        hosted callable may block: remote calls run on worker threads (at most
        `Limits.max_calls` at once), never on the endpoint's loop. `inline=True` is for a
        callable that never blocks and returns at once (a clock reading): it runs on the
        loop itself, with no thread hand-off. One that would wait on other servers returns a
        `pastset.deferred.Deferred` instead, which the loop carries to its answer while it
        serves other requests (a client, one connection, may have at most
        `Limits.max_deferred_per_client` of them on their way). It receives and returns
        msgpack-encodable values; an EventSpaceError it raises (a PastSetError, a PathsError) reaches
        the caller by name.
        `caller=True`: `fn` is called with the `Caller` first, `fn(caller, *args)` (`IN_PROCESS`
        for a call made in this process), for a callable that decides by who asks.
        """
        self.table.check_name(name)
        self._hosted[name] = fn
        for on, names in ((inline, self._inline), (caller, self._asks_caller)):
            if on:
                names.add(name)
            else:
                names.discard(name)

    def unhost(self, name: str) -> None:
        self._hosted.pop(name, None)

    def call(self, name: str, *args):
        """Run a hosted callable in this thread (the in-process form of `Client.call`); a deferred
        answer is waited for here."""
        return waited(self.hosted(name)[0](*args))

    def hosted(self, name: str, caller: Caller = IN_PROCESS):
        """(the callable hosted as `name`, with `caller` bound first if it asks who calls; whether it
        runs inline); UnknownElement if none is."""
        fn = self._hosted.get(name)
        if fn is None:
            raise UnknownElement(f"nothing is hosted as {name!r} on server {self.name}")
        if name in self._asks_caller:
            fn = partial(fn, caller)
        return fn, name in self._inline

    def serve(self, bind: str = "tcp://127.0.0.1:0", security: Security | None = None) -> str:
        """Open an endpoint for clients; returns it, as `pastset.connect` takes it.

        `tcp://HOST:PORT` or `ipc://PATH`: a ZeroMQ endpoint for remote clients (port 0 picks a
        free port), whose loop runs in a background thread until `close()`. With `security` that
        serves CURVE (None: the process's keys, see `pastset.security.default`), clients must speak
        CURVE with a key the security's authorised directory holds; any other client is refused
        during its handshake and never reaches the loop. No address policy here: see
        `pastset.security.check_bind`.

        `local://NAME`: a name in this process (`local://` alone: a new one made from the server's
        name), through which `pastset.connect` gives the client API as direct calls; a name served
        already raises BadArgument.
        """
        if bind.startswith(local.SCHEME):
            endpoint = local.Name(self, bind)
        else:
            from .endpoint import Endpoint   # ZeroMQ, only for a server that serves over it

            endpoint = Endpoint(self, bind, resolve(security))
        self._endpoints.append(endpoint)
        return endpoint.endpoint

    @property
    def endpoints(self) -> list[str]:
        return [e.endpoint for e in self._endpoints]

    def traffic(self) -> tuple[int, int, int, int]:
        """(messages received, bytes received, messages sent, bytes sent) by this server's
        endpoints since they opened: remote requests and replies (frames' payloads; in-process
        calls are not messages)."""
        endpoints = [e for e in self._endpoints if not isinstance(e, local.Name)]
        return (sum(e.msgs_in for e in endpoints), sum(e.bytes_in for e in endpoints),
                sum(e.msgs_out for e in endpoints), sum(e.bytes_out for e in endpoints))

    def close(self) -> None:
        """Stop serving clients (in-process use of the server itself goes on working)."""
        while self._endpoints:
            self._endpoints.pop().close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def element_changed(self, element: Element) -> None:
        """Called, element mutex held, when an element with parked remote requests changes."""
        for endpoint in self._endpoints:  # requests may be parked on any of them
            endpoint.element_changed(element)

