"""Interposition on mpi4py: traced communicator, request and message classes, put in place of its own.

mpi4py's classes are Cython types whose methods cannot be replaced, but their Python subclasses
can hold closures in an instance's __dict__, which attribute lookup finds before the class's
methods. So a traced communicator is an instance of a subclass of its mpi4py class (Intracomm,
Cartcomm, ...) sharing the same MPI handle, with one collector closure per method
(eventspace.mpi.collector). `MPI.COMM_WORLD` becomes one before the program's code runs, every
communicator made from a traced one (Dup, Split, Create, Create_group, Split_type, Create_cart,
...) becomes one too, requests that traced posts return are `Request`s whose completion calls
(Wait, Test, and the Waitall family, which `MPI.Request` now names) write request records, and
matched probes return `Message`s that record their receive.

Not traced: intercommunicators, COMM_SELF, nonblocking and persistent collectives, persistent
point-to-point requests, Idup; their calls run as they always do.
"""

from __future__ import annotations

import pickle

from mpi4py import MPI

from . import encoding as e
from .collector import (
    PICKLED_BYTES,
    THREAD_STATUS,
    ERROR,
    F_CANCELLED,
    F_REQUEST,
    RECEIVES,
    MpiCollector,
    completion_call,
    matched_receive,
    request_done,
    timed,
)

_Request, _Message = MPI.Request, MPI.Message
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
    ch, post_op, flags, peer, tag, n, _ = info
    if not _collects(ch) or not request:
        return call(request, status)
    # Sends need no Status unless cancelled: MPI then fills none.
    st = status if status is not None or not (post_op in RECEIVES or flags & F_CANCELLED) else ch.status_here()
    # marked as waiting for the request; a failure is the completion call's record (1 request given)
    result, t0, t1 = timed(ch, call, (request, st), post_op, flags | F_REQUEST, peer, tag, n, (op, 0, 1, 0))
    done = not test or (result if type(result) is bool else result[0])
    if done:
        request_done(info, st, t1)
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


def _pending(requests) -> list:
    """(index, info) of the traced active requests among `requests`."""
    out = []
    for i, request in enumerate(requests):
        info = _traced(request)
        if info is not None:
            out.append((i, info))
    return out


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


def _many(call, op, requests, status_arg, family, outcome):
    pending = _pending(requests)
    if not pending:
        return call(requests, status_arg)
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
    said = outcome(result)
    if family == _ALL:
        done = [(info, used[i] if used is not None else None) for i, info in pending] if said else []
    elif family == _ANY:
        done = [(infos[said], used)] if said in infos else []
    else:
        done = [(infos[index], used[k] if used is not None else None)
                for k, index in enumerate(said or ()) if index in infos]
    for info, status in done:
        request_done(info, status, t1)
    completion_call(ch, op, len(requests), len(done), t0, t1)
    return result


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


def _message_recv(message, _buf, status):
    return _Message.recv(message, status)


def _message_irecv(message, _buf):
    return _Message.irecv(message)


# -- communicators -------------------------------------------------------------------------------

class _Constructors:
    """The communicator constructors of a traced communicator: each result is declared to the run
    and traced (`adopt`, set by `install`) before the program gets it."""

    adopt = None      # (new communicator, how it was made, parent) -> what the program gets
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


class _CartConstructors(_Constructors):
    def Sub(self, *args, **kwargs):  # noqa: N802
        return self._made(super().Sub(*args, **kwargs), "Sub")


# mpi4py class -> its traced subclass.
TRACED = {
    MPI.Intracomm: type("Intracomm", (_Constructors, MPI.Intracomm), {"__module__": __name__}),
    MPI.Cartcomm: type("Cartcomm", (_CartConstructors, MPI.Cartcomm), {"__module__": __name__}),
    MPI.Graphcomm: type("Graphcomm", (_Constructors, MPI.Graphcomm), {"__module__": __name__}),
    MPI.Distgraphcomm: type("Distgraphcomm", (_Constructors, MPI.Distgraphcomm), {"__module__": __name__}),
}


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


def install(world, adopt, finalize, compiled=None, aborting=None) -> None:
    """Replace mpi4py's COMM_WORLD by the traced `world`, MPI.Request by Request, and
    MPI.Finalize by a function that calls `finalize()` first; `adopt` declares and traces each
    communicator a traced one makes, and `aborting(error code)` is called before a traced
    communicator's Abort. With `compiled` (the compiled collector module), the completion calls
    run in C (`compile_waits`)."""
    compile_waits(compiled)
    _Constructors.adopt = staticmethod(adopt)
    _Constructors.aborting = None if aborting is None else staticmethod(aborting)
    count_pickled()
    MPI.COMM_WORLD = world
    MPI.Request = Request
    original = MPI.Finalize

    def Finalize():  # noqa: N802 - mpi4py's name
        finalize()
        return original()

    MPI.Finalize = Finalize
