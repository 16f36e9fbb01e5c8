"""One node's share of the virtual event space: its trace elements, collector switches and clock."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import NamedTuple

from pastset import AuthError, BadArgument, Expired, LimitExceeded, PastSetError, Timeout, UnknownElement
from pastset import Fanout
from pastset.caller import Caller
from pastset.deferred import Deferred
from paths.errors import PathsError
from paths.sections import CLOCK_SAMPLES

from . import compiled, trace
from .catalogue import Catalogue
from .clock import estimate, monotonic_clock
from .gather import GatherJoin, JoinLimits, JoinSpec, Pulled
from .hosted import (CLOCK, CLOCK_CHILDREN, CURSORS, INFLIGHT, INSTALL, LIST, OFF, PULL, RECORDING_ENVIRONMENT, REMOVE,
                     RENEW)
from .table import CollectorTable, Page

CONTROL = "eventspace/control"          # ("on" | "off", [collector ids]) moved here switches collectors
CONTROL_TEMPLATE = ["str", "any"]
_SWEEP_EVERY = 0.25                     # seconds between looks for scope joins whose lease ended
# What a placed join holds, as its node's memory budget counts it: a little over what tracemalloc
# measured of joins over the paper layout's catalogue (1,841 collectors): 2 kB bare, 105 B a leaf
# with its stream cursor, 250-290 B a child, 180-250 B a character of a filter compiled both ways,
# 34 kB a classes stage (tables by collector id), 18 kB a histogram stage.
_JOIN_BYTES = 8 * 1024                  # the join, its spec and its frame
_LEAF_BYTES = 256                       # per leaf: its name in two lists, its stream cursor
_CHILD_BYTES = 512                      # per child: [node, key, nodes]
_STAGE_BYTES = 16 * 1024                # per stage, and per stage and collector of the run, 16 B more
_STAGE_CHAR_BYTES = 320                 # per character of its stages: a filter's trees and closures
SINGLE_THREAD_ROLES = frozenset({"source", "contribute"})  # collectors only their thread calls
CLOCK_TIMEOUT_S = 60.0                  # at most, per exchange of clock_children


class Mark(NamedTuple):
    """What a collector that marks its operations is timing right now: the start (ns, node clock)
    and the trace record's fields as known when the operation began (eventspace.mpi.encoding
    says what they mean for an MPI call)."""

    t_start: int
    op: int
    flags: int
    element: int
    arg: int
    nbytes: int


class NodeSpace:
    """The event space of one node server, made on first use by a collector or at node start.

    It enters a trace element (binary, keep from the pathmap's instrument section) for every
    collector whose traces live on this node, keeps an on/off switch per collector, and runs a
    thread that applies what is moved into the node's control element, so that collectors are
    switched while the application runs (within a few milliseconds).

    Its collectors run compiled (eventspace/collector_c/) unless EVENTSPACE_PURE=1 or the extension
    was not built (`implementation` says which; see eventspace.compiled).
    """

    KEY = "eventspace"

    @classmethod
    def of(cls, node) -> NodeSpace:
        space = node.services.get(cls.KEY)
        if space is None:
            space = node.services[cls.KEY] = cls(node)
        return space

    def __init__(self, node):
        self.node = node
        self.catalogue = Catalogue(node.pathmap)
        self.clock = monotonic_clock(node.clock_offset_ns)
        self.clock_offset_ns = node.clock_offset_ns
        self.started_ns = self.clock()   # no collector of this node times anything before
        self.compiled = compiled.collector_module()
        self.implementation = "pure" if self.compiled is None else "compiled"
        keep = node.pathmap.instrument.keep
        # One slab for all of this node's trace elements: a scope's latest pull reads them all
        # in one vectorised step.
        mine = [entry.trace for entry in self.catalogue.on_node(node.name)]
        if mine:
            node.server.enter_rings(mine, trace.FORMAT, keep)
        # A PATHS run started with --archive or --record: this node records its trace elements.
        self.recorder = None
        if os.environ.get(RECORDING_ENVIRONMENT):
            from .recording import node_recorder

            self.recorder = node_recorder(node.name, node.clock_offset_ns)
            for name in mine:
                self.recorder.watch(node.server.element(name))
            self.recorder.host(node.server)
        # One table by collector id (eventspace.table), shared by all of this node's collectors (so
        # that a collector called after many others finds them in the caches): each one's switch,
        # in-flight start and mark, and drain bound. It grows by pages as the run's pathmap does
        # (an MPI run's, per communicator); heartbeat monitors read what is in flight.
        self.table = CollectorTable(len(self.catalogue) + len(self.catalogue.system) + 1)
        self._enrolled: set[int] = set()   # ids of the collectors built on this node
        self.control = node.server.enter(CONTROL, CONTROL_TEMPLATE)
        self._closing = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name=f"eventspace-control-{node.name}", daemon=True)
        self._watcher.start()
        node.server.host(CLOCK, self.clock, inline=True)
        node.server.host(INFLIGHT, self.in_flight, inline=True)
        node.server.host(OFF, self.switched_off, inline=True)
        # Scope joins placed here by monitors: key -> GatherJoin; each holds a lease. They read this
        # node's trace elements through its in-process name, as they read other nodes' remotely.
        self.local_endpoint = node.server.serve("local://")
        self.join_limits = JoinLimits()
        self._joins: dict[str, GatherJoin] = {}
        self._joins_mutex = threading.Lock()  # held while _joins (and the joins' owners) change
        self._owned: dict[tuple, int] = {}    # client connection -> how many joins it placed are here
        # Fan-outs free for a pull: each pull in flight asks other nodes with one of its own.
        self._fanouts: list[Fanout] = []
        for name, fn in ((REMOVE, self.remove), (RENEW, self.renew), (LIST, self.joins), (CURSORS, self.cursors),
                         (CLOCK_CHILDREN, self.clock_children)):
            node.server.host(name, fn)
        node.server.host(INSTALL, self.install, caller=True)
        # A pull waits on other nodes' replies without a thread: the endpoint's loop carries it.
        node.server.host(PULL, self.pull, inline=True)
        self._sweeper = threading.Thread(target=self._sweep, name=f"eventspace-leases-{node.name}", daemon=True)
        self._sweeper.start()

    def recorded(self, element) -> None:
        """Record `element` too, if this node records (a trace element made after the collectors'
        ones: its system summary element)."""
        if self.recorder is not None:
            self.recorder.watch(element)

    def appender(self, entry):
        """How collector `entry` appends a record (op, flags, collector, element, arg, nbytes, t0, t1).

        A collector on one thread's path (source) or one member's way into a tree (contribute)
        is only ever called by that thread: it appends to its local trace element without a lock.
        """
        if entry.trace_node == self.node.name:
            single_writer = entry.role in SINGLE_THREAD_ROLES
            element = self.node.server.element(entry.trace)
            # The compiled appender writes a bounded ring in place, as BinaryElement.appender does.
            if (self.compiled is not None and element.template.fmt == trace.FORMAT and element.keep is not None
                    and element._delta is None):
                return self.compiled.RingAppender(element, single_writer)
            return element.appender(single_writer)
        handle = self.node.client(entry.trace_node).element(entry.trace)
        return lambda *record: handle.move(record)

    def clock_children(self, nodes: list[str], samples: int, timeout: float) -> dict[str, list[int]]:
        """The first phase of the tree clock scheme (eventspace.clock.tree_estimate): the offsets
        of this run's `nodes` from this node's clock, and the least round trip each, measured
        from here. Only nodes of the run's pathmap are asked (never an address from the caller)."""
        known = {n.name for n in self.node.pathmap.nodes}
        unknown = [n for n in nodes if n not in known]
        if unknown:
            raise ValueError(f"cannot measure the clock of {', '.join(map(str, unknown))}: not a node of this run")
        if type(samples) is not int or not 1 <= samples <= CLOCK_SAMPLES:
            raise ValueError(f"cannot measure clocks with {samples!r} samples a node: give 1 to {CLOCK_SAMPLES}")
        if not isinstance(timeout, (int, float)) or not 0 < timeout <= CLOCK_TIMEOUT_S:
            raise ValueError(f"cannot measure clocks with a timeout of {timeout!r} s: give more than 0, "
                             f"at most {CLOCK_TIMEOUT_S}")
        nodes = list(dict.fromkeys(nodes))
        shift = self.clock() - time.monotonic_ns()   # this node's clock minus the one estimate times with
        estimates = estimate({n: self.node.endpoint_of(n) for n in nodes}, int(samples), timeout=float(timeout))
        return {n: [e.offset_ns - shift, e.delay_ns] for n, e in estimates.items()}

    def in_flight(self) -> list[list[int]]:
        """[collector id, start ns] of every collected operation under way on this node now,
        followed by its mark's other five fields (see Mark) for a collector that marks them."""
        return self.table.in_flight()

    def adopt(self, pathmap) -> None:
        """Take the run's pathmap after it grew while the run goes on, whatever grew it: its
        catalogue, made anew, must only append collectors (ValueError otherwise): ids that
        monitors already use keep their meaning. See `extend` for a run that knows what it adds."""
        catalogue = Catalogue(pathmap)
        old = self.catalogue.entries
        if catalogue.entries[:len(old)] != old:
            raise ValueError(f"pathmap {pathmap.name} changes collectors of the running one; "
                             "a growing run may only append collectors")
        self._grow(catalogue)

    def extend(self, pathmap, part) -> None:
        """Take the run's pathmap grown by `part` while the run goes on (an MPI run declares each
        communicator this way; Catalogue.extended says what `pathmap` must be, and raises
        ValueError otherwise): part's collectors join the table, numbered after all others. It
        costs what part holds, not what the run holds."""
        self._grow(self.catalogue.extended(pathmap, part))

    def _grow(self, catalogue: Catalogue) -> None:
        """The node takes `catalogue`'s pathmap (ValueError, and nothing changes, if it is not its run
        grown), and the collectors the catalogue has after this node's join its table: a trace
        element for each whose traces live here, their slots in the table."""
        self.node.grow(catalogue.pathmap)
        added = catalogue.entries[len(self.catalogue):]
        mine = [e.trace for e in added if e.trace_node == self.node.name]
        if mine:
            self.node.server.enter_rings(mine, trace.FORMAT, catalogue.pathmap.instrument.keep)
        self.table.grow(len(catalogue) + 1)   # by new pages: collectors hold the ones they have
        self.catalogue = catalogue

    def enrol(self, cid: int) -> tuple[Page, int]:
        """Collector `cid` runs on this node: `set` switches it. Its slot in the table: (page, index),
        where it reads its switch and writes its in-flight start (see eventspace.table.Page)."""
        place = self.table.place(cid)
        self._enrolled.add(cid)
        return place

    def switch(self, cid: int) -> bool:
        """Whether collector `cid` collects (True) or only forwards (False)."""
        return self.table.switch(cid)

    def switched_off(self) -> list[int]:
        """The ids of this node's collectors (and system sampler) that are switched off, in order."""
        return sorted(cid for cid in self._enrolled if not self.table.switch(cid))

    def set(self, on: bool, cids=None) -> int:
        """Switch the given collectors of this node (all of them for None); how many were switched."""
        chosen = self._enrolled if cids is None else [c for c in cids if c in self._enrolled]
        for cid in chosen:
            self.table.set(cid, on)
        return len(chosen)

    # -- scope joins placed on this node -------------------------------------------------------

    def install(self, caller: Caller, spec: dict, lease: float) -> None:
        """Place a scope join here for `caller`, leased for `lease` seconds (renewed by pulls and
        `renew`); it replaces a join of the same key.

        A client of the node may have sent anything: the spec is checked field by field and bounded
        (`JoinLimits`, `JoinSpec.placed`), the join is counted in the node's memory budget, and it
        reaches the run's other nodes where the run says they listen, not where the spec says
        (unless the pathmap's `security.join_endpoints` lists the address). Under CURVE only a
        client whose key the node's authorized_clients/ holds now may place one (AuthError)."""
        node, limits = self.node, self.join_limits
        security = node.security
        if not caller.in_process and security.serves and not security.authorises(caller.key):
            raise AuthError(f"node {node.name} places scope joins only for clients whose CURVE key is in "
                            f"{security.authorized} now; this client's key ({caller.key}) is not")
        lease = limits.lease(lease)
        join = GatherJoin(JoinSpec.placed(spec, node.name, self.catalogue, limits), self.catalogue, joins=self._joins,
                          clock=self.clock, started=self.started_ns)
        join.endpoints = self._endpoints_for(join.spec)
        join.lease = lease
        join.owner = caller.connection
        join.charge = _size_of(join.spec, len(self.catalogue) + len(self.catalogue.system))
        key = join.spec.key
        with self._joins_mutex:
            replaced = self._joins.get(key)
            if len(self._joins) >= limits.max_joins and replaced is None:
                raise LimitExceeded(f"node {node.name} already holds {limits.max_joins} scope joins "
                                    "(JoinLimits.max_joins); close some scopes")
            owned = self._owned.get(join.owner, 0) - (replaced is not None and replaced.owner == join.owner)
            if join.owner is not None and owned >= limits.max_joins_per_client:
                raise LimitExceeded(f"this client (one connection) already placed {owned} scope joins on node "
                                    f"{node.name}, its share (JoinLimits.max_joins_per_client = "
                                    f"{limits.max_joins_per_client}); close some scopes")
            node.server.budget.take(join.charge, f"scope join {key!r}")
            if replaced is not None:
                self._drop(key)
            join.lease_until = time.monotonic() + lease
            self._joins[key] = join
            self._owned[join.owner] = self._owned.get(join.owner, 0) + 1

    def _endpoints_for(self, spec: JoinSpec) -> dict[str, str]:
        """Where the join reaches each node of the run (it, and the joins below it in this process,
        which its rounds pull): this node in-process; another where the run says it listens (the
        launcher's word, else the pathmap's), or where the spec says if the pathmap's
        security.join_endpoints allows that address."""
        allowed = self.node.pathmap.security.join_endpoints
        reads = {*spec.leaves, *(child[0] for child in spec.children)}
        out = {}
        for name in (n.name for n in self.node.pathmap.nodes):
            given = spec.endpoints.get(name)
            try:
                out[name] = (self.local_endpoint if name == self.node.name else given if given in allowed
                             else self.node.endpoint_of(name))
            except PathsError:
                if name in reads:   # one it reads itself must be known (a join below it read its own)
                    raise
        return out

    def pull(self, key: str, above: int = -1) -> Deferred:
        """Pull join `key`: its round's requests are sent now, and the Deferred gives the Pulled's
        wire form once their replies are in (the endpoint's loop carries it meanwhile). A join that
        pulls it gives its own level as `above`: a child's level is greater than its parent's
        (BadArgument otherwise), so that no pull comes back to a join it has passed."""
        join = self._join(key)
        if type(above) is not int or join.spec.level <= above:
            raise BadArgument(f"scope join {key!r} (level {join.spec.level}) is not below the join that pulls it "
                              f"(level {above!r}): a join's children are on greater levels")
        join.lease_until = time.monotonic() + join.lease
        fanouts = self._fanouts
        fanout = fanouts.pop() if fanouts else Fanout({})
        for node, endpoint in join.endpoints.items():
            fanout.add(node, endpoint)

        def done(pulled: Pulled) -> list:
            fanouts.append(fanout)
            return pulled.wire()

        try:
            return join.start(fanout).then(done)
        except BaseException:
            fanouts.append(fanout)
            raise

    def remove(self, key: str) -> dict:
        """Remove a join; its stream cursors (so that a new tree can go on where it stopped)."""
        with self._joins_mutex:
            join = self._drop(key) if isinstance(key, str) else None
        return join.cursors if join is not None else {}

    def cursors(self, key: str) -> dict:
        return dict(self._join(key).cursors)

    def renew(self, keys: list, lease: float) -> int:
        until = time.monotonic() + self.join_limits.lease(lease)
        if not isinstance(keys, list) or len(keys) > self.join_limits.max_joins:
            raise BadArgument(f"renew takes a list of at most {self.join_limits.max_joins} join keys")
        renewed = 0
        for key in keys:
            join = self._joins.get(key) if isinstance(key, str) else None
            if join is not None:
                join.lease_until = until
                renewed += 1
        return renewed

    def joins(self) -> list[str]:
        return sorted(self._joins)

    def _join(self, key) -> GatherJoin:
        join = self._joins.get(key) if isinstance(key, str) else None
        if join is None:
            raise UnknownElement(f"no scope join {key!r:.300} on node {self.node.name} (its lease ended, "
                                 "or its scope was closed)")
        return join

    def _drop(self, key: str) -> GatherJoin | None:
        """Take join `key` away (mutex held): its memory back to the budget, its owner's count down."""
        join = self._joins.pop(key, None)
        if join is not None:
            self.node.server.budget.give(join.charge)
            left = self._owned[join.owner] - 1
            if left:
                self._owned[join.owner] = left
            else:
                del self._owned[join.owner]
        return join

    def _sweep(self) -> None:
        last = time.monotonic()
        while not self._closing.wait(_SWEEP_EVERY):
            now = time.monotonic()
            # Woken long after it slept: this process was stopped (SIGSTOP, swapped out), and no
            # renewal could reach it meanwhile. Its leases run on from now, not from before.
            stopped = now - last - _SWEEP_EVERY
            last = now
            with self._joins_mutex:
                if stopped > _SWEEP_EVERY:
                    for join in self._joins.values():
                        join.lease_until += stopped
                for key in [k for k, j in self._joins.items() if j.lease_until < now]:
                    self._drop(key)

    def _watch(self) -> None:
        # Read by index and discard only once applied: a switcher that sees the command gone
        # (first() past it) knows it has taken effect.
        index = self.control.first()
        while not self._closing.is_set():
            try:
                command, cids = self.control.observe(index, timeout=0.25)
            except Timeout:
                continue
            except (UnknownElement, Expired):
                return
            if command in ("on", "off") and (cids is None or isinstance(cids, list)):
                self.set(command == "on", cids)
            self.control.axe(index)
            index += 1

    def close(self) -> None:
        self._closing.set()
        if self.recorder is not None:
            self.recorder.close("the node stopped")
        with contextlib.suppress(PastSetError):   # wakes the watcher now, not at its next timeout
            self.node.server.delete(CONTROL)
        self._watcher.join(timeout=2)
        self._sweeper.join(timeout=2)


def _size_of(spec: JoinSpec, collectors: int) -> int:
    """The bytes a join of `spec` holds on a node of a run of `collectors`, as the node's memory
    budget counts them."""
    leaves = sum(len(names) for names in spec.leaves.values())
    return (_JOIN_BYTES + _LEAF_BYTES * leaves + _CHILD_BYTES * len(spec.children)
            + (_STAGE_BYTES + 16 * collectors) * len(spec.stages)
            + _STAGE_CHAR_BYTES * sum(len(text) for text in spec.stages))


def start_event_space(node) -> None:
    """Entry point (eventspace.node_services): every node server gets its event space at start."""
    NodeSpace.of(node)


def switch_collectors(client, on: bool, cids=None, wait: float = 1.0) -> None:
    """Switch collectors of the node behind `client` (a pastset Client or TupleServer) on or off.

    Returns once the node's watcher has taken the command (at most `wait` seconds; PastSetError
    if it has not by then: is the node's event space running?)."""
    try:
        control = client.element(CONTROL)
        index = control.move(["on" if on else "off", None if cids is None else list(cids)])
        deadline = time.monotonic() + wait
        while control.first() <= index:
            if time.monotonic() >= deadline:
                raise PastSetError(f"the node did not take the command within {wait} s")
            time.sleep(0.002)
    except PastSetError as exc:
        raise PastSetError(f"cannot switch collectors: {exc}") from None
