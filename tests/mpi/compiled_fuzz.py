"""The compiled MPI collectors (eventspace/collector_c/: MpiCall) fuzzed against the closures of
eventspace.mpi.collector they stand in for: any arguments, any result, any Status. Run as a program
(`python compiled_fuzz.py [examples]`, one process: MPI starts as a singleton, which pytest's own
process must not do); tests/mpi/test_mpi_compiled_fuzz.py runs it.

Each traced call is made twice, on a channel that runs compiled and on one that runs the closures,
each with its own trace element, with one stand-in for mpi4py's method (`call`) that behaves the
same for both: what the call got, what it returned or raised, the records written (but for their
times), the spills and the in-flight marks must agree.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import sys
import time

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mpi4py import MPI

from eventspace import _collector, trace
from eventspace.mpi import collector as mc
from eventspace.mpi import encoding as e
from eventspace.mpi import mpi4py_access
from eventspace.mpi.interpose import Request
from eventspace.table import Page
from pastset import TemplateMismatch, TupleServer

ANY_SOURCE, ANY_TAG, PROC_NULL = MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.PROC_NULL
SIZE = 3   # ranks of the communicator the calls are made on (world ranks 5, 6, 7)
_server = TupleServer("fuzz")
_names = itertools.count()


class Behaviour:
    """What the stand-in for an mpi4py method does, drawn once per call: what it returns or raises,
    the Status it fills (source, tag, bytes), the bytes it says it pickled."""

    def __init__(self, result, source, tag, count, pickled):
        self.result, self.source, self.tag, self.count, self.pickled = result, source, tag, count, pickled
        self.seen: list = []

    def __call__(self, name, args, status=None, asked=None, ranks=(), tags=()):
        self.seen.append((name, *["a Status" if isinstance(a, MPI.Status) else a for a in args]))
        # as mpi4py and MPI check them, on a communicator of SIZE ranks: a Status, a rank, a tag
        if status is not None and not isinstance(status, MPI.Status):
            raise TypeError(f"Argument 'status' has incorrect type (expected Status, got {type(status).__name__})")
        if any(operator.index(r) not in (*range(SIZE), PROC_NULL, ANY_SOURCE) for r in ranks):
            raise MPI.Exception(MPI.ERR_RANK)
        if any(not 0 <= operator.index(t) <= 2 ** 31 - 1 and t != ANY_TAG for t in tags):
            raise MPI.Exception(MPI.ERR_TAG)
        mc.PICKLED_BYTES.total += self.pickled
        if isinstance(status, MPI.Status):   # as MPI fills it: what was asked, where it was named
            source, tag = (operator.index(a) for a in asked)
            null = source == PROC_NULL
            status.Set_source(PROC_NULL if null else source if source >= 0 else self.source)
            status.Set_tag(ANY_TAG if null else tag if tag >= 0 else self.tag)
            status.Set_elements(MPI.BYTE, 0 if null else self.count)
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


behaviour: Behaviour


# Stand-ins with mpi4py's signatures (the compiled call reads them to place keyword arguments).
def Send(comm, buf, dest, tag=0):  # noqa: N802
    return behaviour("Send", (buf, dest, tag), ranks=(dest,), tags=(tag,))


def Recv(comm, buf, source=ANY_SOURCE, tag=ANY_TAG, status=None):  # noqa: N802
    return behaviour("Recv", (buf, source, tag, status), status, (source, tag), (source,), (tag,))


def Sendrecv(comm, sendbuf, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG,  # noqa: N802
             status=None):
    return behaviour("Sendrecv", (sendbuf, dest, sendtag, recvbuf, source, recvtag, status), status, (source, recvtag),
                     (dest, source), (sendtag, recvtag))


def Bcast(comm, buf, root=0):  # noqa: N802
    return behaviour("Bcast", (buf, root), ranks=(root,))


def Allreduce(comm, sendbuf, recvbuf, op=MPI.SUM):  # noqa: N802
    return behaviour("Allreduce", (sendbuf, recvbuf, op))


def bcast(comm, obj, root=0):
    return behaviour("bcast", (obj, root), ranks=(root,))


def channel(compiled: bool):
    element = _server.enter(f"t{next(_names)}", trace.FORMAT, keep=6)
    spills = []
    page = Page()
    page.bounds[1] = 3   # the drain's bound: a spill after the fourth record
    ch = mc.MpiCollector(1, _collector.RingAppender(element, True), page, 1, lambda: spills.append(1),
                         time.monotonic_ns, mc.peer_table([5, 6, 7][:SIZE]), _collector if compiled else None, 0)
    return ch, element, spills


def Irecv(comm, buf, source=ANY_SOURCE, tag=ANY_TAG):  # noqa: N802
    return behaviour("Irecv", (buf, source, tag), ranks=(source,), tags=(tag,))


def recv(comm, buf=None, source=ANY_SOURCE, tag=ANY_TAG, status=None):
    return behaviour("recv", (buf, source, tag, status), status, (source, tag), (source,), (tag,))


def irecv(comm, buf=None, source=ANY_SOURCE, tag=ANY_TAG):
    return behaviour("irecv", (buf, source, tag), ranks=(source,), tags=(tag,))


def sendrecv(comm, sendobj, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
    return behaviour("sendrecv", (sendobj, dest, sendtag, recvbuf, source, recvtag, status), status, (source, recvtag),
                     (dest, source), (sendtag, recvtag))


STAND_INS = {"Send": Send, "send": Send, "Isend": Send, "isend": Send, "Recv": Recv, "recv": recv, "Irecv": Irecv,
             "irecv": irecv, "Sendrecv": Sendrecv, "sendrecv": sendrecv, "Bcast": Bcast, "Allreduce": Allreduce,
             "bcast": bcast}


def traced(kind: str, ch, spec=None, rounds=None):
    """The collector of `kind` (its row of the call table, or `spec`) on collector `ch`: compiled
    (MpiCall) where `ch` runs compiled."""
    context = mc.CallContext(SIZE, 0, itertools.count() if rounds is None else rounds, Request)
    return mc.traced_method("the communicator", STAND_INS[kind], spec or mc.CALLS[kind], ch, context)


KINDS = list(STAND_INS)
INTS = st.one_of(st.integers(-3, 4), st.sampled_from([ANY_SOURCE, ANY_TAG, PROC_NULL, 2 ** 31, 2 ** 32, -(2 ** 63)]),
                 st.integers(), st.integers(-3, 4).map(np.int64), st.booleans())
ANY = st.one_of(INTS, st.none(), st.floats(), st.text(max_size=3), st.binary(max_size=8))
# message specs as mpi4py takes them ([buf, count, datatype], OSU's form, and the others), with
# predefined datatypes (sized in C) and others (the closure's), counts fair and foul
_DERIVED = MPI.INT.Create_contiguous(2).Commit()
_SPEC_BUFFERS = st.one_of(st.binary(max_size=40), st.integers(0, 9).map(lambda n: np.zeros(n, "i4")),
                          st.just(MPI.BOTTOM), st.none(), st.binary(max_size=8).map(memoryview))
_DATATYPES = st.sampled_from([MPI.BYTE, MPI.DOUBLE, MPI.INT, MPI.LONG_DOUBLE, _DERIVED, MPI.DATATYPE_NULL, None, 3])
_COUNTS = st.one_of(st.integers(-2, 40), st.sampled_from([2 ** 31, 2 ** 32, 2 ** 33 + 1, 2 ** 63 - 1]),
                    st.integers(0, 9).map(np.int64), st.booleans(), st.none(),
                    st.tuples(st.integers(-1, 9), st.integers(0, 3)), st.lists(st.integers(0, 9), max_size=2))
SPECS = st.one_of(st.tuples(_SPEC_BUFFERS, _COUNTS, _DATATYPES), st.tuples(_SPEC_BUFFERS, _DATATYPES),
                  st.tuples(_SPEC_BUFFERS, _COUNTS, st.integers(0, 3), _DATATYPES),
                  st.tuples(_SPEC_BUFFERS, _COUNTS)).flatmap(lambda t: st.sampled_from([list(t), t]))
BUFFERS = st.one_of(st.binary(max_size=40), st.binary(max_size=40).map(bytearray),
                    st.integers(0, 9).map(lambda n: np.zeros(n, "i4")), st.just(np.zeros((2, 3))),
                    st.integers(0, 9).map(lambda n: [np.zeros(n, "i4"), MPI.INT]), st.just(MPI.IN_PLACE),
                    SPECS,
                    st.binary(max_size=8).map(memoryview), ANY)
ARGUMENTS = st.one_of(st.lists(st.one_of(BUFFERS, INTS, ANY), max_size=8),
                      st.tuples(BUFFERS, INTS, INTS).map(list), st.tuples(BUFFERS).map(list))
KEYWORDS = st.dictionaries(st.sampled_from(["dest", "tag", "source", "status", "root", "sendtag", "recvtag", "op",
                                            "recvbuf", "buf", "bogus"]), st.one_of(INTS, BUFFERS), max_size=3)
RESULTS = st.one_of(st.just(None), st.just("request"), st.sampled_from([ValueError("mpi"), MPI.Exception(MPI.ERR_RANK)]),
                    ANY)


def outcome(call):
    try:
        return "ok", call()
    except BaseException as exc:   # noqa: BLE001 - compared
        return "raised", exc


def written(element):
    records = trace.decode(element.read_range(0, 1 << 40)[1]).copy()
    records["t_start"], records["t_end"] = 0, 0
    return element.first(), element.last(), records.tobytes()


def agree(kind, args, keywords, result, source, tag, count, pickled, with_status):
    global behaviour
    if isinstance(result, str) and result == "request":
        result = MPI.Request()   # one for both calls: what a post wraps
    got = {}
    for compiled in (True, False):
        ch, element, spills = channel(compiled)
        fn = traced(kind, ch)
        assert (type(fn).__name__ == "MpiCall") == compiled, (kind, type(fn))
        behaviour = Behaviour(result, source, tag, count, pickled)
        given_args = [MPI.Status() if with_status and a is None else a for a in args]   # a Status of its own
        how, value = outcome(lambda: fn(*given_args, **keywords))
        got[compiled] = how, value, behaviour.seen, written(element), len(spills), in_flight(ch)
        _server.delete(element.name)
    (how, value, seen, records, spills, marks), (pure_how, expected, pure_seen, pure_records, pure_spills,
                                                 pure_marks) = got[True], got[False]
    assert how == pure_how, (kind, value, expected)
    if how == "raised":
        assert type(value) is type(expected), (kind, value, expected)
    elif isinstance(expected, Request) and hasattr(expected, "info"):
        assert type(value) is Request and value.info[1:6] == expected.info[1:6], (value.info, expected.info)
    else:
        assert value is expected, (value, expected)
    assert seen == pure_seen, (kind, seen, pure_seen)
    assert records == pure_records, (kind, trace.decode(records[2]), trace.decode(pure_records[2]))
    assert (spills, marks) == (pure_spills, pure_marks)


def in_flight(ch) -> tuple:
    """What `ch`'s slot of the table says is in flight: its start, and the mark it left (read as
    the table reads it: only while the start is not 0, but left behind to compare)."""
    mark = ch.page.marks[ch.at]
    return ch.page.starts[ch.at], tuple(mark) if mark else 0


def both_raise(kind, spoil, error, args=(b"abc", 1, 2), offset_ns=0):
    """`spoil(channel)` done to a channel that runs compiled and to one that runs the closures: the
    traced call raises `error` on both, and neither ends its process."""
    global behaviour
    for compiled in (True, False):
        ch, element, _ = channel(compiled)
        if offset_ns:
            ch.offset_ns, ch.clock = offset_ns, lambda: time.monotonic_ns() + offset_ns
        fn = traced(kind, ch)
        spoil(ch)
        behaviour = Behaviour(None, 0, 0, 0, 0)
        how, value = outcome(lambda: fn(*args))
        assert how == "raised" and isinstance(value, error), (kind, compiled, value)
        _server.delete(element.name)


def edges() -> None:
    """What the compiled calls read from what they share with Python, and the values they are
    made with, checked where the unchecked reads crashed or wrapped."""
    both_raise("Send", lambda ch: ch.page.marks.clear(), IndexError)     # the page's marks, emptied
    both_raise("Bcast", lambda ch: ch.page.marks.clear(), IndexError, args=(b"abc", 0))
    # the bytes pickled so far: a count per thread that cannot be taken away, and the one a compiled
    # pickle form reads (a count of another kind is refused when the call is made, not read wrong)
    assert isinstance(outcome(lambda: delattr(mc.PICKLED_BYTES, "total"))[1], AttributeError)
    ch, element, _ = channel(True)
    kept, mc.PICKLED_BYTES = mc.PICKLED_BYTES, mc.PickleCount()
    how, value = outcome(lambda: traced("send", ch))
    mc.PICKLED_BYTES = kept
    assert how == "raised" and isinstance(value, TypeError), value
    _server.delete(element.name)
    # a clock offset that puts the times before 0: refused as the trace element refuses it
    both_raise("Send", lambda ch: None, TemplateMismatch, offset_ns=-(2 ** 62))
    # a round counter that yields no int
    for compiled in (True, False):
        ch, element, _ = channel(compiled)
        fn = traced("Bcast", ch, rounds=iter(["round"]))
        assert isinstance(outcome(lambda: fn(b"abc", 0))[1], TypeError), compiled
        _server.delete(element.name)
    # op codes and flags that no record holds: refused when the call is made, not wrapped to 16 bits
    ch, element, _ = channel(True)
    for op, flags in ((2 ** 64 + e.SEND, 0), (2 ** 16, 0), (e.SEND, 2 ** 64), (e.SEND, -1)):
        how, value = outcome(lambda: traced("Send", ch, dataclasses.replace(mc.CALLS["Send"], op=op, flags=flags)))
        assert how == "raised" and isinstance(value, ValueError), (op, flags, value)
    for op in (2 ** 64 + e.WAIT, -1):
        how, value = outcome(lambda: _collector.RequestWait(Request.Wait, Request.Wait, Request, mc.MpiCollector, op, 0, 0,
                                                            0, 0, (), MPI.Status))
        assert how == "raised" and isinstance(value, ValueError), (op, value)
    _server.delete(element.name)
    # only mpi4py's PyMPIStatus_Get is called as one (a compiled receive calls what it is given)
    import datetime   # noqa: F401 - its C API capsule: a capsule of another kind
    how, value = outcome(lambda: _collector.use_mpi_status(sys.modules["datetime"].datetime_CAPI, 1, 0, 4))
    assert how == "raised" and isinstance(value, ValueError), value


def specs() -> None:
    """Every message spec form (SPECS' parts, each drawn rarely by the fuzz) sent by every sending
    kind, compiled against the closures."""
    buffers = [b"x" * 20, np.zeros(5, "i4"), np.zeros(0, "i4"), memoryview(b"abcdefgh"), None, MPI.BOTTOM]
    datatypes = [MPI.BYTE, MPI.DOUBLE, MPI.INT, _DERIVED, None]
    counts = [0, 3, 7, -1, 2 ** 32, 2 ** 63 - 1, np.int64(3), True, (3, 1), [3], None]
    forms = [[buf, dt] for buf in buffers for dt in datatypes]
    forms += [[buf, c, dt] for buf in buffers[:2] for c in counts for dt in datatypes]
    forms += [[buf, c, 1, dt] for buf in buffers[:2] for c in counts[:4] for dt in datatypes]
    forms += [tuple(f) for f in forms]
    for spec in forms:
        for kind, args in (("Send", [spec, 1, 2]), ("Isend", [spec, 1, 2]), ("Sendrecv", [spec, 1]),
                           ("Bcast", [spec, 0]), ("Allreduce", [spec, None])):
            agree(kind, args, {}, "request" if kind == "Isend" else None, 0, 0, 0, 0, False)


def main(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(kind=st.sampled_from(KINDS), args=ARGUMENTS, keywords=st.one_of(st.just({}), KEYWORDS),
           result=RESULTS, source=st.integers(0, 2), tag=st.integers(0, 2 ** 31 - 1),
           count=st.integers(0, 2 ** 31 - 1), pickled=st.integers(0, 2 ** 33), with_status=st.booleans())
    def fuzz(**drawn):
        agree(**drawn)

    edges()
    specs()
    fuzz()
    print(f"{examples} examples: the compiled MPI collectors agree with the closures")


def without_private() -> None:
    """mpi4py without the private names eventspace.mpi.mpi4py_access uses (a later mpi4py may drop
    them): each use falls back (receives read the Status's methods; the pickle-reduction duplicate is
    left to mpi4py's first call), and the calls below still agree."""
    assert mpi4py_access.status_getter() is not None and mpi4py_access.status_size() is not None
    mpi4py_access.without_private()
    assert all(not hasattr(MPI, name) for name in mpi4py_access.PRIVATE)
    assert mpi4py_access.status_getter() is None and mpi4py_access.handle_size() is None
    assert mpi4py_access.status_size() is None
    assert mc.count_in_c(_collector) is False
    mpi4py_access.hold_no_lock(MPI.COMM_WORLD)   # nothing to do, and no error
    print("without mpi4py's private names: the Status's methods")


if __name__ == "__main__":
    if "--without-private" in sys.argv:
        sys.argv.remove("--without-private")
        without_private()
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
