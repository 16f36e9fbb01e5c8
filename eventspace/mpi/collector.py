"""MPI collectors: the functions that time one mpi4py call on one communicator and append its trace tuple.

Each communicator of a rank has up to two collectors (eventspace.mpi.generate): one for its
point-to-point calls, one for its collectives; a `Channel` holds what one of them needs, and
the functions made here bind all of it in closure cells once, when the communicator is made, so
that a call pays a switch test, two clock reads, an in-flight mark and one append. Fields are
encoded as eventspace.mpi.encoding describes.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import os
import sys
from itertools import count

from mpi4py import MPI
from numpy import ndarray

from .. import trace
from . import encoding as e
from .message import buffer_bytes, vector_w_bytes

ERROR = trace.ERROR
U32 = e.U32
NONE, ANY = e.PEER_NONE, e.PEER_ANY
ANY_SOURCE, ANY_TAG, PROC_NULL = MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.PROC_NULL
IN_PLACE = MPI.IN_PLACE
# Flags and op sets bound once (a call reads them as globals, not as attributes of a module).
F_ANY_SOURCE, F_ANY_TAG, F_EMPTY, F_REQUEST, F_CANCELLED = e.ANY_SOURCE, e.ANY_TAG, e.EMPTY, e.REQUEST, e.CANCELLED
RECEIVES = e.RECEIVES
_SOURCE, _TAG, _COUNT, _CANCELLED = MPI.Status.Get_source, MPI.Status.Get_tag, MPI.Status.Get_count, \
    MPI.Status.Is_cancelled
# Bytes mpi4py has pickled in this process, summed by the pickle hook (interpose.count_pickled):
# a pickle-form call's bytes are the growth of DUMPED[0] while it runs.
DUMPED = [0]


class Channel:
    """One collector of this rank on one communicator: its id, its trace element's append, its
    on/off switch, the drain's bound and spill, the node's clock and in-flight table (where it
    leaves its mark: the record as known when a call begins), the communicator's rank -> world
    rank table (`peers`), and a Status to read receives with. With `compiled` (the compiled
    collector module, eventspace.compiled) and `offset_ns` (the node clock's offset) its hot calls
    run compiled (`compiled_call`)."""

    __slots__ = ("cid", "append", "on", "bound", "spill", "clock", "inflight", "peers", "status", "compiled",
                 "offset_ns")

    def __init__(self, cid, append, on, bound, spill, clock, inflight, peers, compiled=None, offset_ns=0):
        self.cid, self.append, self.on, self.bound, self.spill = cid, append, on, bound, spill
        self.clock, self.inflight, self.peers = clock, inflight, peers
        self.status = MPI.Status()
        fast = (compiled is not None and type(append) is compiled.RingAppender and type(peers) is list
                and type(bound) is list and type(inflight) is list)
        self.compiled, self.offset_ns = (compiled if fast else None), offset_ns


# What the compiled call is (eventspace/collector_c/, MpiCall): its kinds, and what a collective sends.
_SEND, _RECV, _COLLECTIVE, _IRECV, _SENDRECV = 0, 1, 2, 3, 4
_COMPILED_SENDS = {"none": 0, "send": 1, "piece": 1, "root": 2, "root-send": 2, "pickled": 3}


@functools.lru_cache(maxsize=None)
def predefined_datatypes() -> tuple:
    """((datatype, size), ...): the predefined MPI datatypes whose message specs ([buf, count, MPI.BYTE],
    as OSU's programs pass them) the compiled calls size themselves, those this MPI has, with no lower
    bound and an extent equal to their size (so count x size is what buffer_bytes counts)."""
    found = []
    for name in ("BYTE", "DOUBLE", "FLOAT", "INT", "LONG", "CHAR", "SIGNED_CHAR", "UNSIGNED_CHAR", "SHORT",
                 "UNSIGNED_SHORT", "UNSIGNED", "UNSIGNED_LONG", "LONG_LONG", "UNSIGNED_LONG_LONG", "LONG_DOUBLE",
                 "WCHAR", "C_BOOL", "INT8_T", "INT16_T", "INT32_T", "INT64_T", "UINT8_T", "UINT16_T", "UINT32_T",
                 "UINT64_T", "C_FLOAT_COMPLEX", "C_DOUBLE_COMPLEX", "C_COMPLEX", "COMPLEX", "DOUBLE_COMPLEX",
                 "PACKED", "AINT", "OFFSET", "COUNT"):
            datatype = getattr(MPI, name, None)
            if datatype is None or datatype == MPI.DATATYPE_NULL:
                continue
            try:
                size, (lb, extent) = datatype.Get_size(), datatype.Get_extent()
            except MPI.Exception:
                continue
            if 0 < size < 0x10000 and lb == 0 and extent == size:
                found.append((datatype, size))
    return tuple(found)


def compiled_call(kind, comm, call, ch: Channel, op, flags, closure, rounds=None, sends=0, root_at=-1, rank=0,
                  request_class=None, recv_op=0, dumped=None):
    """The compiled form of collector `closure` (kind _SEND, _RECV, _COLLECTIVE, _IRECV or
    _SENDRECV, whose receive half is `recv_op`; a nonblocking send is a _SEND with
    `request_class`) where the channel runs compiled: it writes what the closure writes for the
    common form of the call, in C, and hands every other form to the closure. Else the closure
    itself."""
    if ch.compiled is None:
        return closure
    if kind in (_RECV, _SENDRECV):
        count_in_c(ch.compiled)
    params, defaults = signature(call)
    return ch.compiled.MpiCall(kind, comm, call, closure, ch.append, ch.on, ch.bound, ch.spill, ch.inflight,
                               ch.peers, ch.status, rounds, ndarray, ch.cid, op, flags, ERROR, ANY_SOURCE,
                               ANY_TAG, F_ANY_SOURCE, F_ANY_TAG, ch.offset_ns, sends, root_at, rank,
                               params, defaults, request_class, ch if request_class is not None else None,
                               recv_op, dumped, predefined_datatypes())


def _form(pickled) -> dict:
    """compiled_call's arguments for a point-to-point call's pickle form (send, recv, isend, irecv...):
    its bytes are what mpi4py pickled during it (a send), or the Status's (a receive)."""
    return {"sends": _COMPILED_SENDS["pickled"], "dumped": DUMPED} if pickled else {}


@functools.lru_cache(maxsize=None)
def count_in_c(compiled) -> bool:
    """Have the compiled receives read a Status's byte count with the MPI library's MPI_Get_count
    themselves (found through the mpi4py module that links it, on MPI_BYTE's handle, the Status's
    MPI_Status through mpi4py's C API), not by calling Status.Get_count (17 ns less per receive,
    a fifth of what a collected Recv adds), and its source and tag at their offsets in this MPI's
    MPI_Status (`status_offsets`), not by Get_source and Get_tag. False where mpi4py or the
    platform does not offer it: then the Status's methods, which give the same values."""
    try:
        capsule = MPI.__pyx_capi__["PyMPIStatus_Get"]
        library = ctypes.CDLL(MPI.__file__, mode=os.RTLD_NOLOAD)
        get_count = ctypes.cast(library.MPI_Get_count, ctypes.c_void_p).value
        byte, size, status_size = MPI._handleof(MPI.BYTE), MPI._sizeof(MPI.Datatype), MPI._sizeof(MPI.Status)
    except (AttributeError, KeyError, OSError, TypeError):
        return False
    return compiled.use_mpi_status(capsule, get_count or 0, byte, size, *status_offsets(capsule), status_size)


def status_offsets(capsule) -> tuple[int, int]:
    """(MPI_SOURCE's, MPI_TAG's) byte offsets in this MPI library's MPI_Status (the standard names
    the fields, each MPI lays them out its own way: 8 and 12 in MPICH's, 0 and 4 in Open MPI's),
    found by setting them through mpi4py to values no other field holds and reading the struct
    back through `capsule` (mpi4py's PyMPIStatus_Get); -1 for one not found exactly once."""
    # Prototypes of their own: setting ctypes.pythonapi's would change them for everyone else
    api = ctypes.pythonapi
    name_of = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", api))
    pointer_of = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", api))
    try:
        address = pointer_of(capsule, name_of(capsule))
        struct_of = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(address)
        size = MPI._sizeof(MPI.Status)
    except (AttributeError, TypeError, ValueError):
        return -1, -1
    found = []
    for source, tag in ((0x1A2B3C, 0x4D5E6F), (0x2B3C4D, 0x5E6F70)):
        status = MPI.Status()
        status.Set_source(source)
        status.Set_tag(tag)
        raw = ctypes.string_at(struct_of(status), size)
        ints = [int.from_bytes(raw[i:i + 4], sys.byteorder, signed=True) for i in range(0, size - 3, 4)]
        found.append(tuple(4 * ints.index(v) if ints.count(v) == 1 else -1 for v in (source, tag)))
    return found[0] if found[0] == found[1] else (-1, -1)


@functools.lru_cache(maxsize=None)
def signature(call) -> tuple[tuple | None, tuple | None]:
    """(names of the parameters after self, defaults of the last of them) of mpi4py method `call`,
    from its own signature: where the compiled call puts keyword arguments. (None, None) where
    mpi4py does not say, or says something other than plain parameters: such calls with keywords
    go to the closure."""
    try:
        parameters = list(inspect.signature(call).parameters.values())[1:]
    except (TypeError, ValueError):
        return None, None
    names, defaults = [], []
    for parameter in parameters:
        if parameter.kind is not parameter.POSITIONAL_OR_KEYWORD or (defaults and parameter.default is parameter.empty):
            return None, None
        names.append(parameter.name)
        if parameter.default is not parameter.empty:
            defaults.append(parameter.default)
    return tuple(names), tuple(defaults)


def peer_table(world_ranks) -> list | dict:
    """Communicator rank -> world rank, indexable by MPI.PROC_NULL (-> PEER_NONE) and
    MPI.ANY_SOURCE (-> PEER_ANY) as well: a list when those are small negative numbers (MPICH,
    Open MPI), so that a lookup is one index."""
    ranks = list(world_ranks)
    special = {PROC_NULL: NONE, ANY_SOURCE: ANY}
    if all(-8 <= k < 0 for k in special):
        table = ranks + [NONE] * 8
        for k, v in special.items():
            table[k] = v
        return table
    return {**dict(enumerate(ranks)), **special}


def _u32(value) -> int:
    """A tag or count as the record's u32, for the error path (where it may not even be an int)."""
    try:
        return int(value) & U32
    except (TypeError, ValueError):
        return U32


def _peer(peers, rank) -> int:
    try:
        return peers[rank]
    except (LookupError, TypeError):
        return NONE


def received(peers, status) -> tuple[int, int, int]:
    """(peer, tag, bytes) of a received message, as its record holds them, from its Status as MPI
    filled it: read through MPI.Status's own methods, as the compiled collectors read MPI_Status
    itself, never through a subclass's (a program may number sources or tags its own way there)."""
    n = _COUNT(status)
    return _peer(peers, _SOURCE(status)), _TAG(status) & U32, 0 if n < 0 else n if n < U32 else U32


def _fail(ch, op, flags, peer, tag, t0) -> None:
    ch.inflight[ch.cid] = 0
    ch.append(op, flags | ERROR, ch.cid, peer, _u32(tag), 0, t0, ch.clock())


# -- point-to-point ------------------------------------------------------------------------------

def p2p_methods(comm, cls, ch: Channel, request_class, message_class) -> dict:
    """The traced point-to-point methods of `comm` (an instance of a subclass of mpi4py class
    `cls`), to be put in its __dict__: sends, receives, send-receives, posts and probes, both
    forms. `request_class` wraps the requests posts return, `message_class` matched probes."""
    m = {}
    for name, op in (("Send", e.SEND), ("Bsend", e.BSEND), ("Ssend", e.SSEND), ("Rsend", e.RSEND)):
        m[name] = _send(comm, getattr(cls, name), op, ch, 0)
    for name, op in (("send", e.SEND), ("bsend", e.BSEND), ("ssend", e.SSEND)):
        m[name] = _send(comm, getattr(cls, name), op, ch, e.PICKLED)
    m["Recv"] = _recv(comm, cls.Recv, e.RECV, ch, 0)
    m["recv"] = _recv(comm, cls.recv, e.RECV, ch, e.PICKLED)
    for name, op in (("Isend", e.ISEND), ("Ibsend", e.IBSEND), ("Issend", e.ISSEND), ("Irsend", e.IRSEND)):
        m[name] = _send(comm, getattr(cls, name), op, ch, 0, request_class)
    for name, op in (("isend", e.ISEND), ("ibsend", e.IBSEND), ("issend", e.ISSEND)):
        m[name] = _send(comm, getattr(cls, name), op, ch, e.PICKLED, request_class)
    m["Irecv"] = _post_recv(comm, cls.Irecv, ch, 0, request_class)
    m["irecv"] = _post_recv(comm, cls.irecv, ch, e.PICKLED, request_class)
    m["Sendrecv"] = _sendrecv(comm, cls.Sendrecv, ch, 0)
    m["sendrecv"] = _sendrecv(comm, cls.sendrecv, ch, e.PICKLED)
    m["Sendrecv_replace"] = _sendrecv_replace(comm, cls.Sendrecv_replace, ch)
    for name, op in (("Probe", e.PROBE), ("probe", e.PROBE), ("Iprobe", e.IPROBE), ("iprobe", e.IPROBE)):
        m[name] = _probe(comm, getattr(cls, name), op, ch)
    for name, op in (("Mprobe", e.MPROBE), ("mprobe", e.MPROBE), ("Improbe", e.IMPROBE), ("improbe", e.IMPROBE)):
        m[name] = _matched_probe(comm, getattr(cls, name), op, ch, message_class, name.islower())
    return m


def _send(comm, call, op, ch, flags, request_class=None):
    """A blocking send (Send, send, Ssend...), or with `request_class` a nonblocking one (Isend,
    isend...), whose request it wraps with what the completion needs."""
    cid, append, on, bound, spill = ch.cid, ch.append, ch.on, ch.bound, ch.spill
    clock, inflight, peers = ch.clock, ch.inflight, ch.peers
    dumped = DUMPED
    pickled = bool(flags)

    def send(buf, dest, tag=0):
        if not on[0]:
            return call(comm, buf, dest, tag)
        try:
            peer = peers[dest]
        except (LookupError, TypeError):
            peer = NONE
        if pickled:
            n, before = 0, dumped[0]
        elif type(buf) is ndarray:
            n = buf.nbytes
            if n > U32:
                n = U32
        else:
            n = buffer_bytes(buf)
        t0 = clock()
        inflight[cid] = (t0, op, flags, peer, tag, n)
        try:
            result = call(comm, buf, dest, tag)
        except BaseException:
            _fail(ch, op, flags, peer, tag, t0)
            raise
        t1 = clock()
        inflight[cid] = 0
        if pickled:
            n = dumped[0] - before
            if n > U32:
                n = U32
        if request_class is not None:
            result = request_class(result)
            result.info = (ch, op, flags, peer, tag, n, t0)
        if append(op, flags, cid, peer, tag, n, t0, t1) >= bound[0]:
            spill()
        return result

    return compiled_call(_SEND, comm, call, ch, op, flags, send, request_class=request_class, **_form(pickled))


def _recv(comm, call, op, ch, flags):
    """Recv (`buf` required) or recv (`flags` PICKLED: every argument optional, as mpi4py's)."""
    cid, append, on, bound, spill = ch.cid, ch.append, ch.on, ch.bound, ch.spill
    clock, inflight, peers, own = ch.clock, ch.inflight, ch.peers, ch.status

    def recv(buf, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        if not on[0]:
            return call(comm, buf, source, tag, status)
        st = own if status is None else status
        f = flags
        if source == ANY_SOURCE:
            f |= F_ANY_SOURCE
        if tag == ANY_TAG:
            f |= F_ANY_TAG
        try:
            want = peers[source]
        except (LookupError, TypeError):
            want = NONE
        t0 = clock()
        inflight[cid] = (t0, op, f, want, tag & U32, 0)
        try:
            result = call(comm, buf, source, tag, st)
        except BaseException:
            _fail(ch, op, f, want, tag, t0)
            raise
        t1 = clock()
        inflight[cid] = 0
        if append(op, f, cid, *received(peers, st), t0, t1) >= bound[0]:
            spill()
        return result

    if flags:
        recv.__defaults__ = (None, ANY_SOURCE, ANY_TAG, None)
    return compiled_call(_RECV, comm, call, ch, op, flags, recv, **_form(flags))


def _post_recv(comm, call, ch, flags, request_class):
    """Irecv (`buf` required) or irecv (`flags` PICKLED: every argument optional)."""
    cid, append, on, bound, spill = ch.cid, ch.append, ch.on, ch.bound, ch.spill
    clock, inflight, peers = ch.clock, ch.inflight, ch.peers
    op = e.IRECV

    def post(buf, source=ANY_SOURCE, tag=ANY_TAG):
        if not on[0]:
            return call(comm, buf, source, tag)
        f = flags
        if source == ANY_SOURCE:
            f |= F_ANY_SOURCE
        if tag == ANY_TAG:
            f |= F_ANY_TAG
        try:
            want = peers[source]
        except (LookupError, TypeError):
            want = NONE
        t0 = clock()
        inflight[cid] = (t0, op, f, want, tag & U32, 0)
        try:
            request = request_class(call(comm, buf, source, tag))
        except BaseException:
            _fail(ch, op, f, want, tag, t0)
            raise
        t1 = clock()
        inflight[cid] = 0
        request.info = (ch, op, f, want, tag & U32, 0, t0)
        if append(op, f, cid, want, tag & U32, 0, t0, t1) >= bound[0]:
            spill()
        return request

    if flags:
        post.__defaults__ = (None, ANY_SOURCE, ANY_TAG)
    return compiled_call(_IRECV, comm, call, ch, op, flags, post, request_class=request_class, **_form(flags))


def _sendrecv(comm, call, ch, flags):
    """Sendrecv / sendrecv: two records with the call's times, its send half and its receive half."""
    cid, append, on, bound, spill = ch.cid, ch.append, ch.on, ch.bound, ch.spill
    clock, inflight, peers, own = ch.clock, ch.inflight, ch.peers, ch.status
    dumped = DUMPED
    pickled = bool(flags)
    SEND, RECV = e.SENDRECV_SEND, e.SENDRECV_RECV

    def sendrecv(sendbuf, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
        if not on[0]:
            return call(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag, status)
        st = own if status is None else status
        f = flags
        if source == ANY_SOURCE:
            f |= F_ANY_SOURCE
        if recvtag == ANY_TAG:
            f |= F_ANY_TAG
        peer, want = _peer(peers, dest), _peer(peers, source)
        if pickled:
            n, before = 0, dumped[0]
        else:
            n = buffer_bytes(sendbuf)
        t0 = clock()
        inflight[cid] = (t0, RECV, f, want, recvtag & U32, 0)
        try:
            result = call(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag, st)
        except BaseException:
            _fail(ch, RECV, f, want, recvtag, t0)
            raise
        t1 = clock()
        inflight[cid] = 0
        if pickled:
            n = min(dumped[0] - before, U32)
        append(SEND, flags, cid, peer, sendtag, n, t0, t1)
        if append(RECV, f, cid, *received(peers, st), t0, t1) >= bound[0]:
            spill()
        return result

    return compiled_call(_SENDRECV, comm, call, ch, SEND, flags, sendrecv, recv_op=RECV, **_form(pickled))


def _sendrecv_replace(comm, call, ch):
    cid, append, on, bound, spill = ch.cid, ch.append, ch.on, ch.bound, ch.spill
    clock, inflight, peers, own = ch.clock, ch.inflight, ch.peers, ch.status
    SEND, RECV = e.SENDRECV_REPLACE_SEND, e.SENDRECV_REPLACE_RECV

    def Sendrecv_replace(buf, dest, sendtag=0, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):  # noqa: N802
        if not on[0]:
            return call(comm, buf, dest, sendtag, source, recvtag, status)
        st = own if status is None else status
        f = (F_ANY_SOURCE if source == ANY_SOURCE else 0) | (F_ANY_TAG if recvtag == ANY_TAG else 0)
        peer, want = _peer(peers, dest), _peer(peers, source)
        n = buffer_bytes(buf) if peer != NONE else 0
        t0 = clock()
        inflight[cid] = (t0, RECV, f, want, recvtag & U32, 0)
        try:
            call(comm, buf, dest, sendtag, source, recvtag, st)
        except BaseException:
            _fail(ch, RECV, f, want, recvtag, t0)
            raise
        t1 = clock()
        inflight[cid] = 0
        append(SEND, 0, cid, peer, sendtag, n, t0, t1)
        if append(RECV, f, cid, *received(peers, st), t0, t1) >= bound[0]:
            spill()

    return Sendrecv_replace


def _probe(comm, call, op, ch):
    """Probe/probe (blocks) and Iprobe/iprobe (returns whether a message is there): the message's
    actual source, tag and size; a nonblocking probe that found nothing is flagged EMPTY."""
    cid, append, on, bound, spill = ch.cid, ch.append, ch.on, ch.bound, ch.spill
    clock, inflight, peers, own = ch.clock, ch.inflight, ch.peers, ch.status

    def probe(source=ANY_SOURCE, tag=ANY_TAG, status=None):
        if not on[0]:
            return call(comm, source, tag, status)
        st = own if status is None else status
        f = (F_ANY_SOURCE if source == ANY_SOURCE else 0) | (F_ANY_TAG if tag == ANY_TAG else 0)
        want = _peer(peers, source)
        t0 = clock()
        inflight[cid] = (t0, op, f, want, tag & U32, 0)
        try:
            found = call(comm, source, tag, st)
        except BaseException:
            _fail(ch, op, f, want, tag, t0)
            raise
        t1 = clock()
        inflight[cid] = 0
        if found:
            record = (op, f, cid, *received(peers, st), t0, t1)
        else:
            record = (op, f | F_EMPTY, cid, want, tag & U32, 0, t0, t1)
        if append(*record) >= bound[0]:
            spill()
        return found

    return probe


def _matched_probe(comm, call, op, ch, message_class, pickled):
    """Mprobe/Improbe (and the pickle forms): as a probe; the message returned is wrapped so that
    its matched receive is recorded too (op MPI_Mrecv or MPI_Imrecv, on this channel)."""
    cid, append, on, bound, spill = ch.cid, ch.append, ch.on, ch.bound, ch.spill
    clock, inflight, peers, own = ch.clock, ch.inflight, ch.peers, ch.status
    flags = e.PICKLED if pickled else 0

    def mprobe(source=ANY_SOURCE, tag=ANY_TAG, status=None):
        if not on[0]:
            return call(comm, source, tag, status)
        st = own if status is None else status
        f = flags | (F_ANY_SOURCE if source == ANY_SOURCE else 0) | (F_ANY_TAG if tag == ANY_TAG else 0)
        want = _peer(peers, source)
        t0 = clock()
        inflight[cid] = (t0, op, f, want, tag & U32, 0)
        try:
            message = call(comm, source, tag, st)
        except BaseException:
            _fail(ch, op, f, want, tag, t0)
            raise
        t1 = clock()
        inflight[cid] = 0
        if message is None:
            record = (op, f | F_EMPTY, cid, want, tag & U32, 0, t0, t1)
        else:
            peer, got, n = received(peers, st)
            record = (op, f, cid, peer, got, n, t0, t1)
            message = message_class(message)
            message.info = (ch, f, peer, got, n)
        if append(*record) >= bound[0]:
            spill()
        return message

    return mprobe


def matched_receive(info, op, t0, t1) -> None:
    """The record of a matched receive (Message.Recv / recv) of a message `info` describes."""
    ch, flags, peer, tag, n = info
    if ch.append(op, flags, ch.cid, peer, tag, n, t0, t1) >= ch.bound[0]:
        ch.spill()


# -- requests ------------------------------------------------------------------------------------

def request_done(info, status, t1, extra=0) -> None:
    """The request record of a request posted as `info` (channel, op, flags, peer, tag, nbytes,
    t_start) whose completion was seen at `t1`: a receive's actual source, tag and bytes from
    `status` (None when the request was freed before completing)."""
    ch, op, flags, peer, tag, n, t0 = info
    if status is not None and op in RECEIVES:
        peer, tag, n = received(ch.peers, status)
    if flags & F_CANCELLED and (status is None or not _CANCELLED(status)):
        flags &= ~F_CANCELLED   # the program asked; MPI did not (or could not say that it did) cancel
    if ch.append(op, flags | extra | F_REQUEST, ch.cid, peer, tag, n, t0, t1) >= ch.bound[0]:
        ch.spill()


def completion_call(ch, op, given, completed, t0, t1) -> None:
    """The record of a completion call (Wait, Testall...) that was given `given` requests."""
    flags = F_EMPTY if not completed else 0
    if ch.append(op, flags, ch.cid, given & U32, completed, 0, t0, t1) >= ch.bound[0]:
        ch.spill()


def waiting_mark(ch, info, t0) -> None:
    """Mark `ch`'s collector as waiting, since `t0`, for the request posted as `info`."""
    _, op, flags, peer, tag, n, _ = info
    ch.inflight[ch.cid] = (t0, op, flags | F_REQUEST, peer, tag, n)


# -- collectives ---------------------------------------------------------------------------------

# name -> (op, pickled, parameter names, root parameter, what this rank sends)
# what it sends: "send" (the send buffer, or the receive buffer for MPI.IN_PLACE), "piece" (the
# send buffer, or its share of the receive buffer for MPI.IN_PLACE), "root-send"
# (the send buffer at the root only), "root" (the buffer, at the root only), "vector-root" (the
# root's vector send buffer), "vector" (a vector send buffer), "w" (an Alltoallw send buffer),
# "none", or "pickled" (what mpi4py pickled during the call).
COLLECTIVES = {
    "Barrier": (e.BARRIER, False, (), None, "none"),
    "Bcast": (e.BCAST, False, ("buf", "root"), "root", "root"),
    "Gather": (e.GATHER, False, ("sendbuf", "recvbuf", "root"), "root", "piece"),
    "Gatherv": (e.GATHERV, False, ("sendbuf", "recvbuf", "root"), "root", "piece"),
    "Scatter": (e.SCATTER, False, ("sendbuf", "recvbuf", "root"), "root", "root-send"),
    "Scatterv": (e.SCATTERV, False, ("sendbuf", "recvbuf", "root"), "root", "vector-root"),
    "Allgather": (e.ALLGATHER, False, ("sendbuf", "recvbuf"), None, "piece"),
    "Allgatherv": (e.ALLGATHERV, False, ("sendbuf", "recvbuf"), None, "piece"),
    "Alltoall": (e.ALLTOALL, False, ("sendbuf", "recvbuf"), None, "send"),
    "Alltoallv": (e.ALLTOALLV, False, ("sendbuf", "recvbuf"), None, "vector"),
    "Alltoallw": (e.ALLTOALLW, False, ("sendbuf", "recvbuf"), None, "w"),
    "Reduce": (e.REDUCE, False, ("sendbuf", "recvbuf", "op", "root"), "root", "send"),
    "Allreduce": (e.ALLREDUCE, False, ("sendbuf", "recvbuf", "op"), None, "send"),
    "Reduce_scatter_block": (e.REDUCE_SCATTER_BLOCK, False, ("sendbuf", "recvbuf", "op"), None, "send"),
    "Reduce_scatter": (e.REDUCE_SCATTER, False, ("sendbuf", "recvbuf", "recvcounts", "op"), None, "send"),
    "Scan": (e.SCAN, False, ("sendbuf", "recvbuf", "op"), None, "send"),
    "Exscan": (e.EXSCAN, False, ("sendbuf", "recvbuf", "op"), None, "send"),
    "barrier": (e.BARRIER, True, (), None, "pickled"),
    "bcast": (e.BCAST, True, ("obj", "root"), "root", "pickled"),
    "gather": (e.GATHER, True, ("sendobj", "root"), "root", "pickled"),
    "scatter": (e.SCATTER, True, ("sendobj", "root"), "root", "pickled"),
    "allgather": (e.ALLGATHER, True, ("sendobj",), None, "pickled"),
    "alltoall": (e.ALLTOALL, True, ("sendobj",), None, "pickled"),
    "reduce": (e.REDUCE, True, ("sendobj", "op", "root"), "root", "pickled"),
    "allreduce": (e.ALLREDUCE, True, ("sendobj", "op"), None, "pickled"),
    "scan": (e.SCAN, True, ("sendobj", "op"), None, "pickled"),
    "exscan": (e.EXSCAN, True, ("sendobj", "op"), None, "pickled"),
}
INTRA_ONLY = frozenset({"Scan", "Exscan", "scan", "exscan"})


def collective_methods(comm, cls, ch: Channel, rank: int, size: int) -> dict:
    """The traced collective methods of `comm` (rank `rank` of `size`), both forms, numbering
    their rounds with one counter per communicator."""
    rounds = count()
    return {name: _collective(comm, getattr(cls, name), ch, rounds, rank, size, *spec)
            for name, spec in COLLECTIVES.items() if hasattr(cls, name)}


def _collective(comm, call, ch, rounds, rank, size, op, pickled, params, root_param, sends):
    cid, append, on, bound, spill = ch.cid, ch.append, ch.on, ch.bound, ch.spill
    clock, inflight, peers = ch.clock, ch.inflight, ch.peers
    dumped = DUMPED
    flags = e.PICKLED if pickled else 0
    root_at = params.index(root_param) if root_param else -1
    bytes_of = _sent_bytes(sends, size)

    def collective(*args, **kwargs):
        r = next(rounds) & U32   # counted even while switched off, so that rounds stay aligned
        if not on[0]:
            return call(comm, *args, **kwargs)
        if kwargs:
            args = _positional(params, args, kwargs)
            kwargs = {}
        root = (args[root_at] if root_at < len(args) else 0) if root_at >= 0 else None
        peer = NONE if root is None else _peer(peers, root)
        n = 0 if pickled else bytes_of(args, root is None or root == rank)
        before = dumped[0]
        t0 = clock()
        inflight[cid] = (t0, op, flags, peer, r, n)
        try:
            result = call(comm, *args)
        except BaseException:
            _fail(ch, op, flags, peer, r, t0)
            raise
        t1 = clock()
        inflight[cid] = 0
        if pickled:
            n = min(dumped[0] - before, U32)
        if append(op, flags, cid, peer, r, n, t0, t1) >= bound[0]:
            spill()
        return result

    if sends not in _COMPILED_SENDS:
        return collective
    return compiled_call(_COLLECTIVE, comm, call, ch, op, flags, collective, rounds, _COMPILED_SENDS[sends],
                         root_at, rank, dumped=dumped if pickled else None)


def _positional(params, args, kwargs) -> tuple:
    """Arguments given by keyword, moved to their positions (missing ones stay at mpi4py's
    defaults by ending the tuple before them, unless a later one is given)."""
    out = list(args)
    for i, name in enumerate(params[len(args):], len(args)):
        if name in kwargs:
            while len(out) < i:
                out.append(_DEFAULTS[params[len(out)]])
            out.append(kwargs.pop(name))
    if kwargs:
        raise TypeError(f"unexpected keyword argument {next(iter(kwargs))!r}")
    return tuple(out)


_DEFAULTS = {"root": 0, "op": MPI.SUM, "recvcounts": None, "recvbuf": None}


def _sent_bytes(sends, size):
    def none(args, is_root):
        return 0

    def send(args, is_root):
        buf = args[0] if args else None
        if buf is IN_PLACE:
            return buffer_bytes(args[1]) if len(args) > 1 else 0
        return buffer_bytes(buf)

    def piece(args, is_root):
        buf = args[0] if args else None
        if buf is IN_PLACE:
            return buffer_bytes(args[1]) // size if len(args) > 1 else 0
        return buffer_bytes(buf)

    def root(args, is_root):
        return buffer_bytes(args[0]) if is_root and args else 0

    def root_send(args, is_root):
        return buffer_bytes(args[0]) if is_root and args and args[0] is not IN_PLACE else 0

    def vector_root(args, is_root):
        return buffer_bytes(args[0], size) if is_root and args and args[0] is not IN_PLACE else 0

    def vector(args, is_root):
        return buffer_bytes(args[0], size) if args and args[0] is not IN_PLACE else 0

    def w(args, is_root):
        return vector_w_bytes(args[0]) if args and args[0] is not IN_PLACE else 0

    return {"none": none, "pickled": none, "send": send, "piece": piece, "root": root, "root-send": root_send,
            "vector-root": vector_root, "vector": vector, "w": w}[sends]
