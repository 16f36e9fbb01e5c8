"""One rank of a monitored MPI run: a PATHS node in the rank's own process, its collectors, its part in the run's end."""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import json
import os
import secrets
import socket
import sys
import threading

import pastset
from pastset import AuthError, BadArgument, LimitExceeded
from pastset.terminal import counted
from paths import NodeServer, PathmapError, RunError, rundir
from paths.errors import PathsError

from ..hosted import RECORD_FLUSH
from ..space import NodeSpace
from . import interpose, library, mpi4py_access, untraced
from .collector import (MpiCollector, WindowContext, collective_methods, p2p_methods, peer_table, window_made,
                        window_methods)
from .options import Options, spawned_command
from .generate import Communicator, add_communicator, add_ranks, collector_ids, node_name, run_pathmap
from .registry import Registration
from .topology import Topology

# Hosted for the run's own ranks, whose calls give the run's token first (see Rank.for_ranks):
ADOPT = "eventspace.mpi.adopt"      # on every rank: (token, [id, members, how]) -> None
DECLARE = "eventspace.mpi.declare"  # on rank 0: (token, members, how) -> the new communicator's id
# on rank 0: (token, key, members, how) -> the id of the communicator `key` names, declared by the first member asking
DECLARE_ONCE = "eventspace.mpi.declare_once"
RANKS = "eventspace.mpi.ranks"      # on every rank: (token, [[rank, host, cluster], ...]) -> None: ranks joined
LINK = "eventspace.mpi.link"        # on every rank: (token, {node: endpoint}) -> None: where joined ranks serve
JOIN = "eventspace.mpi.join"        # on rank 0: (token, parent's rank, [host, ...]) -> the first new rank
JOINED = "eventspace.mpi.joined"    # on rank 0: (token, first, communicators known, {node: endpoint}, {node: pid})
MAX_RANKS = 65536                   # ranks a run may have, its spawned processes included
PREFIX = "eventspace.mpi:"
MAX_HOW = 256             # characters of how a communicator was made


def say(text: str) -> None:
    """One line of ours, on stderr: the program's stdout stays its own."""
    print(f"{PREFIX} {text}", file=sys.stderr, flush=True)


class RunRefused(Exception):
    """The run cannot start as asked (a taken name, a bad topology, an archive that exists...):
    rank 0 says why in one line and every rank exits with status 2."""


class Rank:
    """This process as rank K of the run: node `rK` (a NodeServer whose endpoint and event space
    run on threads of this process) holding the trace elements of the rank's collectors, and the
    traced communicators' collectors. Rank 0 also keeps the run's registration, declares the
    communicators the program makes, and writes the archive.

    The run's ranks are COMM_WORLD's, then the processes its ranks spawn (MPI.Comm.Spawn,
    Spawn_multiple), each Spawn's children the next ranks in their own COMM_WORLD's order: the
    children of a Spawn by r0 in a run of 4 ranks are r4, r5... (`spawn`). A rank's `first` is the
    run rank of its COMM_WORLD's rank 0 (0, or a spawned world's first rank).

    Making one is collective over COMM_WORLD (every rank makes its own once, after MPI is
    initialized and before the program's first MPI call; a spawned process's, with its parents,
    whose Spawn has not returned yet), and raises RunRefused (the same on every rank) when the run
    cannot start as asked; so is `finish` (when the program ends, or calls MPI.Finalize). Between
    them every MPI call on a traced communicator is collected.

    Threads: our own never call MPI. The node's threads (its endpoint, the hosted calls ADOPT,
    DECLARE, DECLARE_ONCE, RANKS, LINK, JOIN and JOINED, the recorder's, the snapshot writer) call
    no MPI; every MPI call of ours is made by a thread of the program: the one whose import of mpi4py.MPI (or MPI.Init) starts the run
    (this constructor), the one that makes a communicator (`adopt`), the one that ends the run
    (`finish`). So a program at any thread level stays within it (at MPI_THREAD_SINGLE the process
    has our threads beside the program's, which call no MPI: as MPI_THREAD_FUNNELED says). The one
    exception is the last resort of eventspace.mpi.launch._Unblock: a rank blocked for good in a
    call that Ctrl-C cannot reach is aborted (MPI_Abort) from that thread.
    """

    def __init__(self, mpi, options: Options):
        self.mpi = mpi
        self.options = options
        world = mpi.COMM_WORLD
        self.private = world.Dup()   # our own traffic never meets the program's
        self.world_rank, self.world_size = world.Get_rank(), world.Get_size()
        self.world_group = world.Get_group()
        self.finished = False
        self.registration: Registration | None = None
        self.recorder = None                          # eventspace.recorder.Recorder, with --archive or --record
        self.rings = []                               # this rank's trace elements
        self._declare_lock = threading.Lock()         # rank 0: held while a communicator or ranks join the run
        self._adopt_lock = threading.Lock()           # held while this node takes a new communicator or ranks
        self._once_lock = threading.Lock()            # rank 0: held while `_declared_once` is looked up or grows
        self._declared_once: dict[str, int] = {}      # rank 0: key -> id of the communicators declared once
        self._idups: dict[int, int] = {}              # parent's id -> Idups this rank made of it
        self._warned = False
        self._unmonitored = False   # said that a Spawn's processes run unmonitored
        self.parent = None      # a spawned process: its private intercommunicator with its parents
        self.children = []      # private intercommunicators with the processes this rank's Spawns started
        self.spawned_by = None  # a spawned process: the rank whose Spawn started it
        self.endpoints: dict[str, str] = {}   # node -> where it serves, of every rank of the run this one knows

        if options.spawned is not None:
            decision = self._welcomed(options.spawned)
        else:
            self.hosts = self.private.allgather(mpi.Get_processor_name())
            decision = self._decide() if self.world_rank == 0 else None
            decision = self.private.bcast(decision, root=0)
        if decision[0] == "refused":
            raise RunRefused(decision[1])
        # Rank 0 made the run's pathmap (the others would each import networkx and lay the same trees out).
        _, self.name, self.clusters, self.token, self.recording_dir, pathmap, self.first, comms = decision
        self.rank = self.first + self.world_rank
        self.comms = comms
        self.node = NodeServer(pathmap, node_name(self.rank))
        # The thread rK is the one that imported MPI: the program's (its stack is what `eventspace stack` shows).
        self.node.host_thread(node_name(self.rank), threading.get_ident(), threading.get_native_id())
        self.space = NodeSpace.of(self.node)
        self.node.server.host(ADOPT, self.for_ranks(self._adopt))
        self.node.server.host(RANKS, self.for_ranks(self._take_ranks))
        self.node.server.host(LINK, self.for_ranks(self._link))
        if self.rank == 0:
            self.node.server.host(DECLARE, self.for_ranks(self._declare))
            self.node.server.host(DECLARE_ONCE, self.for_ranks(self._declare_once))
            self.node.server.host(JOIN, self.for_ranks(self._join))
            self.node.server.host(JOINED, self.for_ranks(self._joined))
        problem = self._record()
        endpoint = self._serve() if problem is None else ("error", problem)
        endpoints = self.private.allgather(endpoint)
        pids = self.private.allgather(os.getpid())
        failed = [(self.first + r, ep[1]) for r, ep in enumerate(endpoints) if isinstance(ep, tuple)]
        if self.parent is not None:
            failed = self._joining(endpoint, failed)
        if failed:
            if self.recorder is not None:
                self.recorder.close("the run could not start")
            self.node.close()
            if self.registration is not None:
                self.registration.remove()
            if self.recording_dir is not None and self.rank == 0:
                from .. import recording

                recording.remove_directory(self.recording_dir)
            raise RunRefused(f"rank {failed[0][0]} could not start: {failed[0][1]}")
        self._link({node_name(self.first + r): ep for r, ep in enumerate(endpoints)})
        if self.rank == 0:
            self._register({node_name(r): pid for r, pid in enumerate(pids)})
        self.private.Barrier()   # registered and serving everywhere before the program's first call
        mpi4py_access.hold_no_lock(world)   # after the Barrier: no rank still needs another's node server

    @property
    def who(self) -> str:
        """`rank 4`, or `rank 4 (spawned by r0)`: how our lines name this rank."""
        return f"rank {self.rank}" + (f" (spawned by {node_name(self.spawned_by)})" if self.spawned_by is not None
                                      else "")

    def world_communicator(self) -> tuple[int | None, list[int]]:
        """(id, members) of this rank's COMM_WORLD: communicator 0, or for spawned processes one their
        rank 0 declares now (collective over it); id None if it could not be declared."""
        members = list(range(self.first, self.first + self.world_size))
        if self.first == 0:
            return 0, members
        how = f"COMM_WORLD of the processes {node_name(self.spawned_by)} spawned"
        cid = self._declared(members, how) if self.world_rank == 0 else None
        return self.private.bcast(cid, root=0), members

    # -- starting ------------------------------------------------------------------------------

    def _decide(self) -> tuple:
        """Rank 0: ("ok", name, host -> cluster, the run's token, recording directory or None, the run's
        pathmap), or ("refused", why). The token goes to the other ranks over MPI, never through a
        node's endpoint."""
        o = self.options
        try:
            topology = self._topology = Topology.load(o.topology) if o.topology else Topology()
            clusters = topology.cluster_of(self.hosts)
            if o.archive is not None and os.path.exists(o.archive) and os.path.getsize(o.archive):
                raise ValueError(f"archive {o.archive} exists; give a new file (an MPI run's archive "
                                 "starts empty), or remove it")
            if o.archive is not None and not os.access(os.path.dirname(os.path.abspath(o.archive)), os.W_OK):
                raise ValueError(f"archive {o.archive}: its directory is not writable; give a file in one that is")
            self.registration = Registration(o.name or o.default_name, say)
            name = self.registration.name
            directory = o.recording_dir
            if o.archive is not None and directory is None:
                from .. import recording

                directory = str(recording.new_directory(self.registration.run_file.directory, name))
            world = [Communicator(0, tuple(range(self.world_size)), "COMM_WORLD")]
            pathmap = run_pathmap(name, self.hosts, clusters, world, o.instrument, o.keep)
        except (PathmapError, OSError, ValueError, RunError) as exc:
            if self.registration is not None:
                self.registration.remove()
                self.registration = None
            return ("refused", str(exc))
        return ("ok", name, clusters, secrets.token_hex(16), directory, pathmap, 0, world)

    def for_ranks(self, fn):
        """`fn`, to host for the run's own ranks only: their calls give the run's token first (shared
        over MPI at start); any other caller of the node gets AuthError, and `fn` never runs."""
        token, name = self.token, self.name

        def hosted(given=None, *args):
            if not (isinstance(given, str) and hmac.compare_digest(given, token)):
                raise AuthError(f"only the ranks of MPI run {name} may make this call on its nodes")
            return fn(*args)

        return hosted

    def _record(self) -> str | None:
        """Start this rank's recorder (--archive: its file in the run's recording directory; --record:
        a window); why it could not, or None."""
        o = self.options
        if o.archive is None and o.record is None:
            return None
        # Here, not at import: a run that does not record never loads them (20 ms of a rank's start).
        from ..recorder import Spec
        from . import record

        try:
            if self.recording_dir is not None and not os.path.isdir(self.recording_dir):
                rundir.make_dir(self.recording_dir)   # a rank on another host than rank 0's
            head = record.header(self.name, self.rank, self.hosts, self.clusters, self.comms, o.instrument, o.keep,
                                 self.space.clock_offset_ns)
            self.recorder = record.recorder(Spec.parse(o.record or "all"), self.recording_dir, self.rank, head, say)
        except (OSError, ValueError, RunError) as exc:
            return f"cannot record: {exc}"
        self.recorder.host(self.node.server)
        return None

    def _serve(self):
        """This node's endpoint (an address the other ranks reach), or ("error", why)."""
        single_host = len(set(self.hosts)) == 1
        try:
            if single_host:
                return self.node.serve("tcp://127.0.0.1:0", insecure=self.options.insecure)
            bound = self.node.serve("tcp://0.0.0.0:0", insecure=self.options.insecure)
            address = socket.gethostbyname(self.hosts[self.rank])
            endpoint = bound.replace("0.0.0.0", address)
            self.node.endpoint = endpoint
            return endpoint
        except (pastset.PastSetError, OSError) as exc:
            return ("error", str(exc))

    def _register(self, pids: dict[str, int]) -> None:
        self.registration.ready(self.node.pathmap, self.comms, self.endpoints, pids)
        hosts = len(set(self.hosts))
        say(f"run {self.name}: {counted(len(self.hosts), 'rank')} on {counted(hosts, 'host')}; "
            f"run file {self.registration.path}")

    # -- communicators -------------------------------------------------------------------------

    def trace(self, comm, cid: int, members, remote=None, rank: int | None = None) -> None:
        """Put the collectors of communicator `cid` (members: the run's ranks) on traced `comm`, and
        counting wrappers on its untraced MPI methods (eventspace.mpi.untraced); this rank's rank in
        it is asked of `comm` unless given. For an intercommunicator, `remote` are its remote group's
        ranks, which its peers and roots name (MPI.ROOT: this rank)."""
        p2p, coll = collector_ids(self.space.catalogue, cid, self.rank)
        if remote is None:
            peers, rank, size = peer_table(members), comm.Get_rank() if rank is None else rank, len(members)
        else:
            peers, rank, size = peer_table(remote, root=self.rank), self.mpi.ROOT, len(remote)
        base = interpose.base_class(comm)
        methods = {}
        if p2p:
            methods.update(p2p_methods(comm, base, self._collector(p2p, peers), interpose.Request,
                                       interpose.Message, interpose.Prequest))
        if coll:
            methods.update(collective_methods(comm, base, self._collector(coll, peers), rank, size,
                                              interpose.Request, interpose.Prequest))
        methods.update(interpose.count_untraced(comm, base, methods))
        interpose.mark_traced(comm, cid, methods)

    def _collector(self, cid: int, peers) -> MpiCollector:
        space = self.space
        entry = space.catalogue[cid]
        element = self.node.server.element(entry.trace)
        self.rings.append(element)
        page, at = space.enrol(cid)
        spill = _nothing if self.recorder is None else self.recorder.watch(element, page.bounds, at)
        return MpiCollector(cid, space.appender(entry), page, at, spill, space.clock, peers, space.compiled,
                            space.clock_offset_ns)

    def adopt(self, comm, how: str, parent):
        """A communicator the program made from traced `parent`: declared to the run (collective
        over its members: for an intercommunicator, both groups) and returned traced; returned as it
        is if it is null or could not be declared.

        An intercommunicator's members are its two groups, the one with the run's lowest rank first,
        each in its own rank order; that group's rank 0 declares it."""
        mpi = self.mpi
        if comm is None or comm == mpi.COMM_NULL:
            return comm
        base = interpose.base_class(comm)
        if base is None:
            return comm
        source = interpose.comm_id(parent)
        how = how if source is None else f"{how} of comm {source}"
        remote = None
        if comm.Is_inter():
            # Each group sends its ranks to the other (an intercommunicator's allgather gives the remote
            # group's), then sends back what it got: its spawned processes' ranks too, which no group translates.
            remote = mpi.Comm.allgather(comm, self.rank)
            local = mpi.Comm.allgather(comm, remote)[0]
            first = min(local) < min(remote)
            members = local + remote if first else remote + local
            leading = len(local if first else remote)
            how = f"{how}, intercommunicator: groups of {leading} and {len(members) - leading}"
            cid = self._declared(members, how) if first and comm.Get_rank() == 0 else None
            cid = _across(mpi, comm, cid, first)
        else:
            cid, members = self._declared_over(comm, how)
        if cid is None:
            return comm
        mpi4py_access.hold_no_lock(comm)
        traced = interpose.traced_instance(comm, base)
        self.trace(traced, cid, members, remote)
        return traced

    def adopt_posted(self, comm, how: str, parent):
        """A communicator traced `parent` made by a nonblocking call (Idup, Idup_with_info), which may
        not be used until its request completes: declared without a call over it (its members are
        the parent's; every member asks rank 0 for the id of the parent's k-th such communicator,
        and the first to ask declares it), and returned traced; as it is if the parent is not
        traced or it could not be declared. The pickle-form reductions' duplicate is not made ahead
        (mpi4py_access.hold_no_lock would be a collective over it)."""
        base, parent_id = interpose.base_class(comm), interpose.comm_id(parent)
        if base is None or parent_id is None or parent_id >= len(self.comms):
            return comm
        members = list(self.comms[parent_id].members)
        k = self._idups[parent_id] = self._idups.get(parent_id, 0) + 1
        key = f"{parent_id}/{k}"
        try:
            cid = self._at_rank0(DECLARE_ONCE, self._declare_once, key, members, f"{how} of comm {parent_id}")
        except (pastset.PastSetError, PathsError, ValueError) as exc:
            if not self._warned:
                self._warned = True
                say(f"rank {self.rank}: a communicator could not be declared ({exc}); its calls are not collected")
            return comm
        traced = interpose.traced_instance(comm, base)
        self.trace(traced, cid, members, rank=parent.Get_rank())
        return traced

    def _declare_once(self, key: str, members: list, how: str) -> int:
        """Rank 0: the id of the communicator `key` names, declared (`_declare`) by the first call."""
        if not isinstance(key, str) or len(key) > MAX_HOW:
            raise BadArgument(f"node {self.node.name}: a communicator's key is a short text, got {key!r:.80}")
        with self._once_lock:
            if key not in self._declared_once:
                self._declared_once[key] = self._declare(list(members), how)
            return self._declared_once[key]

    def _members(self, comm) -> list[int]:
        """The run's ranks of intracommunicator `comm`'s members, in its rank order: from their ranks in
        this COMM_WORLD, or, where some are another's (a Spawn's children merged with their parents),
        which every member then finds, gathered from them all (collective over `comm`)."""
        mpi = self.mpi
        group = comm.Get_group()
        ranks = mpi.Group.Translate_ranks(group, list(range(group.Get_size())), self.world_group)
        group.Free()
        if mpi.UNDEFINED in ranks:
            return mpi.Comm.allgather(comm, self.rank)
        return [self.first + r for r in ranks]

    def _declared(self, members, how: str) -> int | None:
        """The id of the communicator or window `declare` gives, or None (said once) if it cannot be declared."""
        try:
            return self.declare(members, how)
        except (pastset.PastSetError, PathsError, ValueError) as exc:
            if not self._warned:
                self._warned = True
                say(f"rank {self.rank}: a communicator or window could not be declared ({exc}); "
                    "its calls are not collected")
            return None

    def _declared_over(self, comm, how: str) -> tuple[int | None, list[int]]:
        """(the id the run gives what intracommunicator `comm`'s members make together, or None where it
        could not be declared; their ranks in the run): collective over `comm`, whose rank 0 declares it."""
        members = self._members(comm)
        return self.mpi.Comm.bcast(comm, self._declared(members, how) if comm.Get_rank() == 0 else None, 0), members

    def adopt_window(self, make, args, op: int, how: str, comm, exposed: int):
        """A window made by make(*args) over traced communicator `comm` (collective over it): declared to
        the run as its next communicator entry (element and tree `commW`, made `how`), its calls traced
        (collector.window_methods) and its creation recorded (round 0 of tree commW: from t0 to t1,
        `exposed` bytes of this rank's memory). Returned as made where it could not be declared."""
        clock = self.space.clock
        t0 = clock()
        win = make(*args)
        t1 = clock()
        cid, members = self._declared_over(comm, how)
        if cid is None:
            return win
        p2p, coll = collector_ids(self.space.catalogue, cid, self.rank)
        peers = peer_table(members)
        context = WindowContext(members, comm.Get_rank(), self.world_group, interpose.Request, self.first)
        p2p_ch = self._collector(p2p, peers) if p2p else None
        coll_ch = self._collector(coll, peers) if coll else None
        methods = window_methods(win, p2p_ch, coll_ch, context)
        methods.update(interpose.count_untraced_window(win, methods))
        interpose.mark_traced(win, cid, methods)
        if coll_ch is not None:
            window_made(coll_ch, context, op, exposed, t0, t1)
        return win

    def declare(self, members, how: str) -> int:
        """Rank 0 gives the communicator an id and every node its collectors; the id."""
        return self._at_rank0(DECLARE, self._declare, list(members), how)

    def _at_rank0(self, name: str, fn, *args):
        """`fn(*args)` made by rank 0 (hosted there as `name`): here on rank 0, else a call to its node."""
        if self.rank == 0:
            return fn(*args)
        return self.node.client(node_name(0)).call(name, self.token, *args, timeout=60)

    def _declare(self, members: list, how: str) -> int:
        with self._declare_lock:
            wire = [len(self.comms), members, how]
            self._communicator(wire)   # refused here, before any rank takes it
            for node in self.endpoints:
                if node != self.node.name:
                    self.node.client(node).call(ADOPT, self.token, wire, timeout=60)
            self._adopt(wire)
            self.registration.update(self.node.pathmap, self.comms)
            return wire[0]

    def archive_meta(self) -> dict:
        """What an analysis of the run's archive needs beside the catalogue: ranks, hosts, clusters
        (hop classes) and how each communicator was made."""
        return {"ranks": len(self.hosts),
                "hosts": json.dumps({node_name(r): h for r, h in enumerate(self.hosts)}),
                "clusters": json.dumps({node_name(r): self.clusters[h] for r, h in enumerate(self.hosts)}),
                "communicators": json.dumps([{"id": c.id, "members": list(c.members), "how": c.how}
                                             for c in self.comms])}

    def _adopt(self, wire: list) -> None:
        """Take communicator [id, members, how] into this node's pathmap (every node, in id order):
        added to it, its collectors to the node's table, at the cost of what it holds (the pathmap
        is never made again)."""
        with self._adopt_lock:
            comm = self._communicator(wire)
            grown = add_communicator(self.node.pathmap, comm, self.options.instrument)
            self.space.extend(grown.pathmap, grown.part)
            comms = self.comms = [*self.comms, comm]
            if self.recorder is not None:   # the recording can make its catalogue again from its notes
                from .record import communicators

                self.recorder.note({"communicators": communicators(comms)})

    def _communicator(self, wire) -> Communicator:
        """The communicator [id, members, how] declares, the next one of the run: at most
        `Options.max_communicators` in all (LimitExceeded), its members distinct world ranks, `how` a
        short text (BadArgument)."""
        if not (isinstance(wire, list) and len(wire) == 3 and type(wire[0]) is int and isinstance(wire[1], list)
                and isinstance(wire[2], str)):
            raise BadArgument(f"node {self.node.name}: a communicator is [id, members, how], got {wire!r:.80}")
        cid, members, how = wire
        if cid != len(self.comms):
            raise PathsError(f"node {self.node.name}: communicator {cid} declared out of order "
                             f"(it knows {len(self.comms)})")
        most = self.options.max_communicators
        if cid >= most:
            raise LimitExceeded(f"run {self.name} traces {most} communicators at most (--max-communicators); "
                                "later ones run untraced")
        ranks = len(self.node.pathmap.nodes)
        if (not 1 <= len(members) <= ranks or len(set(members)) != len(members)
                or not all(type(m) is int and 0 <= m < ranks for m in members) or len(how) > MAX_HOW):
            raise BadArgument(f"node {self.node.name}: communicator {cid} must have distinct ranks of the run from 0 "
                              f"to {ranks - 1} as members and say how it was made in at most {MAX_HOW} characters")
        return Communicator(cid, tuple(members), how)

    # -- spawned processes ---------------------------------------------------------------------

    def spawn(self, comm, call, commands: list, root: int, how: str):
        """MPI.Comm.Spawn or Spawn_multiple on traced intracommunicator `comm` (collective over it):
        `commands` are the [(command, args)] given, `call(commands)` makes mpi4py's call with them.
        Where the root's commands all run this Python, each child runs `python -m eventspace.mpi
        --spawned ROOT -- PROGRAM` instead, joins the run (`_welcome`), and the intercommunicator is
        returned traced; otherwise the children run as asked, unmonitored, and it is returned as it
        is (said once)."""
        mpi = self.mpi
        at_root = comm.Get_rank() == root
        rewritten = [spawned_command(c, a, root) for c, a in commands] if at_root else None
        joins = mpi.Comm.bcast(comm, at_root and None not in rewritten, root)
        if not joins:
            if at_root and not self._unmonitored:
                self._unmonitored = True
                say(f"{self.who}: the processes of its {how} run unmonitored: only `{sys.executable} [flags] prog.py` "
                    f"or `-m module` joins the run (it starts {commands[0][0]!s:.80} {commands[0][1] or ''!s:.80})")
            return call(commands)
        inter = call(rewritten if at_root else commands)
        link = inter.Dup()   # ours: the children's start, and the run's end (see finish)
        joined = mpi.Comm.bcast(comm, self._welcome(link, at_root), root)
        if not joined:
            return inter
        self.children.append(link)
        return self.adopt(inter, how, comm)

    def _welcome(self, link, at_root: bool) -> bool:
        """The parents' side of a Spawn's children joining the run, over `link` (an intercommunicator
        with them; collective over both groups): their hosts in, the run as it is out, their
        endpoints in, and every rank's out once rank 0 has published them. Whether they joined (at the
        Spawn's root; False elsewhere)."""
        mpi = self.mpi
        me = mpi.ROOT if at_root else mpi.PROC_NULL
        hosts = mpi.Comm.gather(link, None, me)
        start = self._start_of(hosts) if at_root else None
        mpi.Comm.bcast(link, start, me)
        served = mpi.Comm.gather(link, None, me)
        go = self._started(start, served) if at_root else None
        mpi.Comm.bcast(link, go, me)
        return at_root and go[0] == "ok"

    def _start_of(self, hosts: list) -> tuple:
        """At a Spawn's root: what its children on `hosts` start with (what `_decide` gives the first
        ranks, then the run's options, hosts and endpoints, and this rank), once rank 0 has numbered
        them and every rank has taken their nodes; or ("refused", why)."""
        try:
            first = self._at_rank0(JOIN, self._join, self.rank, hosts)
        except (pastset.PastSetError, PathsError, ValueError) as exc:
            return ("refused", f"the run cannot take the processes {self.who} spawned: {exc}")
        with self._adopt_lock:
            return ("ok", self.name, dict(self.clusters), self.token, self.recording_dir, self.node.pathmap, first,
                    list(self.comms), self.options, list(self.hosts), dict(self.endpoints), self.rank)

    def _started(self, start: tuple, served: list) -> tuple:
        """At a Spawn's root, once its children serve (`served`: each one's endpoint or ("error", why),
        pid and how many communicators it knows): ("ok", every rank's endpoint) once rank 0 has
        published them, or ("refused", why)."""
        if start[0] != "ok":
            return start
        first = start[6]
        failed = [(first + i, endpoint[1]) for i, (endpoint, _, _) in enumerate(served) if isinstance(endpoint, tuple)]
        if failed:
            return ("refused", f"rank {failed[0][0]} could not start: {failed[0][1]}")
        endpoints = {node_name(first + i): endpoint for i, (endpoint, _, _) in enumerate(served)}
        pids = {node_name(first + i): pid for i, (_, pid, _) in enumerate(served)}
        try:
            return ("ok", self._at_rank0(JOINED, self._joined, self.rank, min(known for _, _, known in served),
                                         endpoints, pids))
        except (pastset.PastSetError, PathsError, ValueError) as exc:
            return ("refused", f"the run cannot take the processes {self.who} spawned: {exc}")

    def _welcomed(self, root: int) -> tuple:
        """A spawned process's side of `_welcome` (its parents' Spawn's root is their rank `root`), up
        to its node's start: what `_decide` gives the first ranks, or ("refused", why)."""
        mpi = self.mpi
        parent = mpi.Comm.Get_parent()
        if parent == mpi.COMM_NULL:
            return ("refused", "--spawned: this process was not started by MPI.Comm.Spawn")
        self.parent, self._parent_root = parent.Dup(), root
        mpi.Comm.gather(self.parent, mpi.Get_processor_name(), root)
        start = mpi.Comm.bcast(self.parent, None, root)
        if start[0] != "ok":
            mpi.Comm.gather(self.parent, (start, 0, 0), root)   # the parents' steps all the same
            mpi.Comm.bcast(self.parent, None, root)
            return start
        *decision, options, self.hosts, self.endpoints, self.spawned_by = start
        self.options = dataclasses.replace(options, spawned=root)
        return tuple(decision)

    def _joining(self, endpoint, failed: list) -> list:
        """A spawned process serving at `endpoint` (or failed to start: `failed`, [(rank, why)]) joins
        the run: its parents' Spawn's root has rank 0 publish it. [(rank, why)] where it could not."""
        mpi = self.mpi
        mpi.Comm.gather(self.parent, (("error", failed[0][1]) if failed else endpoint, os.getpid(), len(self.comms)),
                        self._parent_root)
        go = mpi.Comm.bcast(self.parent, None, self._parent_root)
        if go[0] != "ok":
            return failed or [(self.rank, go[1])]
        self._link(go[1])
        return []

    def _join(self, parent: int, hosts: list) -> int:
        """Rank 0: the processes rank `parent` spawned on `hosts` are the run's next ranks, which every
        rank takes (RANKS, `_take_ranks`); the first of them."""
        if type(parent) is not int or not (isinstance(hosts, list) and hosts
                                            and all(isinstance(h, str) for h in hosts)):
            raise BadArgument(f"node {self.node.name}: spawned processes join as (parent's rank, [host, ...]), "
                              f"got {parent!r:.20}, {hosts!r:.80}")
        with self._declare_lock:
            first = len(self.hosts)
            if first + len(hosts) > MAX_RANKS:
                raise LimitExceeded(f"run {self.name} has {MAX_RANKS} ranks at most, spawned processes included")
            clusters = self._topology.cluster_of(hosts)
            wire = [[first + i, host, clusters[host]] for i, host in enumerate(hosts)]
            for node in self.endpoints:
                if node != self.node.name:
                    self.node.client(node).call(RANKS, self.token, wire, timeout=60)
            self._take_ranks(wire)
            return first

    def _take_ranks(self, wire: list) -> None:
        """This node takes the ranks [[rank, host, cluster], ...] that joined the run (a Spawn's
        processes), the next ones: their nodes and threads after the others in its pathmap (their
        collectors come with the communicators they are members of)."""
        with self._adopt_lock:
            known = len(self.node.pathmap.nodes)
            if not (isinstance(wire, list) and 0 < len(wire) <= MAX_RANKS
                    and all(isinstance(w, list) and len(w) == 3 and isinstance(w[1], str) and isinstance(w[2], str)
                            for w in wire)
                    and [w[0] for w in wire] == list(range(known, known + len(wire)))):
                raise BadArgument(f"node {self.node.name}: ranks join as [[rank, host, cluster], ...], the next ones "
                                  f"({known} on), got {wire!r:.80}")
            self.space.adopt(add_ranks(self.node.pathmap, [(host, cluster) for _, host, cluster in wire]))
            self.hosts = [*self.hosts, *(host for _, host, _ in wire)]
            self.clusters = {**self.clusters, **{host: cluster for _, host, cluster in wire}}

    def _link(self, endpoints: dict) -> None:
        """Learn where ranks serve (the run's first ones, or ranks that joined it)."""
        if not (isinstance(endpoints, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in endpoints.items())):
            raise BadArgument(f"node {self.node.name}: endpoints are {{node: endpoint}}, got {endpoints!r:.80}")
        self.endpoints = {**self.endpoints, **endpoints}
        self.node.link(endpoints)

    def _joined(self, parent: int, known: int, endpoints: dict, pids: dict) -> dict:
        """Rank 0: the ranks rank `parent` spawned serve at `endpoints`: every rank learns where (LINK),
        they take the communicators declared since they started (they knew `known`), and the run file,
        then its snapshot, list them (a monitor that finds them in the snapshot finds where they
        serve). -> every rank's endpoint."""
        if type(parent) is not int or type(known) is not int or not isinstance(pids, dict):
            raise BadArgument(f"node {self.node.name}: joined ranks say (parent, communicators known, endpoints, "
                              "pids)")
        with self._declare_lock:
            self._link(endpoints)
            for node in self.endpoints:
                if node != self.node.name and node not in endpoints:
                    self.node.client(node).call(LINK, self.token, endpoints, timeout=60)
            for comm in self.comms[known:]:
                for node in endpoints:
                    self.node.client(node).call(ADOPT, self.token, [comm.id, list(comm.members), comm.how], timeout=60)
            self.registration.join(endpoints, pids)
            self.registration.update(self.node.pathmap, self.comms)
            say(f"run {self.name}: {', '.join(endpoints)} joined, spawned by {node_name(parent)}")
            return dict(self.endpoints)

    # -- finishing -----------------------------------------------------------------------------

    def abandon(self, ended: str) -> None:
        """The run ends on this rank without the others (an exception, Ctrl-C, SIGTERM, MPI_Abort),
        before MPI's abort (not collective; the node goes with the process): this rank's recording
        is closed (`ended`: how), the other ranks are asked to write theirs out, a flight recorder's
        windows are dumped into an archive, rank 0 removes the run's files, and the MPI library's
        shared-memory files this rank maps are removed (library.release_shared_memory)."""
        if self.finished:
            return
        self.finished = True
        if self.recorder is not None:
            self.recorder.close(ended)
            others = {node: self.node.client(node) for node in self.endpoints if node != self.node.name}
            if self.options.record is not None:
                self._dump(ended, others)
            else:
                for client in others.values():
                    with contextlib.suppress(pastset.PastSetError):
                        client.call(RECORD_FLUSH, timeout=2)
                if self.options.recording_dir is None:   # no eventspace mpirun to build it once the job ends
                    say(f"the recording stays in {self.recording_dir} (`eventspace archive build "
                        f"{self.recording_dir} {self.options.archive}` builds its archive)")
        if self.registration is not None:
            self.registration.remove()
        # MPI's abort follows, which leaves the library's shared-memory files of this host behind
        library.release_shared_memory()

    def _dump(self, why: str, others: dict) -> None:
        """Dump every rank's window (the flight recorder's) into a new archive here; say where."""
        from .. import recording
        from ..archive import ArchiveError

        path = recording.dump_path(self.name)
        try:
            built = recording.dump({self.node.name: self.node.client(self.node.name), **others},
                                   lambda: self.space.catalogue, path, meta={"run": self.name, "ended": why,
                                                                     **self.archive_meta()}, timeout=5)
        except (ArchiveError, OSError, pastset.PastSetError) as exc:
            say(f"the flight recorder could not be dumped: {exc}")
            return
        say(f"flight recorder ({self.options.record}) dumped to {path}: {counted(built.tuples, 'event')} from "
            f"{counted(len(built.nodes), 'rank')} ({why})")

    def finish(self) -> None:
        """The run's end, on every rank (collective; once): each rank closes its recording, rank 0
        builds the archive from them and removes the run file, then every node stops."""
        if self.finished:
            return
        self.finished = True
        # What the processes this rank spawned wrote and left untraced, which their first rank sends
        # (below) to the first of their parents, who counts it as its own.
        spawned = [link.recv(source=0) if link.Get_rank() == 0 else (0, {}) for link in self.children]
        for link in self.children:   # the processes this rank spawned have closed their recordings (below)
            link.Barrier()
        written = self.private.gather(sum(ring.last() for ring in self.rings) + sum(w for w, _ in spawned), root=0)
        not_traced = self.private.gather(untraced.summed([untraced.totals(), *(c for _, c in spawned)]), root=0)
        if self.recorder is not None:
            from . import record

            self.recorder.close(record.ENDED_NORMALLY)
        far = self.private.gather(None if self.hosts[self.rank] == self.hosts[0] else self._own_file(), root=0)
        # Each rank's account, for a recording whose last note did not reach its file (a full disk).
        closed = self.private.gather(None if self.recorder is None else
                                     self.recorder.closed.closed(self.recorder.ended), root=0)
        if self.rank == 0:
            # Every rank's program has ended, and every node still serves (the others wait in the
            # Barrier below, which releases the GIL): the monitors attached read the rest.
            self.registration.flush()   # the monitors' final read follows every communicator
            with contextlib.suppress(OSError):
                self.registration.run_file.end()
            try:
                if self.options.archive is not None:
                    from .. import recording
                    from . import record

                    streams = {node_name(r): data for r, data in enumerate(far) if data is not None}
                    built = record.build(self.recording_dir, self.options.archive, self.archive_meta(),
                                         self.space.catalogue, streams, ended=record.ENDED_NORMALLY,
                                         closed={node_name(r): c for r, c in enumerate(closed) if c is not None})
                    say(recording.closing_line(self.options.archive, built, "rank"))
                said = untraced.line(untraced.summed(not_traced))
                if not sum(written):
                    why = " (--instrument none)" if self.options.instrument == "none" else ""
                    say(f"no MPI calls were collected{why}; "
                        + (said or "the program made no MPI call but queries (Get_rank, Get_size...)"))
                elif said:
                    say(said)
            except Exception as exc:  # the other ranks wait below: say it, and end the run all the same
                say(f"the archive could not be completed: {type(exc).__name__}: {exc}"
                    + (f"; the recording stays in {self.recording_dir} (`eventspace archive build "
                       f"{self.recording_dir} F.sqlite` builds it)" if self.recording_dir else ""))
            finally:
                self.registration.remove()
        if self.parent is not None:   # its recording is closed; then wait for the run's archive (its parents' end)
            if self.world_rank == 0:
                self.parent.send((sum(written), untraced.summed(not_traced)), dest=0)
            self.parent.Barrier()
            self.parent.Barrier()
            self.parent.Disconnect()
        self.private.Barrier()   # the archive is complete: the nodes may stop
        for link in self.children:
            link.Barrier()
            link.Disconnect()
        self.node.close()
        self.world_group.Free()
        self.private.Free()

    def _own_file(self) -> bytes | None:
        """This rank's recording file, for a rank 0 on another host (None without one)."""
        if self.options.archive is None or self.recording_dir is None:
            return None
        from ..recording import node_file

        with open(node_file(self.recording_dir, self.node.name), "rb") as f:
            return f.read()


def _across(mpi, comm, value, first: bool):
    """`value` of rank 0 of intercommunicator `comm`'s `first` group, on every member of both groups:
    sent to the other group, whose rank 0 sends it back to the first (on the program's new
    communicator, before the program has it: MPI orders these collectives before any of its own)."""
    rank = comm.Get_rank()
    for sending in (first, not first):
        if sending:
            mpi.Comm.bcast(comm, value, mpi.ROOT if rank == 0 else mpi.PROC_NULL)
        else:
            value = mpi.Comm.bcast(comm, None, 0)
    return value


def _nothing() -> None:
    pass
