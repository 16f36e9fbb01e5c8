"""Interposition on mpi4py: traced communicator, request and message classes, put in place of its own.

mpi4py's classes are Cython types whose methods cannot be replaced, but their Python subclasses
can hold closures in an instance's __dict__, which attribute lookup finds before the class's
methods. So a traced communicator is an instance of a subclass of its mpi4py class (Intracomm,
Cartcomm, ...) sharing the same MPI handle, with one collector closure per method
(eventspace.mpi.collector). `MPI.COMM_WORLD` becomes one before the program's code runs, every
communicator made from a traced one (Dup, Split, Create, Create_group, Split_type, Create_cart,
...) becomes one too, requests that traced posts return are `Request`s whose completion calls
(Wait, Test, and the Waitall family, which `MPI.Request` now names) write request records, and
matched probes return `Message`s that record their receive. Intercommunicators made from traced
communicators (Create_intercomm, and an intercommunicator's Dup, Split, Create) are traced too, and
their Merge; so is the intercommunicator of a Spawn (of a traced communicator, or of COMM_SELF)
whose processes join the run, and in those processes MPI.Comm.Get_parent() gives it traced.

Persistent requests (Send_init, Recv_init, Allreduce_init...) are `Prequest`s (also `MPI.Prequest`
while a program runs traced): each Start or Startall is a post, each completion a request record,
as many times as the request is started. Matched probes made through `MPI.Message.Probe(comm)` (and
Iprobe, probe, iprobe) are the communicator's Mprobe (Improbe...). Idup's communicator is traced as
Dup's is, at once: it is declared without a collective call over it (which could not run before
the Idup completes).

A window made on a traced communicator (Win.Create, Allocate, Allocate_shared, Create_dynamic,
which `MPI.Win` now names) is a `Win` traced the same way: declared to the run as its next
communicator entry, its calls' closures in its __dict__.

Not traced: windows made on an untraced communicator (COMM_SELF, mpi4py's default), intercommunicators of Accept, Connect and Join, and of a Spawn whose processes do not
run this Python; COMM_SELF (but its Spawn); and whatever untraced.py counts (every other method of
these classes that makes an MPI call): their calls run as they always do, and the run's end names
them.
"""

from __future__ import annotations

import pickle

from mpi4py import MPI

from . import encoding as e
from . import untraced
from .collector import (
    PICKLED_BYTES,
    THREAD_STATUS,
    ERROR,
    F_CANCELLED,
    F_REQUEST,
    RECEIVES,
    U32,
    MpiCollector,
    completion_call,
    matched_receive,
    request_done,
    timed,
    write,
)
from .message import buffer_bytes

_Request, _Prequest, _Message = MPI.Request, MPI.Prequest, MPI.Message
_Start, _Startall = _Prequest.Start, _Prequest.Startall
_Wait, _Test, _wait, _test = _Request.Wait, _Request.Test, _Request.wait, _Request.test
_Free, _free = _Request.Free, _Request.free
_COMM_ATTR = "_eventspace_comm"   # in a traced communicator's __dict__: its communicator id


class Request(_Request):
    """A request of a traced post: `info` = (channel, op, flags, peer, tag, nbytes, t_start).
    Also `MPI.Request` while a program runs traced, for its class methods (Waitall, ...)."""

    __slots__ = ("info",)

    def Wait(self, status=None):  # noqa: N802 - mpi4py's names
        return _one(self, _Wait, e.WAIT, status, False)

    def wait(self, status=None):
        return _one(self, _wait, e.WAIT, status, False)

    def Test(self, status=None):  # noqa: N802
        return _one(self, _Test, e.TEST, status, True)

    def test(self, status=None):
        return _one(self, _test, e.TEST, status, True)

    def Cancel(self):  # noqa: N802
        _cancelling(self)
        return _Request.Cancel(self)

    def cancel(self):
        _cancelling(self)
        return _Request.cancel(self)

    def Free(self):  # noqa: N802
        _freed(self)
        return _Free(self)

    def free(self):
        _freed(self)
        return _free(self)

    # Waitall, Testany, waitsome... (class methods, since MPI.Request names this class): set below.


def _collects(ch) -> bool:
    """Whether collector `ch` (an MpiCollector) is switched on."""
    return ch.page.switches[ch.at]


def _traced(request):
    """The post info of a traced request still active whose collector is on, else None."""
    info = getattr(request, "info", None)
    if info is None or not _collects(info[0]) or not request:
        return None
    return info


def _one(request, call, op, status, test):
    """Wait, wait, Test, test on a traced request: the call's record and, once the request is
    complete, its request record (a receive's source, tag and bytes read from a Status)."""
    try:
        info = request.info
    except AttributeError:
        return call(request, status)
    if info is None:   # a persistent request not started
        return call(request, status)
    ch, post_op, flags, peer, tag, n, _ = info
    if not _collects(ch) or not request:
        result = call(request, status)
        if not test or (result if type(result) is bool else result[0]):
            request.info = None   # completed unrecorded: a persistent request's post is gone with it
        return result
    # Sends need no Status unless cancelled: MPI then fills none.
    st = status if status is not None or not (post_op in RECEIVES or flags & F_CANCELLED) else ch.status_here()
    # marked as waiting for the request; a failure is the completion call's record (1 request given)
    result, t0, t1 = timed(ch, call, (request, st), post_op, flags | F_REQUEST, peer, tag, n, (op, 0, 1, 0))
    done = not test or (result if type(result) is bool else result[0])
    if done:
        request_done(info, st, t1)
        request.info = None   # a persistent request stays, inactive until started again
    completion_call(ch, op, 1, 1 if done else 0, t0, t1)
    return result


def _cancelling(request) -> None:
    """Note that the program cancels the request: its completion then reads the Status's say."""
    info = getattr(request, "info", None)
    if info is not None:
        request.info = (*info[:2], info[2] | e.CANCELLED, *info[3:])


def _freed(request) -> None:
    info = _traced(request)
    if info is not None:
        request_done(info, None, info[0].clock(), e.FREED)


def _pending(requests) -> tuple[list, list]:
    """(index, info) of the traced active requests among `requests`, and the indices of those that
    hold a post their completion will not record (their collector is off)."""
    out, unrecorded = [], []
    for i, request in enumerate(requests):
        info = getattr(request, "info", None)
        if info is None:
            continue
        if _collects(info[0]) and request:
            out.append((i, info))
        else:
            unrecorded.append(i)
    return out, unrecorded


# How the calls on many requests say which completed: `outcome(result)` is whether all did
# (Waitall/Testall), the index of the one that did (Waitany/Testany), or their indices (Waitsome/
# Testsome, whose statuses come in the order of the indices).
_ALL, _ANY, _SOME = "all", "any", "some"


def _completion(name: str, op: int, family: str, outcome):
    call = getattr(_Request, name)
    if family == _ANY:
        def method(cls, requests, status=None):
            return _many(call, op, requests, status, family, outcome)
    else:
        def method(cls, requests, statuses=None):
            return _many(call, op, requests, statuses, family, outcome)
    method.__name__ = method.__qualname__ = name
    return classmethod(method)


def _always(result):
    return True


def _itself(result):
    return result


def _first(result):
    return result[0]


def _found(result):
    return result[0] if result[1] else MPI.UNDEFINED


_COMPLETIONS = (
    ("Waitall", e.WAITALL, _ALL, _always), ("waitall", e.WAITALL, _ALL, _always),
    ("Testall", e.TESTALL, _ALL, _itself), ("testall", e.TESTALL, _ALL, _first),
    ("Waitany", e.WAITANY, _ANY, _itself), ("waitany", e.WAITANY, _ANY, _first),
    ("Testany", e.TESTANY, _ANY, _found), ("testany", e.TESTANY, _ANY, _found),
    ("Waitsome", e.WAITSOME, _SOME, _itself), ("waitsome", e.WAITSOME, _SOME, _first),
    ("Testsome", e.TESTSOME, _SOME, _itself), ("testsome", e.TESTSOME, _SOME, _first))
for _name, _op, _family, _outcome in _COMPLETIONS:
    setattr(Request, _name, _completion(_name, _op, _family, _outcome))

# The same outcomes as the compiled completions read them (eventspace/collector_c/, O_*).
_OUTCOMES = {(_ALL, _always): 0, (_ALL, _itself): 1, (_ALL, _first): 2, (_ANY, _itself): 3, (_ANY, _first): 4,
             (_ANY, _found): 5, (_SOME, _itself): 6, (_SOME, _first): 7}


def _completed(family, said, n: int, used=None) -> list:
    """(index, its Status or None) of each request a completion call on `n` requests completed, from
    what it said (`outcome`) and the Status or statuses it filled (`used`)."""
    if family == _ALL:
        return [(i, used[i] if used is not None else None) for i in range(n)] if said else []
    if family == _ANY:
        return [(said, used)] if said is not None and said != MPI.UNDEFINED else []
    return [(index, used[k] if used is not None else None) for k, index in enumerate(said or ())]


def _forget(requests, unrecorded, completed) -> None:
    """The `unrecorded` requests (their collector off) among those the call `completed` drop their
    post: a persistent one, inactive now, must not write a record for it at a later completion call."""
    for i, _ in completed:
        if i in unrecorded:
            requests[i].info = None


def _many(call, op, requests, status_arg, family, outcome):
    pending, unrecorded = _pending(requests)
    if not pending:
        result = call(requests, status_arg)
        if unrecorded:
            _forget(requests, unrecorded, _completed(family, outcome(result), len(requests)))
        return result
    if family == _ANY:
        used = MPI.Status() if status_arg is None else status_arg
    elif status_arg is None and any(info[1] in RECEIVES for _, info in pending):
        used = [MPI.Status() for _ in requests]   # to read the receives' actual sources
    else:
        used = status_arg
    ch, post_op, flags, peer, tag, n, _ = pending[0][1]   # marked as waiting for the first traced request
    result, t0, t1 = timed(ch, call, (requests, used), post_op, flags | F_REQUEST, peer, tag, n,
                           (op, 0, len(requests), 0))
    infos = dict(pending)
    completed = _completed(family, outcome(result), len(requests), used)
    done = [(i, infos[i], status) for i, status in completed if i in infos]
    for i, info, status in done:
        request_done(info, status, t1)
        requests[i].info = None   # a persistent request stays, inactive until started again
    if unrecorded:
        _forget(requests, unrecorded, completed)
    completion_call(ch, op, len(requests), len(done), t0, t1)
    return result


class Prequest(Request, _Prequest):
    """A persistent request made by a traced init call (Send_init, Recv_init, Allreduce_init...):
    `template` = (channel, op, flags, peer, tag, nbytes, round counter or None), what each Start's
    post record holds (collector.persistent_method); `info` is a started request's post, as a
    Request's, and None while it is inactive (made, or completed and not started again). Also
    `MPI.Prequest` while a program runs traced, for Startall. Its completions run in Python
    (interpose._one, _many), which make it inactive again; the compiled ones leave it to them."""

    __slots__ = ("template",)

    def Start(self):  # noqa: N802 - mpi4py's names
        posted = _starting(self)
        if posted is None:
            self.info = None   # started untraced: its completion writes nothing
            return _Start(self)
        ch, op, flags, peer, arg, n = posted
        _, t0, t1 = timed(ch, _Start, (self,), op, flags, peer, arg, n)
        self.info = (ch, op, flags, peer, arg, n, t0)
        write(ch, op, flags, peer, arg, n, t0, t1)

    @classmethod
    def Startall(cls, requests):  # noqa: N802
        started = []
        for request in requests:
            posted = _starting(request)
            if posted is not None:
                started.append((request, posted))
            elif isinstance(request, Prequest):
                request.info = None   # started untraced: its completion writes nothing
        if not started:
            return _Startall(requests)
        ch, op, flags, peer, arg, n = started[0][1]   # marked as the first traced one
        _, t0, t1 = timed(ch, _Startall, (requests,), op, flags, peer, arg, n)
        for request, (ch, op, flags, peer, arg, n) in started:
            request.info = (ch, op, flags, peer, arg, n, t0)
            write(ch, op, flags, peer, arg, n, t0, t1)


def _starting(request):
    """(channel, op, flags, peer, tag or round, nbytes) of the post a Start of `request` makes, or
    None where it writes none (not a traced persistent request, or its collector is off); a
    collective's round is taken even then, so that rounds stay aligned across members."""
    template = getattr(request, "template", None)
    if template is None:
        return None
    ch, op, flags, peer, arg, n, rounds = template
    if rounds is not None:
        arg = next(rounds) & U32
    return (ch, op, flags, peer, arg, n) if _collects(ch) else None


class Message(_Message):
    """A message a traced matched probe found: `info` = (channel, flags, peer, tag, nbytes)."""

    __slots__ = ("info",)

    def Recv(self, buf, status=None):  # noqa: N802
        return self._receive(_Message.Recv, buf, status)

    def recv(self, status=None):
        return self._receive(_message_recv, None, status)

    def _receive(self, call, buf, status):
        info = getattr(self, "info", None)
        if info is None or not _collects(info[0]):
            return call(self, buf, status)
        ch, flags, peer, tag, n = info
        result, t0, t1 = timed(ch, call, (self, buf, status), e.MRECV, flags, peer, tag, n)
        matched_receive(info, e.MRECV, t0, t1)
        return result

    def Irecv(self, buf):  # noqa: N802
        return self._post(_Message.Irecv, buf)

    def irecv(self):
        return self._post(_message_irecv, None)

    # Matched probes through the class (MPI.Message.Probe(comm, ...) is MPI_Mprobe on comm): a traced
    # communicator's own Mprobe, Improbe, mprobe or improbe, which record them.
    @classmethod
    def Probe(cls, comm, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):  # noqa: N802
        return _probe(comm, "Mprobe", _Message.Probe, source, tag, status)

    @classmethod
    def Iprobe(cls, comm, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):  # noqa: N802
        return _probe(comm, "Improbe", _Message.Iprobe, source, tag, status)

    @classmethod
    def probe(cls, comm, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):
        return _probe(comm, "mprobe", _Message.probe, source, tag, status)

    @classmethod
    def iprobe(cls, comm, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):
        return _probe(comm, "improbe", _Message.iprobe, source, tag, status)

    def _post(self, call, buf):
        info = getattr(self, "info", None)
        if info is None or not _collects(info[0]):
            return call(self, buf)
        ch, flags, peer, tag, n = info
        t0 = ch.clock()
        request = Request(call(self, buf))
        t1 = ch.clock()
        request.info = (ch, e.IMRECV, flags, peer, tag, n, t0)
        matched_receive(info, e.IMRECV, t0, t1)
        return request


def _probe(comm, name, plain, source, tag, status):
    traced = getattr(comm, "__dict__", {}).get(name)
    return plain(comm, source, tag, status) if traced is None else traced(source, tag, status)


def _message_recv(message, _buf, status):
    return _Message.recv(message, status)


def _message_irecv(message, _buf):
    return _Message.irecv(message)


# -- communicators -------------------------------------------------------------------------------

class _Spawns:
    """Spawn and Spawn_multiple of a traced intracommunicator (and of COMM_SELF): the processes
    they start join the run, and their intercommunicator is traced (`spawn`, set by `install`)."""

    # (communicator, call(commands), [(command, args)], root, how) -> what the program gets; until
    # `install` sets it, what mpi4py's call gives.
    spawn = staticmethod(lambda comm, call, commands, root, how: call(commands))

    def Spawn(self, command, args=None, maxprocs=1, info=MPI.INFO_NULL, root=0, errcodes=None):  # noqa: N802
        made = super().Spawn

        def call(commands):
            (given, given_args), = commands
            return made(given, given_args, maxprocs, info, root, errcodes)

        return _Spawns.spawn(self, call, [(command, args)], root, "Spawn")

    def Spawn_multiple(self, command, args=None, maxprocs=None, info=MPI.INFO_NULL, root=0,  # noqa: N802
                       errcodes=None):
        made = super().Spawn_multiple
        if self.Get_rank() != root:   # only the root's commands are read
            return _Spawns.spawn(self, lambda _: made(command, args, maxprocs, info, root, errcodes), [], root,
                                 "Spawn_multiple")

        def call(commands):
            return made([c for c, _ in commands], [a or [] for _, a in commands], maxprocs, info, root, errcodes)

        commands = list(zip(command, args if args is not None else [None] * len(command)))
        return _Spawns.spawn(self, call, commands, root, "Spawn_multiple")


class _Constructors(_Spawns):
    """The communicator constructors of a traced communicator: each result is declared to the run
    and traced (`adopt`, set by `install`) before the program gets it."""

    adopt = None      # (new communicator, how it was made, parent) -> what the program gets
    adopt_posted = None   # the same for one that may not be used until a request completes (Idup)
    aborting = None   # (error code) -> None: what the run does before the program's MPI_Abort

    def _made(self, made, how):
        return type(self).adopt(made, how, self)

    def Abort(self, errorcode=0):  # noqa: N802
        if type(self).aborting is not None:
            type(self).aborting(errorcode)
        return super().Abort(errorcode)

    def Clone(self):  # noqa: N802
        return self._made(super().Clone(), "Clone")

    def Dup(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Dup(*args, **kwargs), "Dup")

    def Dup_with_info(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Dup_with_info(*args, **kwargs), "Dup_with_info")

    def Idup(self, *args, **kwargs):  # noqa: N802
        comm, request = super().Idup(*args, **kwargs)
        return self._made_posted(comm, "Idup"), request

    def Idup_with_info(self, *args, **kwargs):  # noqa: N802
        comm, request = super().Idup_with_info(*args, **kwargs)
        return self._made_posted(comm, "Idup_with_info"), request

    def _made_posted(self, made, how):
        adopt = type(self).adopt_posted
        return made if adopt is None else adopt(made, how, self)

    def Create(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Create(*args, **kwargs), "Create")

    def Split(self, color=0, key=0):  # noqa: N802
        return self._made(super().Split(color, key), f"Split (color {color})")

    def Split_type(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Split_type(*args, **kwargs), "Split_type")

    def Create_group(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Create_group(*args, **kwargs), "Create_group")

    def Create_cart(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Create_cart(*args, **kwargs), "Create_cart")

    def Create_graph(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Create_graph(*args, **kwargs), "Create_graph")

    def Create_dist_graph_adjacent(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Create_dist_graph_adjacent(*args, **kwargs), "Create_dist_graph_adjacent")

    def Create_dist_graph(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Create_dist_graph(*args, **kwargs), "Create_dist_graph")

    def Create_intercomm(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Create_intercomm(*args, **kwargs), "Create_intercomm")


class _CartConstructors(_Constructors):
    def Sub(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Sub(*args, **kwargs), "Sub")


class _InterConstructors(_Constructors):
    def Merge(self, high=False):  # noqa: N802
        return self._made(super().Merge(high), f"Merge (high {bool(high)})")


# mpi4py class -> its traced subclass.
TRACED = {
    MPI.Intracomm: type("Intracomm", (_Constructors, MPI.Intracomm), {"__module__": __name__}),
    MPI.Cartcomm: type("Cartcomm", (_CartConstructors, MPI.Cartcomm), {"__module__": __name__}),
    MPI.Graphcomm: type("Graphcomm", (_Constructors, MPI.Graphcomm), {"__module__": __name__}),
    MPI.Distgraphcomm: type("Distgraphcomm", (_Constructors, MPI.Distgraphcomm), {"__module__": __name__}),
    MPI.Intercomm: type("Intercomm", (_InterConstructors, MPI.Intercomm), {"__module__": __name__}),
}


# COMM_SELF while a program runs traced: it is not traced, but the processes its Spawn starts join the run.
SelfComm = type("Intracomm", (_Spawns, MPI.Intracomm), {"__module__": __name__})


def parent_class(parent):
    """A stand-in for MPI.Comm in a spawned process whose parents' intercommunicator is traced:
    MPI.Comm.Get_parent() gives `parent`; instances and subclasses of mpi4py's Comm are its own
    (a class made from it later, mpi4py.util.pkl5's, checks as any class)."""
    comm = MPI.Comm

    class Kind(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, comm) if cls is Comm else type.__instancecheck__(cls, obj)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, comm) if cls is Comm else type.__subclasscheck__(cls, sub)

    class Comm(comm, metaclass=Kind):
        @classmethod
        def Get_parent(cls):  # noqa: N802
            return parent

    Comm.__module__, Comm.__qualname__ = comm.__module__, comm.__qualname__
    return Comm


def base_class(comm):
    """The mpi4py class of a (traced or plain) communicator, None if it is not one we trace."""
    for cls in type(comm).__mro__:
        if cls in TRACED:
            return cls
    return None


def traced_instance(comm, base):
    """`comm` as an instance of the traced subclass of `base` (the same MPI handle)."""
    cls = TRACED[base]
    return comm if type(comm) is cls else cls(comm)


def comm_id(comm) -> int | None:
    """The run's id of a traced communicator, None for any other."""
    return getattr(comm, "__dict__", {}).get(_COMM_ATTR)


def mark_traced(comm, cid: int, methods: dict) -> None:
    """Put the collector closures (and the communicator's id) in `comm`'s __dict__."""
    comm.__dict__.update(methods)
    comm.__dict__[_COMM_ATTR] = cid


# -- windows -----------------------------------------------------------------------------------

_Win = MPI.Win
_INFO_NULL, _COMM_SELF = MPI.INFO_NULL, MPI.COMM_SELF


class Win(_Win):
    """A window: traced when made on a traced communicator, as mpi4py's otherwise. Also `MPI.Win` while a
    program runs traced, for its constructors."""

    adopt = None   # (make, its arguments, op, how, communicator, bytes) -> the window: set by `install`

    @classmethod
    def Create(cls, memory, disp_unit=1, info=_INFO_NULL, comm=_COMM_SELF):  # noqa: N802 - mpi4py's names
        return _window(super().Create, (memory, disp_unit, info, comm), e.WIN_CREATE, "Win.Create", comm,
                       lambda: buffer_bytes(memory))

    @classmethod
    def Allocate(cls, size, disp_unit=1, info=_INFO_NULL, comm=_COMM_SELF):  # noqa: N802
        return _window(super().Allocate, (size, disp_unit, info, comm), e.WIN_ALLOCATE, "Win.Allocate", comm,
                       lambda: int(size))

    @classmethod
    def Allocate_shared(cls, size, disp_unit=1, info=_INFO_NULL, comm=_COMM_SELF):  # noqa: N802
        return _window(super().Allocate_shared, (size, disp_unit, info, comm), e.WIN_ALLOCATE_SHARED,
                       "Win.Allocate_shared", comm, lambda: int(size))

    @classmethod
    def Create_dynamic(cls, info=_INFO_NULL, comm=_COMM_SELF):  # noqa: N802
        return _window(super().Create_dynamic, (info, comm), e.WIN_CREATE_DYNAMIC, "Win.Create_dynamic", comm,
                       lambda: 0)


def _window(make, args, op, how, comm, exposed):
    """make(*args): a window, traced when `comm` is (`Win.adopt` times the call, declares the window and
    writes its creation's record, with exposed() bytes: the memory this rank exposes in it)."""
    if Win.adopt is None or comm_id(comm) is None:
        return make(*args)
    try:
        n = max(int(exposed()), 0)
    except (TypeError, ValueError):
        n = 0   # the call itself says what is wrong with it
    return Win.adopt(make, args, op, f"{how} of comm {comm_id(comm)}", comm, n)


def count_pickled() -> None:
    """Make mpi4py pickle through a function that adds the bytes it makes to PICKLED_BYTES, the
    calling thread's count (the pickle forms' bytes), with mpi4py's own protocol and out-of-band
    threshold."""
    MPI.pickle.__init__(PICKLED_BYTES.counted(pickle.dumps), pickle.loads, MPI.pickle.PROTOCOL, MPI.pickle.THRESHOLD)


def compile_waits(compiled) -> None:
    """Request.Wait, wait, Test and test, and the calls on many requests (Waitall, Testall, Waitany,
    Testany, Waitsome, Testsome and their pickle-form twins) in C (`compiled.RequestWait` and
    `RequestWaitall`, eventspace/collector_c/) where the compiled collector runs: they write what
    `_one` and `_many` write, which stay the reference and take what they leave (a channel that
    runs pure, a cancelled request, keyword arguments, requests in a tuple)."""
    if compiled is None or isinstance(Request.__dict__["Wait"], compiled.RequestWait):
        return
    common = (Request, MpiCollector)
    flags = (e.REQUEST, e.CANCELLED, e.EMPTY, ERROR, tuple(sorted(RECEIVES)), MPI.Status)
    for name, op in (("Wait", e.WAIT), ("wait", e.WAIT), ("Test", e.TEST), ("test", e.TEST)):
        setattr(Request, name, compiled.RequestWait(getattr(_Request, name), Request.__dict__[name], *common, op,
                                                    *flags, test=op == e.TEST, statuses=THREAD_STATUS))
    for name, op, family, outcome in _COMPLETIONS:
        setattr(Request, name, compiled.RequestWaitall(getattr(_Request, name), Request.__dict__[name].__func__,
                                                       *common, op, *flags, outcome=_OUTCOMES[family, outcome],
                                                       statuses=THREAD_STATUS))


def count_untraced(comm, base, methods: dict, prefix: str = "Comm") -> dict:
    """Counting wrappers (untraced.counting) for the untraced MPI methods of traced communicator
    `comm` (of mpi4py class `base`), whose traced closures are `methods`; a window's with
    `count_untraced_window`."""
    return untraced.counting(comm, base, methods, prefix, [k for k in type(comm).__mro__ if k not in base.__mro__])


def count_untraced_window(win, methods: dict) -> dict:
    """Counting wrappers for the untraced MPI methods of traced window `win` (MPI_Win_...)."""
    return count_untraced(win, _Win, methods, "Win")


# Our request and message classes count their untraced MPI methods (Pready... of a Prequest).
untraced.count_on_class(Request, _Request, "Request")
untraced.count_on_class(Prequest, _Prequest, "Request")
untraced.count_on_class(Message, _Message, "Message")


def install(world, adopt, finalize, compiled=None, aborting=None, adopt_posted=None, spawn=None, parent=None,
            adopt_window=None) -> None:
    """Replace mpi4py's COMM_WORLD by the traced `world`, MPI.Request by Request, MPI.Prequest by
    Prequest, MPI.Message by Message, MPI.Win by Win and MPI.Finalize by a function that calls
    `finalize()` first; `adopt` declares and traces each communicator a traced one makes
    (`adopt_posted`, one made by Idup), `adopt_window` each window made on one (see Win.adopt), and
    `aborting(error code)` is called before a traced communicator's Abort. With
    `compiled` (the compiled collector module), the completion calls run in C (`compile_waits`).
    With `spawn`, the Spawns of traced communicators and of COMM_SELF go through it; with `parent`
    (a spawned process's traced intercommunicator with its parents), MPI.Comm.Get_parent() gives it."""
    compile_waits(compiled)
    _Constructors.adopt = staticmethod(adopt)
    _Constructors.adopt_posted = None if adopt_posted is None else staticmethod(adopt_posted)
    _Constructors.aborting = None if aborting is None else staticmethod(aborting)
    if spawn is not None:
        _Spawns.spawn = staticmethod(spawn)
        MPI.COMM_SELF = SelfComm(MPI.COMM_SELF)
    if parent is not None:
        MPI.Comm = parent_class(parent)
    count_pickled()
    MPI.COMM_WORLD = world
    MPI.Request = Request
    MPI.Prequest = Prequest
    MPI.Message = Message
    if adopt_window is not None:
        Win.adopt = staticmethod(adopt_window)
        MPI.Win = Win
    original = MPI.Finalize

    def Finalize():  # noqa: N802 - mpi4py's name
        finalize()
        return original()

    MPI.Finalize = Finalize
