"""One rank of a monitored MPI run: a PATHS node in the rank's own process, its collectors, its part in the run's end."""

from __future__ import annotations

import contextlib
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
from . import interpose, mpi4py_access
from .collector import MpiCollector, collective_methods, p2p_methods, peer_table
from .options import Options
from .generate import Communicator, add_communicator, collector_ids, node_name, run_pathmap
from .registry import Registration
from .topology import Topology

# Hosted for the run's own ranks, whose calls give the run's token first (see Rank.for_ranks):
ADOPT = "eventspace.mpi.adopt"      # on every rank: (token, [id, members, how]) -> None
DECLARE = "eventspace.mpi.declare"  # on rank 0: (token, members, how) -> the new communicator's id
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

    Making one is collective over COMM_WORLD (every rank makes its own once, after MPI is
    initialized and before the program's first MPI call), and raises RunRefused (the same on every
    rank) when the run cannot start as asked; so is `finish` (when the program ends, or calls
    MPI.Finalize). Between them every MPI call on a traced communicator is collected.

    Threads: our own never call MPI. The node's threads (its endpoint, the hosted calls ADOPT and
    DECLARE, the recorder's, the snapshot writer) call no MPI; every MPI call of ours is made by a
    thread of the program: the one whose import of mpi4py.MPI (or MPI.Init) starts the run
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
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.world_group = world.Get_group()
        self.finished = False
        self.registration: Registration | None = None
        self.recorder = None                          # eventspace.recorder.Recorder, with --archive or --record
        self.rings = []                               # this rank's trace elements
        self._declare_lock = threading.Lock()         # rank 0: held while a communicator is declared
        self._adopt_lock = threading.Lock()           # held while this node takes a new communicator
        self._warned = False

        self.hosts = self.private.allgather(mpi.Get_processor_name())
        decision = self._decide() if self.rank == 0 else None
        decision = self.private.bcast(decision, root=0)
        if decision[0] == "refused":
            raise RunRefused(decision[1])
        # Rank 0 made the run's pathmap (the others would each import networkx and lay the same trees out).
        _, self.name, self.clusters, self.token, self.recording_dir, pathmap = decision
        self.comms = [Communicator(0, tuple(range(self.size)), "COMM_WORLD")]
        self.node = NodeServer(pathmap, node_name(self.rank))
        # The thread rK is the one that imported MPI: the program's (its stack is what `eventspace stack` shows).
        self.node.host_thread(node_name(self.rank), threading.get_ident(), threading.get_native_id())
        self.space = NodeSpace.of(self.node)
        self.node.server.host(ADOPT, self.for_ranks(self._adopt))
        if self.rank == 0:
            self.node.server.host(DECLARE, self.for_ranks(self._declare))
        problem = self._record()
        endpoint = self._serve() if problem is None else ("error", problem)
        endpoints = self.private.allgather(endpoint)
        failed = [(r, ep[1]) for r, ep in enumerate(endpoints) if isinstance(ep, tuple)]
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
        pids = self.private.allgather(os.getpid())
        self.endpoints = {node_name(r): ep for r, ep in enumerate(endpoints)}
        self.node.link(self.endpoints)
        if self.rank == 0:
            self._register({node_name(r): pid for r, pid in enumerate(pids)})
        self.private.Barrier()   # registered and serving everywhere before the program's first call
        mpi4py_access.hold_no_lock(world)   # after the Barrier: no rank still needs another's node server

    # -- starting ------------------------------------------------------------------------------

    def _decide(self) -> tuple:
        """Rank 0: ("ok", name, host -> cluster, the run's token, recording directory or None, the run's
        pathmap), or ("refused", why). The token goes to the other ranks over MPI, never through a
        node's endpoint."""
        o = self.options
        try:
            topology = Topology.load(o.topology) if o.topology else Topology()
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
            pathmap = run_pathmap(name, self.hosts, clusters, [Communicator(0, tuple(range(self.size)), "COMM_WORLD")],
                                  o.instrument, o.keep)
        except (PathmapError, OSError, ValueError, RunError) as exc:
            if self.registration is not None:
                self.registration.remove()
                self.registration = None
            return ("refused", str(exc))
        return ("ok", name, clusters, secrets.token_hex(16), directory, pathmap)

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
        say(f"run {self.name}: {counted(self.size, 'rank')} on {counted(hosts, 'host')}; "
            f"run file {self.registration.path}")

    # -- communicators -------------------------------------------------------------------------

    def trace(self, comm, cid: int, members) -> None:
        """Put the collectors of communicator `cid` (members: world ranks) on traced `comm`."""
        p2p, coll = collector_ids(self.space.catalogue, cid, self.rank)
        peers = peer_table(members)
        base = interpose.base_class(comm)
        methods = {}
        if p2p:
            methods.update(p2p_methods(comm, base, self._collector(p2p, peers), interpose.Request,
                                       interpose.Message))
        if coll:
            methods.update(collective_methods(comm, base, self._collector(coll, peers), comm.Get_rank(),
                                              comm.Get_size()))
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
        over its members) and returned traced; returned as it is if it is null, an
        intercommunicator, or could not be declared."""
        mpi = self.mpi
        if comm is None or comm == mpi.COMM_NULL:
            return comm
        base = interpose.base_class(comm)
        if base is None or comm.Is_inter():
            return comm
        group = comm.Get_group()
        members = mpi.Group.Translate_ranks(group, list(range(comm.Get_size())), self.world_group)
        group.Free()
        cid = None
        if comm.Get_rank() == 0:
            try:
                cid = self.declare(members, f"{how} of comm {interpose.comm_id(parent)}")
            except (pastset.PastSetError, PathsError, ValueError) as exc:
                if not self._warned:
                    self._warned = True
                    say(f"rank {self.rank}: a communicator could not be declared ({exc}); "
                        "its calls are not collected")
        cid = mpi.Comm.bcast(comm, cid, 0)
        if cid is None:
            return comm
        mpi4py_access.hold_no_lock(comm)
        traced = interpose.traced_instance(comm, base)
        self.trace(traced, cid, members)
        return traced

    def declare(self, members, how: str) -> int:
        """Rank 0 gives the communicator an id and every node its collectors; the id."""
        if self.rank == 0:
            return self._declare(list(members), how)
        return self.node.client(node_name(0)).call(DECLARE, self.token, list(members), how, timeout=60)

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
        return {"ranks": self.size,
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
        if (not 1 <= len(members) <= self.size or len(set(members)) != len(members)
                or not all(type(m) is int and 0 <= m < self.size for m in members) or len(how) > MAX_HOW):
            raise BadArgument(f"node {self.node.name}: communicator {cid} must have distinct world ranks from 0 to "
                              f"{self.size - 1} as members and say how it was made in at most {MAX_HOW} characters")
        return Communicator(cid, tuple(members), how)

    # -- finishing -----------------------------------------------------------------------------

    def abandon(self, ended: str) -> None:
        """The run ends on this rank without the others (an exception, Ctrl-C, SIGTERM, MPI_Abort),
        before MPI's abort (not collective; the node goes with the process): this rank's recording
        is closed (`ended`: how), the other ranks are asked to write theirs out, a flight recorder's
        windows are dumped into an archive, and rank 0 removes the run's files."""
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
        written = self.private.gather(sum(ring.last() for ring in self.rings), root=0)
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
                if not sum(written):
                    say("no MPI calls were collected" + (" (--instrument none)" if self.options.instrument == "none"
                                                         else ""))
            except Exception as exc:  # the other ranks wait below: say it, and end the run all the same
                say(f"the archive could not be completed: {type(exc).__name__}: {exc}"
                    + (f"; the recording stays in {self.recording_dir} (`eventspace archive build "
                       f"{self.recording_dir} F.sqlite` builds it)" if self.recording_dir else ""))
            finally:
                self.registration.remove()
        self.private.Barrier()   # the archive is complete: the nodes may stop
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


def _nothing() -> None:
    pass
