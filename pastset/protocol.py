"""The wire protocol: msgpack frames, operation codes, and the limits a node server enforces.

A request is one frame, a msgpack array `[rid, op, *args]`; its reply is one frame,
`[rid, OK, result]` or `[rid, ERROR, error_class_name, message]`. `rid` is the caller's
request id (an integer), echoed so that a client can match replies to requests. Nothing on
the wire is ever pickled.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import msgpack

from .errors import ERRORS_BY_NAME, EventSpaceError, LimitExceeded, PastSetError, ProtocolError

OK, ERROR = 0, 1

# Operation codes (small ints, so the server dispatches by list index).
PING = 0         # -                                          -> [server name, max_frame]
ENTER = 1        # name, template spec, keep, delta          -> [eid, spec, keep, delta]
LOOKUP = 2       # name                                       -> [eid, spec, keep, delta]
MOVE = 3         # eid, values, timeout                       -> index
OBSERVE = 4      # eid, index|None, timeout                   -> values
FIRST = 5        # eid                                        -> index
LAST = 6         # eid                                        -> index
DELTA = 7        # eid, n|None                                -> delta
AXE = 8          # eid, index                                 -> new first
READ_RANGE = 9   # eid, lo, hi                                -> [start, items]
LATEST = 10      # eid, n                                     -> [start, items]
LATEST_MANY = 11 # [eid or name, ...], n                      -> [[start, items], ...]
DELETE = 12      # name                                       -> None
ELEMENTS = 13    # start name|None, most                     -> [[[name, template, first, last, keep, delta, nbytes], ...], next name|None]
FIND = 14        # eid, pattern, remove, timeout              -> values
CALL = 15        # name, [args...]                            -> what the hosted callable returns
RANGE_MANY = 16  # [eid or name, ...], [lo, ...], hi          -> [[start, items], ...]
OBSERVE_INDEXED = 17  # eid, index|None, timeout              -> [index, values]
LATEST_RECORDS = 18   # [eid or name, ...], n (binary elements) -> bytes: each one's newest n records, in order
LATEST_RECORDS_COUNTED = 19  # as LATEST_RECORDS                -> [counts (a u32 LE per element), bytes]

OP_NAMES = {
    PING: "ping", ENTER: "enter", LOOKUP: "lookup", MOVE: "move", OBSERVE: "observe",
    FIRST: "first", LAST: "last", DELTA: "delta", AXE: "axe", READ_RANGE: "read_range",
    LATEST: "latest", LATEST_MANY: "latest_many", DELETE: "delete", ELEMENTS: "elements",
    FIND: "find", CALL: "call", RANGE_MANY: "range_many", OBSERVE_INDEXED: "observe_indexed",
    LATEST_RECORDS: "latest_records", LATEST_RECORDS_COUNTED: "latest_records_counted",
}


@dataclass(frozen=True)
class Limits:
    """What one node server accepts; each breach is answered with a `LimitExceeded` error that names
    the limit, its value and what to do.

    Memory: `max_memory` is one budget for everything the server holds on its callers' behalf, taken
    before it is allocated: each element's own objects and template (about 2 KiB), the rings of binary
    elements (record size x slots: keep + 1, or delta), the tuples typed elements hold (their payload,
    plus some 64 + 32 bytes a field for the objects, and what the objects of an `any` field take, by
    sys.getsizeof), and every reply from when it is handed to ZeroMQ until ZeroMQ has written it out (or
    dropped it with its client). Elements may use all of it but the room of two of the biggest
    replies (2 x max_reply, at most a quarter), so that what they hold can always be read. In-process
    callers are held to it as remote ones are (one table, one process). The request being decoded
    is not counted: it is at most `max_frame` bytes, of at most `max_objects` values (a range_many of
    `max_batch` elements names 200,000), so at most some 50 MB of Python objects, decoded in a few
    hundredths of a second.

    Replies: one reply is at most `max_reply` bytes, and one client may leave at most twice that
    unread; past either, or past the budget, a request is answered with LimitExceeded.

    Shares: one client (one connection; `pastset.Client` opens one per thread) may park
    `max_parked_per_client` blocked requests, have `max_deferred_per_client` hosted calls waiting on
    other servers, and create `max_elements_per_client` elements; the last tenth of `max_parked`, and
    of `max_calls` for deferred calls, is kept for clients with few of them. See `TupleServer`.

    The defaults hold the repository's workloads with room to spare. The largest: the paper layout
    (pathmaps/windtunnel-paper.yaml) puts 1,841 trace rings of 201 x 36 bytes (13 MB) and 840 border-
    row elements (delta 2, rows of at most 24 KB at the large size: 40 MB) on 8 nodes; a monitor's
    backlog read of every trace element of one node is a reply of a few MB; benchmarks/pastset_bench.py
    enters 1,952 elements from one client.
    """

    max_frame: int = 16 * 1024 * 1024     # bytes in one request frame
    max_objects: int = 300_000            # values one request decodes to: its lists and maps, and their items
    max_elements: int = 100_000           # elements hosted by one server
    max_elements_per_client: int = 10_000  # of them, created by one client (connection) and not deleted
    max_name: int = 256                   # characters in an element name
    max_parked: int = 10_000              # blocked requests parked at once, per server
    max_parked_per_client: int = 1_000    # of them, parked by one client (connection)
    max_batch: int = 100_000              # elements named in one latest_many
    max_calls: int = 512                  # hosted calls running at once (each holds a worker thread), and
                                          # deferred calls carried at once (see TupleServer.host)
    max_deferred_per_client: int = 32     # of those deferred, made by one client (connection)
    max_ring: int = 64 * 1024 * 1024      # bytes one bounded binary ring allocates (record size x slots)
    max_memory: int = 1024 * 1024 * 1024  # bytes the server holds for elements and replies (see above)
    max_reply: int = 64 * 1024 * 1024     # bytes in one reply frame


_BIG_FRAME = 64 * 1024
# The most elements one ELEMENTS reply lists: a page costs the server's loop a few milliseconds.
ELEMENTS_PAGE = 1_000


def pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def encodable(value) -> bool:
    """Whether `value` can travel the wire (as an argument or result of a hosted call)."""
    try:
        pack(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


class Packed:
    """An argument encoded once, for a request sent again and again (a monitor's list of trace
    element names): `pack_request` splices its bytes instead of encoding it on every send."""

    __slots__ = ("obj", "data")

    def __init__(self, obj):
        self.obj = obj
        self.data = pack(obj)


_array_header = msgpack.Packer().pack_array_header


def pack_request(rid: int, op: int, args, pack=pack) -> bytes:
    """The frame of request [rid, op, *args], encoded by `pack`; arguments given as `Packed` are
    not encoded again."""
    for a in args:
        if a.__class__ is Packed:
            return b"".join([_array_header(2 + len(args)), pack(rid), pack(op),
                             *(a.data if a.__class__ is Packed else pack(a) for a in args)])
    return pack([rid, op, *args])


def unpack_request(frame: bytes, limits: Limits):
    """(rid, op, args) from a request frame; LimitExceeded past `max_frame` or `max_objects`,
    ProtocolError for anything else malformed."""
    size = len(frame)
    if size > limits.max_frame:
        raise LimitExceeded(f"request of {size} bytes exceeds the {limits.max_frame}-byte frame limit")
    request = decode(frame, limits.max_objects, "request")
    if not isinstance(request, list) or len(request) < 2 or not isinstance(request[0], int) \
            or not isinstance(request[1], int):
        raise ProtocolError("a request is a msgpack array [request_id, op, *args]")
    return request[0], request[1], request[2:]


def decode(frame: bytes, most: int, what: str):
    """The value of one msgpack frame (`what` it is, for errors), with at most `most` values in its
    lists and maps (a map's keys and values both count). Each is a Python object of 8 to 100 bytes
    or so, and an empty map takes 64 bytes for one byte of frame: a frame of 16 MiB could otherwise
    make 16 million dicts, a gigabyte built in a second. A list or map declared longer is refused
    before it is made; in a frame of over _BIG_FRAME bytes (a smaller one holds fewer values than
    that), values are counted as their lists and maps are built, and decoding stops at the first
    list or map that takes the count past `most` (so at most twice `most` values are built).
    LimitExceeded naming Limits.max_objects then; ProtocolError for a frame that is not msgpack."""
    if len(frame) <= _BIG_FRAME:   # every request and reply of a round trip: no hooks, no pause
        try:
            return _unpackb(frame, raw=False, strict_map_key=True, use_list=True, max_array_len=most,
                            max_map_len=most // 2)
        except Exception as exc:  # msgpack raises several unrelated types for bad input
            raise _undecodable(exc, most, what) from None
    # Decoding a frame of many small lists or maps runs the cyclic garbage collector again and again
    # (five times the decoding itself): it is off while a big frame is decoded, as msgpack advises.
    pause = gc.isenabled()
    if pause:
        gc.disable()
    try:
        return _unpackb(frame, raw=False, strict_map_key=True, use_list=True, max_array_len=most,
                        max_map_len=most // 2, **_Count(most).hooks())
    except _TooMany:
        raise LimitExceeded(f"{what} holds more than {most:,} values in its lists and maps (Limits.max_objects); "
                            "send fewer at once") from None
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise _undecodable(exc, most, what) from None
    finally:
        if pause:
            gc.enable()


_unpackb = msgpack.unpackb


def _undecodable(exc: Exception, most: int, what: str) -> ProtocolError:
    """The error of a frame msgpack could not decode (it raised `exc`)."""
    if exc.__class__ is ValueError and "exceeds max_" in str(exc):   # a list or map declared longer
        return LimitExceeded(f"{what} holds a list or map of more than {most:,} values "
                             f"(Limits.max_objects); send fewer at once")
    why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return ProtocolError(f"malformed {what}: not msgpack ({why})")


def request_id(frame: bytes):
    """The request id at the head of a frame that may not decode whole (too big, too many values,
    malformed further on), so that its error reply reaches the request that waits for it; None if
    the head is not `[int, ...`."""
    head = msgpack.Unpacker(raw=False, max_buffer_size=64)
    head.feed(frame[:32])
    try:
        head.read_array_header()
        rid = head.unpack()
    except Exception:  # msgpack raises several unrelated types for bad input
        return None
    return rid if rid.__class__ is int else None


class _TooMany(Exception):
    """Raised by `_Count`'s hooks to stop msgpack at the first value past the limit."""


class _Count:
    """msgpack hooks that count the values of the lists and maps a frame decodes to, as they are built."""

    __slots__ = ("left",)

    def __init__(self, most: int):
        self.left = most

    def hooks(self) -> dict:
        return {"list_hook": self.items, "object_hook": self.pairs}

    def items(self, made: list):
        self.left -= len(made)
        if self.left < 0:
            raise _TooMany
        return made

    def pairs(self, made: dict):
        self.left -= 2 * len(made)
        if self.left < 0:
            raise _TooMany
        return made


def unpack_reply(raw: bytes, most: int) -> list:
    """[rid, OK, result] or [rid, ERROR, error class name, message] from a reply frame, decoded with at
    most `most` values (see `decode`); ProtocolError (or LimitExceeded) saying what is wrong with one
    that is not such a reply."""
    reply = decode(raw, most, "reply")
    if reply.__class__ is not list or len(reply) < 3 or not (reply[0] is None or reply[0].__class__ is int):
        raise ProtocolError(f"malformed reply: not [request_id, status, ...] but {reply!r:.60}")
    if reply[1] == OK and len(reply) == 3:
        return reply
    if reply[1] == ERROR and len(reply) == 4 and reply[2].__class__ is str and reply[3].__class__ is str:
        return reply
    raise ProtocolError(f"malformed reply: not [request_id, {OK}, result] nor [request_id, {ERROR}, error, "
                        f"message] but {reply!r:.60}")


def _int(x) -> bool:
    return x.__class__ is int


def _bound(x) -> bool:
    return x is None or x.__class__ is int


def _batch(x) -> bool:
    """[start, items]: one bytes of records, or a list of tuples (None where one was taken)."""
    return (x.__class__ is list and len(x) == 2 and _int(x[0])
            and (x[1].__class__ is bytes or x[1].__class__ is list
                 and all(i is None or i.__class__ is list for i in x[1])))


def _row(x) -> bool:
    """An ELEMENTS row: [name, template, first, last, keep, delta, nbytes]."""
    return (x.__class__ is list and len(x) == 7 and x[0].__class__ is str and x[1].__class__ is str
            and _int(x[2]) and _int(x[3]) and _bound(x[4]) and _bound(x[5]) and _int(x[6]))


def _element(x) -> bool:
    """[eid, template spec, keep, delta]."""
    return (x.__class__ is list and len(x) == 4 and _int(x[0]) and x[1].__class__ in (str, list)
            and _bound(x[2]) and _bound(x[3]))


# op -> whether a result has the shape its op's replies have (a hosted call's may be anything).
_RESULTS = {
    PING: lambda x: x.__class__ is list and len(x) == 2 and x[0].__class__ is str and _int(x[1]),
    ENTER: _element, LOOKUP: _element, MOVE: _int, OBSERVE: lambda x: x.__class__ is list,
    FIRST: _int, LAST: _int, DELTA: _bound, AXE: _int, READ_RANGE: _batch, LATEST: _batch,
    LATEST_MANY: lambda x: x.__class__ is list and all(map(_batch, x)), DELETE: lambda x: x is None,
    ELEMENTS: lambda x: (x.__class__ is list and len(x) == 2 and x[0].__class__ is list and all(map(_row, x[0]))
                         and (x[1] is None or x[1].__class__ is str)),
    FIND: lambda x: x.__class__ is list, CALL: lambda x: True,
    RANGE_MANY: lambda x: x.__class__ is list and all(map(_batch, x)),
    OBSERVE_INDEXED: lambda x: x.__class__ is list and len(x) == 2 and _int(x[0]) and x[1].__class__ is list,
    LATEST_RECORDS: lambda x: x.__class__ is bytes,
    LATEST_RECORDS_COUNTED: lambda x: (x.__class__ is list and len(x) == 2 and x[0].__class__ is bytes
                                       and x[1].__class__ is bytes),
}


def fits(op: int, result) -> bool:
    """Whether `result` has the shape of a result of `op` (see the operation codes)."""
    return _RESULTS[op](result)


def check_result(op: int, result) -> None:
    """ProtocolError unless `result` has the shape of a result of `op`."""
    if not _RESULTS[op](result):
        raise ProtocolError(f"malformed reply to {OP_NAMES[op]}: {result!r:.60}")


def unknown_operation(op) -> ProtocolError:
    """What a request of an operation code that is none of the protocol's is answered with."""
    return ProtocolError(f"unknown operation {op}; known: {sorted(OP_NAMES)}")


def wrong_count(op: int, arity: int, got: int) -> ProtocolError:
    """What a request of `op` with `got` arguments is answered with, where it takes `arity`."""
    return ProtocolError(f"{OP_NAMES[op]} takes {arity} arguments, got {got}")


def bad_arguments(op, exc: Exception) -> ProtocolError:
    """What a request is answered with whose arguments its operation `op` cannot take (they made it
    fail with `exc`, an error that is not a PastSetError): remotely and in-process alike."""
    return ProtocolError(f"bad arguments for {OP_NAMES.get(op, op)}: {type(exc).__name__}: {exc}")


def error_reply(rid, exc: BaseException) -> bytes:
    name = type(exc).__name__ if isinstance(exc, EventSpaceError) else "ProtocolError"
    return pack([rid, ERROR, name, str(exc)])


def error_of(name, message) -> EventSpaceError:
    """The error a reply names, by name: unknown names become ProtocolError, never anything else."""
    cls = ERRORS_BY_NAME.get(name, ProtocolError) if name.__class__ is str else ProtocolError
    return cls(message)
