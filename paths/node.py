"""A node server: one process's share of a pathmap, its elements, its stages, and the threads placed on it."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping

import pastset
from pastset import AuthError, EventSpaceError, PastSetError, TupleServer, UnknownElement
from pastset.security import check_bind

from . import operation as op
from . import stack
from .context import Context
from .errors import PathsError
from .instrument import CollectorPoint
from .pathmap import Pathmap
from .registry import NODE_SERVICES, PROGRAMS, installed, load_reference, wrapper_class
from .wrapper import Remote, Wrapper

# Hosted call names (see pastset.TupleServer.host); every node server answers these.
STAGE = "paths.stage"      # (stage index, code, args)       -> the stage's result
LINK = "paths.link"        # ({node: endpoint})              -> None
START = "paths.start"      # (program, args)                 -> [thread, ...] started here
JOIN = "paths.join"        # (timeout)                       -> {outcomes: {thread: outcome}, running: [thread]}
INFO = "paths.info"        # ()                              -> {node, pid, threads, endpoint}
STOP = "paths.stop"        # ()                              -> None; the node's process ends
THREADS = "paths.threads"  # (stacks, depth)                 -> {thread: ThreadState wire form}
ABORT = "paths.abort"      # (why, end)                      -> None; what the threads wait in raises

CLOCK_OFFSET_ENV = "EVENTSPACE_CLOCK_OFFSET_NS"


class NodeServer:
    """One node of a pathmap: a pastset TupleServer holding the node's elements, plus its stages.

    The stages are built from the pathmap by wrapper type and linked in path and tree order.
    Event collectors the instrument section asks for are inserted in front of (or, for
    `departure`, behind) their stages. A `remote` stage reaches the next stage on another node
    through that node's hosted `paths.stage` call (or, when the next stage is a bare element
    stage, through the pastset element protocol, whose blocking requests are parked on the
    server instead of holding a thread).

    Application threads placed on this node run `program(ctx)` with a `paths.Context`.

    `security` holds the CURVE keys the node serves with and connects to the other nodes with
    (None: the pathmap's `security` section, else the process's keys, see `SecuritySpec.load`).

    A stage reaching another node waits for it, while its connection stays open, for the
    pathmap's `liveness.grace` seconds of silence (pastset.NotAnswering after that); a node
    whose connection closed is pastset.ServerGone within about two seconds.
    """

    def __init__(self, pathmap: Pathmap, name: str, endpoints: Mapping[str, str] | None = None,
                 limits: pastset.Limits = pastset.Limits(), security: pastset.Security | None = None):
        self.pathmap = pathmap
        self.name = name
        self.spec = pathmap.node(name)
        self.security = security if security is not None else pathmap.security.load()
        offset = os.environ.get(CLOCK_OFFSET_ENV)
        self.clock_offset_ns = int(offset) if offset else self.spec.clock_offset_ns
        self.server = TupleServer(name, limits)
        self.endpoint: str | None = None
        self.endpoints: dict[str, str] = dict(endpoints or {})
        self._clients: dict[str, pastset.Client] = {}
        self._clients_mutex = threading.Lock()  # held while _clients changes
        self._threads: dict[str, threading.Thread] = {}
        self._outcomes: dict[str, list] = {}
        self._failed: dict[str, list] = {}      # thread -> ["class: message", traceback frames] (it raised)
        self._aborted: str | None = None        # why the threads were stopped (another thread failed)
        self._program_threads: dict[str, tuple[int, int]] = {}   # threads run by others (an MPI rank's program)
        self._stopped = threading.Event()
        self.services: dict[str, object] = {}
        self.progress: dict[str, dict] = {}                        # thread -> what it last reported

        for spec in pathmap.elements_on(name):
            template = spec.template if isinstance(spec.template, str) else list(spec.template)
            self.server.enter(spec.name, template, keep=spec.keep, delta=spec.delta)
        self._index = {s.id: i for i, s in enumerate(pathmap.stages)}
        points = pathmap.collector_points()
        # A collector stage written into a path is built with the others; its id is its point's.
        ids = {p.stage: p.id for p in points if p.role == "stage" and pathmap.stage(p.stage).type == "collector"}
        self.stages: dict[str, Wrapper] = {}
        for stage in pathmap.stages_on(name):
            cls = _wrapper_class(stage.type, pathmap)
            params = dict(stage.params, id=ids[stage.id]) if stage.id in ids else dict(stage.params)
            self.stages[stage.id] = cls(stage.id, params, self)
        self._fronted = _fronted_stages(pathmap)
        self.collectors: dict[int, Wrapper] = {}
        self.front: dict[str, Callable] = dict(self.stages)       # how to enter each stage
        self.path_entry: dict[str, Callable] = {}                  # path name -> its first callable
        self.member_entry: dict[tuple[str, str], Callable] = {}    # (tree, member) -> entry callable
        self._build_collectors(points)
        self._link_stages()
        self._finalize()
        self._host()
        for ep in installed(NODE_SERVICES):
            ep.load()(self)

    def grow(self, pathmap: Pathmap) -> None:
        """Take `pathmap`, this node's run grown while it runs (an MPI run's, by a communicator, or
        by the processes a rank spawned): the same run, its nodes and threads, maybe more after them
        (ValueError otherwise, and the node keeps its own), more of the rest. What the node built
        stays as it is: what the pathmap adds is for the node's services to take (eventspace's
        collectors and their trace elements)."""
        old = self.pathmap
        if (pathmap.name != old.name or pathmap.nodes[:len(old.nodes)] != old.nodes
                or pathmap.threads[:len(old.threads)] != old.threads):
            raise ValueError(f"node {self.name}: pathmap {pathmap.name} is not run {old.name} grown "
                             "(its name, nodes or threads differ)")
        self.pathmap = pathmap

    # -- building ----------------------------------------------------------------------------

    def _collector(self, point: CollectorPoint) -> Wrapper:
        cls = _wrapper_class("collector", self.pathmap)
        collector = cls(f"collector/{point.id}", {"id": point.id, "role": point.role}, self)
        self.collectors[point.id] = collector
        return collector

    def _build_collectors(self, points) -> None:
        """Collectors in front of stages (sink, arrival, stage) wrap `front`; per-path and
        per-member ones (source, contribute) wrap only that entry; departure ones wrap `next`."""
        self._departures: dict[str, Wrapper] = {}
        per_path: dict[str, list] = {}
        per_member: dict[tuple[str, str], list] = {}
        for point in points:
            if point.node != self.name:
                continue
            if point.role == "stage" and self.pathmap.stage(point.stage).type == "collector":
                self.collectors[point.id] = self.stages[point.stage]  # a stage of its own, already built
                continue
            collector = self._collector(point)
            if point.role == "source":
                per_path.setdefault(point.path, []).append(collector)
            elif point.role == "contribute":
                per_member.setdefault((point.tree, point.thread), []).append(collector)
            elif point.role == "departure":
                self._departures[point.stage] = collector
            else:
                collector.next = self.front[point.stage]
                self.front[point.stage] = collector
        for path in self.pathmap.paths:
            if self.pathmap.thread(path.thread).node != self.name:
                continue
            entry = self.front[path.stages[0]]
            for collector in per_path.get(path.name, ()):
                collector.next, entry = entry, collector
            self.path_entry[path.name] = entry
        for tree in self.pathmap.trees:
            for member, sid in tree.members.items():
                if self.pathmap.thread(member).node != self.name:
                    continue
                entry = self.front[sid]
                for collector in per_member.get((tree.name, member), ()):
                    collector.next, entry = entry, collector
                self.member_entry[(tree.name, member)] = entry

    def _link_stages(self) -> None:
        for sid, stage in self.stages.items():
            target = self.pathmap.next_stage(sid)
            if target is None:
                continue
            if isinstance(stage, Remote):
                stage.next = self.remote_stage(target)
            else:
                stage.next = self.front[target]
            departure = self._departures.get(sid)
            if departure is not None:
                departure.next, stage.next = stage.next, departure

    def _finalize(self) -> None:
        """Replace every link to a stage by the stage's `entry()`, now that all links are known."""
        memo: dict[int, Callable] = {}

        def fast(target):
            if not isinstance(target, Wrapper):
                return target  # a remote stage's far side, or None at an end
            fn = memo.get(id(target))
            if fn is None:
                target.next = fast(target.next)
                fn = memo[id(target)] = target.entry()
            return fn

        self.front = {sid: fast(fn) for sid, fn in self.front.items()}
        self.path_entry = {name: fast(fn) for name, fn in self.path_entry.items()}
        self.member_entry = {key: fast(fn) for key, fn in self.member_entry.items()}
        for stage in self.stages.values():
            fast(stage)

    def remote_stage(self, stage_id: str) -> Callable:
        """A callable entering `stage_id` on its (other) node; resolved at its first call."""
        spec = self.pathmap.stage(stage_id)
        return _RemoteStage(self, spec.node, self._index[stage_id],
                            spec.params.get("element") if spec.type == "element"
                            and stage_id not in self._fronted else None)

    # -- what a stage may ask of its node (paths.wrapper.StageHost) ------------------------------

    def element(self, name: str):
        return self.server.element(name)

    def function(self, reference: str):
        try:
            return load_reference(reference, self.pathmap.allow_modules, "eventspace.functions", "function")
        except LookupError as exc:
            raise PathsError(str(exc)) from None

    def endpoint_of(self, node: str) -> str:
        """Where node `node` of this run listens (the launcher's word, else the pathmap's)."""
        return self.endpoints.get(node) or _pathmap_endpoint(self.pathmap, node)

    def client(self, node: str) -> pastset.Client:
        """A client of another node's server (one per node, shared by this process's threads)."""
        client = self._clients.get(node)
        if client is None:
            with self._clients_mutex:
                client = self._clients.get(node)
                if client is None:
                    endpoint = self.endpoint_of(node)
                    # A first contact may find the node paused too: it gets the same grace.
                    grace = self.pathmap.liveness.grace
                    client = pastset.connect(endpoint, security=self.security, timeout=grace, grace=grace)
                    self._clients[node] = client
        return client

    # -- serving -----------------------------------------------------------------------------

    def serve(self, bind: str | None = None, insecure: bool = False) -> str:
        """Open the node's endpoint (default: its host and port from the pathmap); returns it.

        A non-loopback address without CURVE is refused (PastSetError) unless `insecure`
        (then a warning goes to stderr); see `pastset.security.check_bind`.
        """
        if bind is None:
            bind = f"tcp://{self.spec.host}:{self.spec.port}"
        check_bind(bind, self.security, insecure)
        try:
            self.endpoint = self.server.serve(bind, self.security)
        except AuthError:
            raise
        except PastSetError as exc:
            raise PastSetError(f"node {self.name}: {exc}; is another node on this port? "
                               "use port 0 for a free one") from None
        self.endpoints[self.name] = self.endpoint
        return self.endpoint

    def _host(self) -> None:
        front_by_index = {self._index[sid]: fn for sid, fn in self.front.items()}

        def stage(index, code, args):
            try:
                enter = front_by_index[index]
            except KeyError:
                raise PathsError(f"node {self.name} runs no stage with index {index!r}") from None
            return enter(code, tuple(args))

        self.server.host(STAGE, stage)
        self.server.host(LINK, self.link)
        self.server.host(START, self.start)
        self.server.host(JOIN, self.join)
        self.server.host(INFO, self.info)
        self.server.host(STOP, self.request_stop)
        self.server.host(THREADS, self.threads, inline=True)
        self.server.host(ABORT, self.abort)

    def link(self, endpoints: dict) -> None:
        """Learn where the other nodes listen (the launcher's resolved endpoints)."""
        self.endpoints.update(endpoints)

    def info(self) -> dict:
        return {"node": self.name, "pid": os.getpid(), "endpoint": self.endpoint,
                "threads": [t.name for t in self.pathmap.threads_on(self.name)],
                "running": [t for t, th in self._threads.items() if th.is_alive()],
                "progress": dict(self.progress)}

    # -- application threads -------------------------------------------------------------------

    def start(self, program: str, args: dict | None = None) -> list[str]:
        """Start `program(ctx)` in a thread per pathmap thread on this node; returns their names.

        `program` is a name registered in the `eventspace.programs` entry-point group, or
        `module:function` from a module in the pathmap's allow_modules.
        """
        if any(t.is_alive() for t in self._threads.values()):
            raise PathsError(f"node {self.name} is still running a program; join it first")
        try:
            fn = load_reference(program, self.pathmap.allow_modules, PROGRAMS, "program")
        except ImportError as exc:  # the module, or something it imports
            raise PathsError(f"node {self.name} cannot import program {program!r}: {exc}; sys.path: "
                             f"{os.pathsep.join(sys.path)} (launch with --path DIR, or set PYTHONPATH, so that "
                             "every node finds the module)") from None
        except (LookupError, AttributeError) as exc:
            raise PathsError(f"node {self.name}: {exc}") from None
        self._threads, self._outcomes, self._failed, self._aborted = {}, {}, {}, None
        self.progress.clear()
        for thread in self.pathmap.threads_on(self.name):
            ctx = Context(self, thread.name, dict(args or {}))
            th = threading.Thread(target=self._run_thread, args=(fn, ctx), name=f"app-{thread.name}",
                                  daemon=True)
            self._threads[thread.name] = th
        for th in self._threads.values():
            th.start()
        return list(self._threads)

    def _run_thread(self, fn, ctx) -> None:
        try:
            result = fn(ctx)
            if not pastset.encodable(result):  # a result must travel back to the launcher
                raise TypeError(f"its result, a {type(result).__name__}, cannot travel the wire (msgpack)")
            self._outcomes[ctx.thread] = ["ok", result]
        except BaseException as exc:  # the launcher must hear of every failure, by thread
            if self._aborted is not None and (isinstance(exc, UnknownElement) or str(exc) == self._aborted):
                # What it waited in was ended under it (ABORT): not a failure of its own.
                self._outcomes[ctx.thread] = ["stopped", self._aborted]
                return
            if not isinstance(exc, EventSpaceError):
                traceback.print_exc()
            frames = stack.traceback_frames(exc.__traceback__)
            self._failed[ctx.thread] = [f"{type(exc).__name__}: {exc}", [f.wire() for f in frames]]
            self._outcomes[ctx.thread] = ["error", type(exc).__name__, str(exc), stack.where(frames)]

    def thread_ids(self) -> dict[str, int]:
        """{thread: its operating-system thread id} of this node's application threads now running."""
        return {name: th.native_id for name, th in list(self._threads.items()) if th.is_alive()}

    def host_thread(self, thread: str, ident: int, native_id: int) -> None:
        """Thread `thread` of the pathmap is this process's thread `ident` (a Python thread ident; its
        kernel thread id `native_id`), started by someone else: an MPI rank's program's thread."""
        self._program_threads[thread] = (ident, native_id)

    def threads(self, stacks: bool = True, depth: int = stack.DEPTH) -> dict[str, list]:
        """Where this node's application threads are, now: {thread: ThreadState's wire form} (see
        paths.stack: CPU time, the stack with `stacks`, at most `depth` frames, and for a thread
        that ended by raising, its error and traceback). Costs nothing until asked."""
        if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= 1000:
            raise PathsError(f"depth must be a whole number of frames from 1 to 1000, got {depth!r}")
        idents = {name: (th.ident, th.native_id) for name, th in list(self._threads.items()) if th.is_alive()}
        idents.update(self._program_threads)
        out = stack.read_threads(idents, bool(stacks), depth)
        for thread, (failure, frames) in list(self._failed.items()):
            out[thread] = [-1, frames if stacks else [], 0, failure, None]
        for thread, outcome in list(self._outcomes.items()):
            if outcome[0] == "stopped":
                out[thread] = [-1, [], 0, None, outcome[1]]
        return out

    def abort(self, why: str, end: bool = True) -> None:
        """Another thread of the run failed: every operation this node's threads wait in raises (the
        tree stages they wait in break, the elements they wait on are deleted) and they end, their
        outcome ["stopped", why]. Trace elements stay, for the monitors' final read. With `end`
        False, the node only learns why (a launcher tells every node before any ends a wait, so that
        a thread released by another node's abort is known as stopped, not failed)."""
        self._aborted = str(why)[:1000]
        if not end:
            return
        for stage in self.stages.values():
            stage.abort(self._aborted)
        for spec in self.pathmap.elements_on(self.name):
            with contextlib.suppress(PastSetError):
                self.server.delete(spec.name)

    def join(self, timeout: float | None = None) -> dict:
        """Wait up to `timeout` seconds for this node's threads to end.

        Returns {"outcomes": {thread: outcome} of the threads that ended, "running": [threads
        still running]}; an outcome is ["ok", result] or ["error", error class name, message].
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for th in self._threads.values():
            th.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        running = [t for t, th in self._threads.items() if th.is_alive()]
        return {"outcomes": {t: o for t, o in self._outcomes.items() if t not in running},
                "running": running}

    # -- stopping --------------------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stopped.set()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def close(self) -> None:
        """Flush and close stages, close clients and the endpoint."""
        for stage in self.stages.values():
            try:
                stage.close()
            except EventSpaceError:
                pass  # a buffer that cannot flush to a node that is gone
        for service in self.services.values():
            close = getattr(service, "close", None)
            if close is not None:
                close()
        # Application threads still running may be inside a client call, which closing would end
        # with an error of their own; the process is about to end, which closes the sockets anyway.
        if not any(th.is_alive() for th in self._threads.values()):
            with self._clients_mutex:
                for client in self._clients.values():
                    client.close()
                self._clients.clear()
        self.server.close()


class _RemoteStage:
    """The far side of a `remote` stage: a stage on another node, reached over the wire."""

    __slots__ = ("node", "target", "index", "element", "_fn")

    def __init__(self, node: NodeServer, target: str, index: int, element: str | None):
        self.node, self.target, self.index, self.element = node, target, index, element
        self._fn = None

    def __call__(self, code, args):
        fn = self._fn
        if fn is None:
            fn = self._fn = self._resolve()
        return fn(code, args)

    def _resolve(self):
        client = self.node.client(self.target)
        if self.element is not None:
            handle = client.element(self.element)
            ops = {
                op.MOVE: handle.move, op.OBSERVE: handle.observe_indexed, op.FIRST: handle.first,
                op.LAST: handle.last, op.DELTA: handle.delta, op.AXE: handle.axe,
                op.READ_RANGE: handle.read_range, op.LATEST: handle.latest,
            }
            index, call = self.index, client.call

            def element_op(code, args):
                fn = ops.get(code)
                if fn is None:  # move_many and the like go through the hosted stage call
                    return call(STAGE, index, code, list(args), timeout=_timeout_of(code, args))
                return fn(*args)

            return element_op
        index, call = self.index, client.call

        def stage_op(code, args):
            return call(STAGE, index, code, list(args), timeout=_timeout_of(code, args))

        return stage_op


def _timeout_of(code, args):
    """How long a remote stage may take: the operation's own timeout (None: as long as it answers)."""
    if code in op.BLOCKING and args:
        return args[-1]
    return None


def _fronted_stages(pathmap: Pathmap) -> frozenset[str]:
    """Stages with a collector in front of them (so a remote hop must enter through the stage call)."""
    return frozenset(p.stage for p in pathmap.collector_points() if p.role in ("sink", "arrival", "stage"))


def _wrapper_class(type_name: str, pathmap: Pathmap):
    try:
        return wrapper_class(type_name, pathmap.allow_modules)
    except (LookupError, ImportError) as exc:
        raise PathsError(f"cannot build wrapper type {type_name!r}: {exc}") from None


def _pathmap_endpoint(pathmap: Pathmap, node: str) -> str:
    spec = pathmap.node(node)
    if not spec.port:
        raise PathsError(f"node {node} has port 0 in the pathmap and no endpoint was given; start the "
                         "nodes with `paths.launch` (which resolves free ports), or give each a fixed port")
    return f"tcp://{spec.host}:{spec.port}"
