"""MPI collectors: each traced mpi4py call is a row of a table (`CALLS`), applied by one routine.

Each communicator of a rank has up to two collectors (eventspace.mpi.generate): one for its
point-to-point calls, one for its collectives; an `MpiCollector` holds what one of them needs. Each
traced method of a communicator is a `CallSpec` row, and `traced_method` applies a row: its reader
(an extractor) reads the arguments, `timed` makes the call (the one timing protocol: mark in flight
-> call -> on error, the failure record -> clear), the record its row says it holds is written by
`write` (append, then spill at the drain's bound). Everything a call needs is bound in closure cells
when the communicator is made, so a call pays a switch test, the reader, two clock reads, the mark
and its append. The compiled collector (eventspace/collector_c/, MpiCall) applies the same row to
the common forms of the calls whose row says `compiled`, and hands every other form to the
closure, which stays the reference. Fields are encoded as eventspace.mpi.encoding describes.

A row (CallSpec), here Isend's:

    name      the mpi4py method                                  "Isend"
    op        its record's op code                                e.ISEND
    reads     its Extractor: make(collector, row, CallContext) -> SENDING: sending, peer=1, tag=2
              a reader with the method's signature, returning
              (mpi4py's arguments, the mark's flags, peer, arg,
              nbytes, what the record needs besides); and the
              places of peer, tag, source, tag wanted and Status
              among the arguments, for the compiled path
    holds     what its record holds: ASKED (as read), RECEIVED   ASKED
              (from the Status), SENT_RECEIVED (two records),
              PROBED, MATCHED
    role      BLOCKING, or POSTING (its request wrapped, so that  POSTING
              its completion is recorded)
    flags     PICKLED for a pickle form                           0
    pickles   its bytes are what mpi4py pickled during it         False
    sends     the bytes it sends (COLLECTIVES' words)             "send": its buffer, argument 0
    waits_as, second   the op of its mark and failure record, and of a second record (Sendrecv's receive half)
    rounds    a collective: its arg is the communicator's round
    compiled  MpiCall runs its common forms in C                  True

Adding a call is adding a row, and an extractor where none reads its arguments. The nonblocking
collectives are such rows: a COLLECTIVES entry each ("Iallreduce": (op, False, ("sendbuf", "recvbuf",
"op"), None, "send"), made from the blocking one's) and the row CallSpec("Iallreduce", op, COLLECTIVE,
role=POSTING, rounds=True, compiled=True, sends="send"); its Wait then writes its request record as
an Isend's does. A persistent init call (Send_init, Allreduce_init) is a row of role PERSISTENT:
`persistent_method` wraps its request, and each Start is the post (interpose.Prequest). A
one-sided Win.Put(origin, target_rank, target=None): an extractor PUTTING = Extractor(putting,
peer=1), whose reader gives (the arguments, 0, the target's world rank, 0, the origin's bytes,
None), and the row CallSpec("Put", op, PUTTING, compiled=True, sends="send"), its methods put on a
traced window as p2p_methods puts a communicator's.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count

from mpi4py import MPI
from numpy import ndarray

from .. import trace
from ..compiled import collector_module
from . import encoding as e
from . import mpi4py_access
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
class PickleCount(threading.local):
    """Bytes mpi4py has pickled in the calling thread (`total`), summed by the pickle hook
    (`counted`, which interpose.count_pickled installs; mpi4py pickles in the thread that makes the
    call): a pickle-form call's bytes are the growth of its own thread's count while it runs,
    whatever other threads of an MPI_THREAD_MULTIPLE program pickle meanwhile. The Python reference
    of the compiled collector's PickleCount (a C thread-local, which the compiled calls read in
    place, and a hook in C), which PICKLED_BYTES is wherever the collector runs compiled."""

    def __init__(self):
        self.total = 0

    def counted(self, dumps):
        """`dumps`, adding the size of each pickle it makes to the calling thread's `total`."""
        def counted_dumps(obj, protocol=None, **kwargs):
            data = dumps(obj, protocol, **kwargs)
            self.total += len(data)
            return data

        return counted_dumps


class ThreadStatus(threading.local):
    """The MPI.Status (`status`) in which a traced receive reads what came, where the program gives
    none, in a thread other than the one that made its collector (which uses the collector's own,
    MpiCollector.status): one Status shared by threads receiving at once would hold another
    thread's message by the time it is read."""

    def __init__(self):
        self.status = MPI.Status()


_built = collector_module()
PICKLED_BYTES = PickleCount() if _built is None else _built.PickleCount()
THREAD_STATUS = ThreadStatus()


class MpiCollector:
    """One collector of this rank on one communicator: its id, its trace element's append, its
    slot in the node's collector table (`page`, index `at`: eventspace.table.Page, where it reads
    its switch and drain bound and leaves its mark, the record as known when a call begins, and
    its start), its spill, the node's clock, the communicator's rank -> world rank table
    (`peers`), and a Status to read receives with in the thread that made it (`owner`; other
    threads read theirs in THREAD_STATUS: `status_here`). With `compiled` (the compiled collector
    module, eventspace.compiled) and `offset_ns` (the node clock's offset) its hot calls run compiled
    (`compiled_call`), through `slot`, the compiled view of its table slot (None otherwise).

    Its calls may come from any thread of an MPI_THREAD_MULTIPLE program: its records are whole
    and exact (each is one append, which the compiled appender makes holding the GIL; receives
    read their own thread's Status, pickle forms their own thread's PickleCount), but its slot's
    in-flight mark says one call at a time: the latest begun, until one of them ends."""

    __slots__ = ("cid", "append", "page", "at", "slot", "spill", "clock", "peers", "status", "owner", "compiled",
                 "offset_ns")

    def __init__(self, cid, append, page, at, spill, clock, peers, compiled=None, offset_ns=0):
        self.cid, self.append, self.page, self.at, self.spill = cid, append, page, at, spill
        self.clock, self.peers = clock, peers
        self.status, self.owner = MPI.Status(), threading.get_ident()
        fast = compiled is not None and type(append) is compiled.RingAppender and type(peers) is list
        self.compiled, self.offset_ns = (compiled if fast else None), offset_ns
        self.slot = compiled.TableSlot(page, at) if fast else None

    def status_here(self):
        """The Status a receive of the calling thread reads what came with, where the program gives none."""
        return self.status if threading.get_ident() == self.owner else THREAD_STATUS.status


# How the compiled call (eventspace/collector_c/, MpiCall) reads a row's bytes (S_*), and what its record holds (H_*).
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


def compiled_call(spec, read, comm, call, ch: MpiCollector, closure, context, rounds, request_class):
    """The compiled form of `closure` (the collector of row `spec`, whose reader is `read`) where the
    collector runs compiled: MpiCall applies the same row, in C, to the common form of the call
    (where its arguments are, from the reader's signature and the extractor's places; how its bytes
    are read; what its record holds) and hands every other form to the closure. Else the closure."""
    if ch.compiled is None:
        return closure
    if spec.holds is not ASKED:
        count_in_c(ch.compiled)
    at = spec.reads
    least, most = _arity(read)
    row = (least, most, _root_at(spec) if spec.rounds else at.peer, at.tag, at.source, at.recv_tag, at.status,
           _COMPILED_HOLDS[spec.holds], spec.rounds)
    sends = _COMPILED_SENDS["pickled" if spec.pickles else spec.sends]
    params, defaults = signature(call)
    return ch.compiled.MpiCall(row, comm, call, closure, ch.append, ch.slot, ch.spill, ch.peers, ch.status, rounds,
                               ndarray, ch.cid, spec.op, spec.flags, ERROR, ANY_SOURCE, ANY_TAG, F_ANY_SOURCE,
                               F_ANY_TAG, ch.offset_ns, sends, context.rank, params, defaults, request_class,
                               ch if request_class is not None else None, spec.second,
                               PICKLED_BYTES if spec.pickles else None, predefined_datatypes(), ch.owner,
                               THREAD_STATUS)


def _arity(read) -> tuple[int, int]:
    """(arguments at least, at most) of a reader; at most -1 where it takes any number (*args)."""
    parameters = [p for p in inspect.signature(read).parameters.values() if p.kind is not p.VAR_KEYWORD]
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return 0, -1
    return sum(p.default is p.empty for p in parameters), len(parameters)


@functools.lru_cache(maxsize=None)
def count_in_c(compiled) -> bool:
    """Have the compiled receives read a Status's byte count with the MPI library's MPI_Get_count
    themselves (found through the mpi4py module that links it, on MPI_BYTE's handle, the Status's
    MPI_Status through mpi4py's C API), not by calling Status.Get_count (17 ns less per receive,
    a fifth of what a collected Recv adds), and its source and tag at their offsets in this MPI's
    MPI_Status (`status_offsets`), not by Get_source and Get_tag. False where mpi4py or the
    platform does not offer it: then the Status's methods, which give the same values."""
    capsule, size, status_size = mpi4py_access.status_getter(), mpi4py_access.handle_size(), mpi4py_access.status_size()
    if capsule is None or size is None or status_size is None:
        return False
    return compiled.use_mpi_status(capsule, mpi4py_access.mpi_get_count(), MPI.BYTE.handle, size,
                                   *status_offsets(capsule), status_size)


def status_offsets(capsule) -> tuple[int, int]:
    """(MPI_SOURCE's, MPI_TAG's) byte offsets in this MPI library's MPI_Status (the standard names
    the fields, each MPI lays them out its own way: 8 and 12 in MPICH's, 0 and 4 in Open MPI's),
    found by setting them through mpi4py to values no other field holds and reading the struct
    back through `capsule` (mpi4py's PyMPIStatus_Get); -1 for one not found exactly once."""
    # Prototypes of their own: setting ctypes.pythonapi's would change them for everyone else
    api = ctypes.pythonapi
    name_of = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", api))
    pointer_of = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", api))
    size = mpi4py_access.status_size()
    try:
        address = pointer_of(capsule, name_of(capsule))
        struct_of = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(address)
    except (AttributeError, TypeError, ValueError):
        return -1, -1
    if size is None:
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


def peer_table(world_ranks, root: int | None = None) -> list | dict:
    """Communicator rank -> world rank, indexable by MPI.PROC_NULL (-> PEER_NONE) and
    MPI.ANY_SOURCE (-> PEER_ANY) as well: a list when those are small negative numbers (MPICH,
    Open MPI), so that a lookup is one index. For an intercommunicator, `world_ranks` are its remote
    group's and `root` this rank's own world rank, which MPI.ROOT (this rank is a collective's root)
    reads as."""
    ranks = list(world_ranks)
    special = {PROC_NULL: NONE, ANY_SOURCE: ANY, **({} if root is None else {MPI.ROOT: root})}
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


# -- the timing routine ------------------------------------------------------------------------

def timed(ch: MpiCollector, call, args, op, flags, peer, arg, n, failure=None):
    """THE timing protocol of a traced call, written once: `ch`'s collector marked in flight with
    (op, flags, peer, arg, n) since t0, `call(*args)` made; if it raises, the mark cleared, the
    call's record with the ERROR flag (`failure`: (op, flags, peer, arg) where it is not the
    mark's) and the error again; else the mark cleared. -> (result, t0, t1). Its records are
    the caller's to write (`write`)."""
    clock, page, at = ch.clock, ch.page, ch.at
    starts = page.starts
    t0 = clock()
    page.marks[at] = (op, flags, peer, arg, n)   # the mark before its start (see eventspace.table.Page)
    starts[at] = t0
    try:
        result = call(*args)
    except BaseException:
        starts[at] = 0
        if failure is not None:
            op, flags, peer, arg = failure
        ch.append(op, flags | ERROR, ch.cid, peer, _u32(arg), 0, t0, clock())
        raise
    t1 = clock()
    starts[at] = 0
    return result, t0, t1


def write(ch: MpiCollector, op, flags, peer, arg, n, t0, t1) -> None:
    """One record of `ch`'s collector, then its spill when the drain's bound is reached."""
    if ch.append(op, flags, ch.cid, peer, arg, n, t0, t1) >= ch.page.bounds[ch.at]:
        ch.spill()


# -- the call table ----------------------------------------------------------------------------

# A call's role: it blocks until done, or posts (returns a request, wrapped so that its completion is
# recorded). The completions themselves (Wait, Waitall, ...) are interpose.Request's methods, which
# time with `timed` and write with `write` too.
# A persistent init call (Send_init, Allreduce_init...) returns its request wrapped, writes no record, and
# each Start of the request is a post (interpose.Prequest).
BLOCKING, POSTING, PERSISTENT = "blocking", "posting", "persistent"
# What its record holds: what the reader read before the call (peer, tag or round, bytes sent);
# what came (peer, tag and bytes from the Status); a send half (as read) and a receive half (as
# came), two records; what a probe found (as came, or as read flagged EMPTY); as a probe, with the
# message wrapped so that its matched receive is recorded too.
ASKED, RECEIVED, SENT_RECEIVED, PROBED, MATCHED = "asked", "received", "sent+received", "probed", "matched"
# A test of a window's exposure epoch (Win.Test): as read, flagged EMPTY when the epoch was not over.
TESTED = "tested"
_COMPILED_HOLDS = {ASKED: 0, RECEIVED: 1, SENT_RECEIVED: 2}   # as MpiCall reads them (H_*)


@dataclass(frozen=True)
class CallSpec:
    """One traced MPI call family: a row of CALLS, applied by `traced_method` (and by the compiled
    MpiCall, for the rows with a `compiled` kind)."""

    name: str               # the mpi4py method (of the communicator)
    op: int                 # its record's op (SENT_RECEIVED: the send half's)
    reads: Extractor        # how its arguments are read; see module docstring
    holds: str = ASKED      # what its record holds (ASKED, RECEIVED, ...)
    role: str = BLOCKING    # BLOCKING, POSTING or PERSISTENT
    flags: int = 0          # of every record it writes: PICKLED for a pickle form (send, recv, allreduce...)
    pickles: bool = False   # its bytes are what mpi4py pickled during the call (a pickle form that sends)
    waits_as: int = 0       # the op of its in-flight mark and failure record, where not `op` (SENT_RECEIVED: the receive half)
    second: int = 0         # SENT_RECEIVED: the receive half's op
    rounds: bool = False    # a collective: numbered by the communicator's round counter (counted even while off)
    compiled: bool = False  # the compiled MpiCall runs its common forms (ASKED, RECEIVED, SENT_RECEIVED rows)
    sends: str = "none"     # the bytes it sends, as COLLECTIVES says them ("send": its buffer argument 0)


@dataclass(frozen=True)
class Extractor:
    """How a call family's arguments are read: `make(collector, row, context)` -> its reader (see
    below), and the places of the arguments the compiled MpiCall reads itself (-1: none): the
    destination (a collective's: its root, from COLLECTIVES), the tag sent, the source and the tag
    wanted, the Status."""

    make: Callable
    peer: int = -1
    tag: int = -1
    source: int = -1
    recv_tag: int = -1
    status: int = -1


def _wanted(flags, source, tag) -> int:
    return flags | (F_ANY_SOURCE if source == ANY_SOURCE else 0) | (F_ANY_TAG if tag == ANY_TAG else 0)


# Extractors: (collector, spec, context) -> reader. A reader takes the call's arguments as mpi4py's
# method does (its signature is the method's: keywords bind as they would) and returns (the
# arguments mpi4py's method is called with, after the communicator; the mark's flags, peer, arg
# and nbytes; what the record needs besides: the Status, or a send half).

def sending(ch, spec, context):
    """Send(buf, dest, tag=0), Isend..., and their pickle forms: the destination, the tag, the buffer's bytes."""
    peers, flags, pickled = ch.peers, spec.flags, spec.pickles

    def read(buf, dest, tag=0):
        try:
            peer = peers[dest]
        except (LookupError, TypeError):
            peer = NONE
        if pickled:
            n = 0
        elif type(buf) is ndarray:
            n = buf.nbytes
            if n > U32:
                n = U32
        else:
            n = buffer_bytes(buf)
        return (buf, dest, tag), flags, peer, tag, n, None

    return read


def receiving(ch, spec, context):
    """Recv(buf, source=ANY_SOURCE, tag=ANY_TAG, status=None), recv (buf optional too): the source and
    tag wanted, and the Status to read what came (the calling thread's, `status_here`, unless the
    program gives one)."""
    peers, here, flags = ch.peers, ch.status_here, spec.flags

    def read(buf, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        st = here() if status is None else status
        return (buf, source, tag, st), _wanted(flags, source, tag), _peer(peers, source), tag & U32, 0, st

    if spec.flags & e.PICKLED:
        read.__defaults__ = (None, ANY_SOURCE, ANY_TAG, None)
    return read


def posting_receive(ch, spec, context):
    """Irecv(buf, source=ANY_SOURCE, tag=ANY_TAG), irecv (buf optional too): the source and tag wanted."""
    peers, flags = ch.peers, spec.flags

    def read(buf, source=ANY_SOURCE, tag=ANY_TAG):
        return (buf, source, tag), _wanted(flags, source, tag), _peer(peers, source), tag & U32, 0, None

    if spec.flags & e.PICKLED:
        read.__defaults__ = (None, ANY_SOURCE, ANY_TAG)
    return read


def send_receiving(ch, spec, context):
    """Sendrecv(sendbuf, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None),
    sendrecv: marked as waiting in the receive half; the send half (destination, tag, bytes) kept."""
    peers, here, flags, pickled = ch.peers, ch.status_here, spec.flags, spec.pickles

    def read(sendbuf, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
        st = here() if status is None else status
        f = _wanted(flags, source, recvtag)
        peer, want = _peer(peers, dest), _peer(peers, source)
        n = 0 if pickled else buffer_bytes(sendbuf)
        return ((sendbuf, dest, sendtag, recvbuf, source, recvtag, st), f, want, recvtag & U32, 0,
                (st, flags, peer, sendtag, n))

    return read


def replacing(ch, spec, context):
    """Sendrecv_replace(buf, dest, sendtag=0, source=ANY_SOURCE, recvtag=ANY_TAG, status=None)."""
    peers, here = ch.peers, ch.status_here

    def read(buf, dest, sendtag=0, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
        st = here() if status is None else status
        f = _wanted(0, source, recvtag)
        peer, want = _peer(peers, dest), _peer(peers, source)
        n = buffer_bytes(buf) if peer != NONE else 0
        return (buf, dest, sendtag, source, recvtag, st), f, want, recvtag & U32, 0, (st, 0, peer, sendtag, n)

    return read


def probing(ch, spec, context):
    """Probe(source=ANY_SOURCE, tag=ANY_TAG, status=None), Iprobe, Mprobe, Improbe and their pickle forms."""
    peers, here, flags = ch.peers, ch.status_here, spec.flags

    def read(source=ANY_SOURCE, tag=ANY_TAG, status=None):
        st = here() if status is None else status
        return (source, tag, st), _wanted(flags, source, tag), _peer(peers, source), tag & U32, 0, st

    return read


def collective(ch, spec, context):
    """A collective (*args, **kwargs as COLLECTIVES' parameter names): the root's world rank, the bytes
    this rank sends (COLLECTIVES' `sends`); its round is the communicator's counter's."""
    peers, flags, pickled = ch.peers, spec.flags, spec.pickles
    _, _, params, root_param, sends = COLLECTIVES[spec.name]
    root_at = params.index(root_param) if root_param else -1
    bytes_of = _sent_bytes(sends, context.size)
    rank = context.rank

    def read(*args, **kwargs):
        if kwargs:
            args = _positional(params, args, kwargs)
        root = (args[root_at] if root_at < len(args) else 0) if root_at >= 0 else None
        peer = NONE if root is None else _peer(peers, root)
        n = 0 if pickled else bytes_of(args, root is None or root == rank)
        return args, flags, peer, 0, n, None

    return read


SENDING = Extractor(sending, peer=1, tag=2)
RECEIVING = Extractor(receiving, source=1, recv_tag=2, status=3)
POSTING_RECEIVE = Extractor(posting_receive, source=1, recv_tag=2)
SEND_RECEIVING = Extractor(send_receiving, peer=1, tag=2, source=4, recv_tag=5, status=6)
REPLACING = Extractor(replacing)
PROBING = Extractor(probing)
COLLECTIVE = Extractor(collective)


class CallContext:
    """What extractors of one communicator's calls read besides the collector: its size, this rank
    in it, its round counter, and the classes that wrap what posts, persistent init calls and
    matched probes return."""

    __slots__ = ("size", "rank", "rounds", "request_class", "message_class", "prequest_class")

    def __init__(self, size=0, rank=0, rounds=None, request_class=None, message_class=None, prequest_class=None):
        self.size, self.rank, self.rounds = size, rank, rounds
        self.request_class, self.message_class = request_class, message_class
        self.prequest_class = prequest_class


def traced_method(comm, call, spec: CallSpec, ch: MpiCollector, context: CallContext):
    """`call` (mpi4py's method) on `comm`, traced as row `spec` says: THE routine that applies a
    row (reader, `timed`, the record its `holds` says, `write`). Compiled (MpiCall) where the
    collector runs compiled and the row has a compiled kind; that hands the forms it does not take
    to this closure, which stays the reference."""
    switches, at, pickles = ch.page.switches, ch.at, PICKLED_BYTES
    op, holds, pickled = spec.op, spec.holds, spec.pickles
    waits_as = spec.waits_as or op
    read = spec.reads.make(ch, spec, context)
    rounds = context.rounds if spec.rounds else None
    if spec.role == PERSISTENT:
        return persistent_method(comm, call, spec, ch, read, rounds, context.prequest_class)
    wrap = context.request_class if spec.role == POSTING else None
    peers, message_class = ch.peers, context.message_class

    made = call
    if wrap is not None:   # a post's request is wrapped within the call: a failure to wrap is the call's
        def made(*args):
            return wrap(call(*args))

    def method(*args, **kwargs):
        if rounds is not None:
            r = next(rounds) & U32   # counted even while switched off, so that rounds stay aligned
        if not switches[at]:
            return call(comm, *args, **kwargs)
        given, f, peer, arg, n, kept = read(*args, **kwargs)
        if rounds is not None:
            arg = r
        if pickled:
            before = pickles.total
        result, t0, t1 = timed(ch, made, (comm, *given), waits_as, f, peer, arg, n)
        if pickled:
            n = min(pickles.total - before, U32)
        if holds is ASKED:
            if wrap is not None:
                result.info = (ch, op, f, peer, arg, n, t0)
            write(ch, op, f, peer, arg, n, t0, t1)
        elif holds is RECEIVED:
            write(ch, op, f, *received(peers, kept), t0, t1)
        elif holds is TESTED:
            write(ch, op, f if result else f | F_EMPTY, peer, arg, n, t0, t1)
        elif holds is SENT_RECEIVED:
            st, send_flags, to, tag, sent = kept   # the drain's bound is checked once, after the pair
            ch.append(op, send_flags, ch.cid, to, tag, n if pickled else sent, t0, t1)
            write(ch, spec.second, f, *received(peers, st), t0, t1)
        elif (not result) if holds is PROBED else result is None:   # nothing found
            write(ch, op, f | F_EMPTY, peer, arg, 0, t0, t1)
        else:
            source, tag, got = received(peers, kept)
            if holds is MATCHED:
                result = message_class(result)
                result.info = (ch, f, source, tag, got)
            write(ch, op, f, source, tag, got, t0, t1)
        return result

    method.__name__ = method.__qualname__ = spec.name
    if not spec.compiled or spec.sends not in _COMPILED_SENDS:
        return method
    return compiled_call(spec, read, comm, call, ch, method, context, rounds, wrap)


def persistent_method(comm, call, spec: CallSpec, ch: MpiCollector, read, rounds, wrap):
    """`call`, a persistent init call (Send_init, Recv_init, Allreduce_init...) on `comm`, traced as
    row `spec` says: its request wrapped in `wrap` (interpose.Prequest) holding `template`, what each
    Start's post record holds (collector, op, flags, peer, tag, bytes as the reader read them, and
    the communicator's round counter for a collective, whose Starts take its rounds). No record and
    no switch test: the init call is local, and a request made while the collector was off must
    still count its collective rounds when started."""
    op = spec.op

    def method(*args, **kwargs):
        given, f, peer, arg, n, _ = read(*args, **kwargs)
        request = wrap(call(comm, *given))
        request.template = (ch, op, f, peer, arg, n, rounds)
        return request

    method.__name__ = method.__qualname__ = spec.name
    return method


def _root_at(spec) -> int:
    if not spec.rounds or spec.name not in COLLECTIVES:   # a window's collectives (Fence) have no root
        return -1
    _, _, params, root_param, _ = COLLECTIVES[spec.name]
    return params.index(root_param) if root_param else -1


def _p2p_calls() -> tuple[CallSpec, ...]:
    rows = []
    for name, op in (("Send", e.SEND), ("Bsend", e.BSEND), ("Ssend", e.SSEND), ("Rsend", e.RSEND)):
        rows.append(CallSpec(name, op, SENDING, compiled=True, sends="send"))
    for name, op in (("send", e.SEND), ("bsend", e.BSEND), ("ssend", e.SSEND)):
        rows.append(CallSpec(name, op, SENDING, flags=e.PICKLED, pickles=True, compiled=True))
    rows.append(CallSpec("Recv", e.RECV, RECEIVING, RECEIVED, compiled=True))
    rows.append(CallSpec("recv", e.RECV, RECEIVING, RECEIVED, flags=e.PICKLED, compiled=True))
    for name, op in (("Isend", e.ISEND), ("Ibsend", e.IBSEND), ("Issend", e.ISSEND), ("Irsend", e.IRSEND)):
        rows.append(CallSpec(name, op, SENDING, role=POSTING, compiled=True, sends="send"))
    for name, op in (("isend", e.ISEND), ("ibsend", e.IBSEND), ("issend", e.ISSEND)):
        rows.append(CallSpec(name, op, SENDING, role=POSTING, flags=e.PICKLED, pickles=True, compiled=True))
    for name, op in (("Send_init", e.SEND_INIT), ("Bsend_init", e.BSEND_INIT), ("Ssend_init", e.SSEND_INIT),
                     ("Rsend_init", e.RSEND_INIT)):
        rows.append(CallSpec(name, op, SENDING, role=PERSISTENT, sends="send"))
    rows.append(CallSpec("Recv_init", e.RECV_INIT, POSTING_RECEIVE, role=PERSISTENT))
    rows.append(CallSpec("Irecv", e.IRECV, POSTING_RECEIVE, role=POSTING, compiled=True))
    rows.append(CallSpec("irecv", e.IRECV, POSTING_RECEIVE, role=POSTING, flags=e.PICKLED, compiled=True))
    for name, pickled in (("Sendrecv", False), ("sendrecv", True)):
        rows.append(CallSpec(name, e.SENDRECV_SEND, SEND_RECEIVING, SENT_RECEIVED, flags=e.PICKLED if pickled else 0,
                             pickles=pickled, waits_as=e.SENDRECV_RECV, second=e.SENDRECV_RECV, compiled=True,
                             sends="none" if pickled else "send"))
    rows.append(CallSpec("Sendrecv_replace", e.SENDRECV_REPLACE_SEND, REPLACING, SENT_RECEIVED,
                         waits_as=e.SENDRECV_REPLACE_RECV, second=e.SENDRECV_REPLACE_RECV))
    for name, op in (("Probe", e.PROBE), ("probe", e.PROBE), ("Iprobe", e.IPROBE), ("iprobe", e.IPROBE)):
        rows.append(CallSpec(name, op, PROBING, PROBED))
    for name, op in (("Mprobe", e.MPROBE), ("mprobe", e.MPROBE), ("Improbe", e.IMPROBE), ("improbe", e.IMPROBE)):
        rows.append(CallSpec(name, op, PROBING, MATCHED, flags=e.PICKLED if name.islower() else 0))
    return tuple(rows)


P2P_CALLS = _p2p_calls()


# -- requests ------------------------------------------------------------------------------------

def matched_receive(info, op, t0, t1) -> None:
    """The record of a matched receive (Message.Recv / recv) of a message `info` describes."""
    ch, flags, peer, tag, n = info
    write(ch, op, flags, peer, tag, n, t0, t1)


def request_done(info, status, t1, extra=0) -> None:
    """The request record of a request posted as `info` (channel, op, flags, peer, tag, nbytes,
    t_start) whose completion was seen at `t1`: a receive's actual source, tag and bytes from
    `status` (None when the request was freed before completing); a cancelled one's as posted (MPI
    leaves a cancelled receive's source and tag undefined: MPICH's Status keeps the posted ones,
    Open MPI's says MPI_ANY_SOURCE and MPI_ANY_TAG)."""
    ch, op, flags, peer, tag, n, t0 = info
    cancelled = flags & F_CANCELLED and status is not None and _CANCELLED(status)
    if status is not None and op in RECEIVES and not cancelled:
        peer, tag, n = received(ch.peers, status)
    if flags & F_CANCELLED and not cancelled:
        flags &= ~F_CANCELLED   # the program asked; MPI did not (or could not say that it did) cancel
    write(ch, op, flags | extra | F_REQUEST, peer, tag, n, t0, t1)


def completion_call(ch, op, given, completed, t0, t1) -> None:
    """The record of a completion call (Wait, Testall...) that was given `given` requests."""
    write(ch, op, F_EMPTY if not completed else 0, given & U32, completed, 0, t0, t1)


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
    # Neighbourhood collectives (a topology's communicators): the send buffer this rank hands over.
    "Neighbor_allgather": (e.NEIGHBOR_ALLGATHER, False, ("sendbuf", "recvbuf"), None, "send"),
    "Neighbor_allgatherv": (e.NEIGHBOR_ALLGATHERV, False, ("sendbuf", "recvbuf"), None, "send"),
    "Neighbor_alltoall": (e.NEIGHBOR_ALLTOALL, False, ("sendbuf", "recvbuf"), None, "send"),
    "Neighbor_alltoallv": (e.NEIGHBOR_ALLTOALLV, False, ("sendbuf", "recvbuf"), None, "vector"),
    "Neighbor_alltoallw": (e.NEIGHBOR_ALLTOALLW, False, ("sendbuf", "recvbuf"), None, "w"),
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
    "neighbor_allgather": (e.NEIGHBOR_ALLGATHER, True, ("sendobj",), None, "pickled"),
    "neighbor_alltoall": (e.NEIGHBOR_ALLTOALL, True, ("sendobj",), None, "pickled"),
}
# The nonblocking (Iallreduce: op + 0x40) and persistent (Allreduce_init: op + 0x60, with an info
# argument) forms of every buffer collective: what they send is read as the blocking one's.
for _name, (_op, _pickled, _params, _root, _sends) in list(COLLECTIVES.items()):
    if not _pickled and _op + 0x40 in e.NONBLOCKING_COLLECTIVES:
        COLLECTIVES["I" + _name.lower()] = (_op + 0x40, False, _params, _root, _sends)
        COLLECTIVES[_name + "_init"] = (_op + 0x60, False, (*_params, "info"), _root, _sends)
INTRA_ONLY = frozenset({"Scan", "Exscan", "scan", "exscan", "Iscan", "Iexscan", "Scan_init", "Exscan_init"})


def _collective_role(op) -> str:
    return POSTING if op in e.NONBLOCKING_COLLECTIVES else PERSISTENT if op in e.PERSISTENT_COLLECTIVES else BLOCKING


COLLECTIVE_CALLS = tuple(CallSpec(name, op, COLLECTIVE, flags=e.PICKLED if pickled else 0, pickles=pickled, rounds=True,
                                  role=_collective_role(op), compiled=_collective_role(op) != PERSISTENT, sends=sends)
                         for name, (op, pickled, _, _, sends) in COLLECTIVES.items())
# Every traced call family of a communicator, by mpi4py method name.
CALLS = {spec.name: spec for spec in (*P2P_CALLS, *COLLECTIVE_CALLS)}


def p2p_methods(comm, cls, ch: MpiCollector, request_class, message_class, prequest_class) -> dict:
    """The traced point-to-point methods of `comm` (an instance of a subclass of mpi4py class
    `cls`), to be put in its __dict__: sends, receives, send-receives, posts, persistent init calls
    and probes, both forms. `request_class` wraps the requests posts return, `prequest_class`
    persistent requests, `message_class` matched probes."""
    context = CallContext(request_class=request_class, message_class=message_class, prequest_class=prequest_class)
    return {spec.name: traced_method(comm, getattr(cls, spec.name), spec, ch, context) for spec in P2P_CALLS
            if hasattr(cls, spec.name)}


def collective_methods(comm, cls, ch: MpiCollector, rank: int, size: int, request_class, prequest_class) -> dict:
    """The traced collective methods of `comm` (rank `rank` of `size`): blocking (both forms),
    nonblocking (their requests wrapped in `request_class`) and persistent (in `prequest_class`),
    numbering their rounds with one counter per communicator."""
    context = CallContext(size, rank, count(), request_class=request_class, prequest_class=prequest_class)
    return {spec.name: traced_method(comm, getattr(cls, spec.name), spec, ch, context)
            for spec in COLLECTIVE_CALLS if hasattr(cls, spec.name)}


# -- windows (one-sided) -------------------------------------------------------------------------

class WindowContext(CallContext):
    """What the readers of one window's calls read besides the collector: CallContext's (its size,
    this rank in it, the round counter of its creation, Fences and Free, the class that wraps the
    R-forms' requests), its members' window rank by world rank (`window_rank`), the run's world
    group (to read a group's world ranks), and the group of this rank's last Post and last Start
    (`groups`: {"post"/"start": (element, arg)}), which Win.Wait, Test and Complete name."""

    __slots__ = ("window_rank", "world_group", "first", "groups")

    def __init__(self, members, rank, world_group, request_class, first: int = 0):
        super().__init__(len(members), rank, count(), request_class)
        self.window_rank = {m: k for k, m in enumerate(members)}
        # `first`: the run's rank of this COMM_WORLD's rank 0 (a spawned process's world is not the run's)
        self.world_group, self.first, self.groups = world_group, first, {"post": (0, 0), "start": (0, 0)}

    def group_fields(self, group) -> tuple[int, int]:
        """(element, arg) of an MPI group of the window's ranks, as encoding.group_ranks reads them: how
        many, and a bit per window rank below GROUP_BITS. (0, 0) for what is no group (MPI then says)."""
        try:
            world = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), self.world_group)
        except (MPI.Exception, TypeError, AttributeError):
            return 0, 0
        bits = 0
        for rank in world:
            k = self.window_rank.get(rank + self.first, e.GROUP_BITS)
            if k < e.GROUP_BITS:
                bits |= 1 << k
        return len(world) & U32, bits


def targeting(ch, spec, context):
    """A call on a window with its own parameters (WINDOW_PARAMS): Put(origin, target_rank, target=None),
    Get, Accumulate, Get_accumulate, Fetch_and_op, Compare_and_swap, their R-forms; Lock(rank, lock_type,
    assertion), Unlock, Flush, Flush_local; Lock_all, Unlock_all, Flush_all, Flush_local_all, Sync; Fence
    and Free (the window's rounds). The target's world rank (the extractor's `peer` place; NONE without
    one), the origin buffer's bytes for a data call (`sends`: "send"), and for Lock the lock type."""
    peers, flags, params = ch.peers, spec.flags, WINDOW_PARAMS[spec.name]
    at, counted, locks = spec.reads.peer, spec.sends == "send", spec.op == e.WIN_LOCK
    shared = MPI.LOCK_SHARED

    def read(*args, **kwargs):
        if kwargs:
            args = _positional(params, args, kwargs)
        peer = _peer(peers, args[at]) if 0 <= at < len(args) else NONE
        n = buffer_bytes(args[0]) if counted and args else 0
        arg = e.SHARED_LOCK if locks and len(args) > 1 and args[1] == shared else 0
        return args, flags, peer, arg, n, None

    return read


def grouping(ch, spec, context):
    """Post(group, assertion=0) and Start: the group (kept for the calls that end the epoch); Win.Wait,
    Test (the last Post's group) and Complete (the last Start's): (element, arg) = encoding.group_ranks'."""
    params, groups, flags = WINDOW_PARAMS[spec.name], context.groups, spec.flags
    kind = "start" if spec.op in (e.WIN_START, e.WIN_COMPLETE) else "post"
    opens = spec.op in (e.WIN_POST, e.WIN_START)

    def read(*args, **kwargs):
        if kwargs:
            args = _positional(params, args, kwargs)
        if opens:
            groups[kind] = context.group_fields(args[0]) if args else (0, 0)
        element, arg = groups[kind]
        return args, flags, element, arg, 0, None

    return read


# mpi4py Win method -> its record's op, whether its records are the window's rounds (on its
# collective collector), and whether the compiled MpiCall runs its common forms.
_WINDOW = {
    "Put": (e.PUT, False, True), "Get": (e.GET, False, True), "Accumulate": (e.ACCUMULATE, False, True),
    "Get_accumulate": (e.GET_ACCUMULATE, False, True), "Fetch_and_op": (e.FETCH_AND_OP, False, True),
    "Compare_and_swap": (e.COMPARE_AND_SWAP, False, True), "Rput": (e.RPUT, False, True),
    "Rget": (e.RGET, False, True), "Raccumulate": (e.RACCUMULATE, False, True),
    "Rget_accumulate": (e.RGET_ACCUMULATE, False, True),
    "Lock": (e.WIN_LOCK, False, False), "Unlock": (e.WIN_UNLOCK, False, True),
    "Lock_all": (e.WIN_LOCK_ALL, False, True), "Unlock_all": (e.WIN_UNLOCK_ALL, False, True),
    "Flush": (e.WIN_FLUSH, False, True), "Flush_all": (e.WIN_FLUSH_ALL, False, True),
    "Flush_local": (e.WIN_FLUSH_LOCAL, False, True), "Flush_local_all": (e.WIN_FLUSH_LOCAL_ALL, False, True),
    "Sync": (e.WIN_SYNC, False, True), "Post": (e.WIN_POST, False, False), "Start": (e.WIN_START, False, False),
    "Complete": (e.WIN_COMPLETE, False, False), "Wait": (e.WIN_WAIT, False, False), "Test": (e.WIN_TEST, False, False),
    "Fence": (e.WIN_FENCE, True, True), "Free": (e.WIN_FREE, True, False), "free": (e.WIN_FREE, True, False),
}
_WIN = MPI.Win   # mpi4py's (MPI.Win names eventspace.mpi.interpose.Win while a program runs traced)
# Their parameters after self, from mpi4py's own signatures (keywords are put in place by them).
WINDOW_PARAMS = {name: signature(getattr(_WIN, name))[0] or () for name in _WINDOW}


def _window_calls() -> tuple[CallSpec, ...]:
    rows = []
    for name, (op, rounds, compiled) in _WINDOW.items():
        params = WINDOW_PARAMS[name]
        target = next((params.index(p) for p in ("target_rank", "rank") if p in params), -1)
        sends = "send" if op in e.RMA else "none"
        if op in e.GROUPED:
            rows.append(CallSpec(name, op, Extractor(grouping), TESTED if op == e.WIN_TEST else ASKED))
        else:
            rows.append(CallSpec(name, op, Extractor(targeting, peer=target), rounds=rounds, compiled=compiled,
                                 role=POSTING if name.startswith("R") else BLOCKING, sends=sends))
    return tuple(rows)


WINDOW_CALLS = _window_calls()


def window_methods(win, p2p: MpiCollector | None, coll: MpiCollector | None, context: WindowContext) -> dict:
    """The traced methods of window `win` (an instance of a subclass of mpi4py's MPI.Win), to be put in
    its __dict__: its rounds (Fence, Free) on its collective collector `coll`, every other call on its
    point-to-point collector `p2p` (None: a kind not collected)."""
    out = {}
    for spec in WINDOW_CALLS:
        ch = coll if spec.rounds else p2p
        if ch is not None:
            out[spec.name] = traced_method(win, getattr(_WIN, spec.name), spec, ch, context)
    return out


def window_made(ch: MpiCollector, context: WindowContext, op, n, t0, t1) -> None:
    """The record of a window's creation (its round 0), made from t0 to t1 with `n` bytes of this rank's memory."""
    r = next(context.rounds) & U32
    if ch.page.switches[ch.at]:
        write(ch, op, 0, NONE, r, min(n, U32), t0, t1)


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


_DEFAULTS = {"root": 0, "op": MPI.SUM, "recvcounts": None, "recvbuf": None, "info": MPI.INFO_NULL,
             "target": None, "target_disp": 0, "lock_type": MPI.LOCK_EXCLUSIVE, "assertion": 0}


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
