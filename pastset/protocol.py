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

from .errors import ERRORS_BY_NAME, LimitExceeded, PastSetError, ProtocolError

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
ELEMENTS = 13    # -                                          -> [[name, template, first, last, keep, delta, nbytes], ...]
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
    plus some 64 + 32 bytes a field for the objects, and 64 bytes for every object in an `any`
    field), and replies of a megabyte or more until ZeroMQ has sent them. Elements may use all of
    it but the room of two of the biggest replies (2 x max_reply, at most a quarter), so that what
    they hold can always be read. In-process callers are held to it as remote ones are (one table,
    one process). Smaller replies and the request being decoded are not counted.

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

    __slots__ = ("data",)

    def __init__(self, obj):
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
    """(rid, op, args) from a request frame; raises ProtocolError for anything malformed."""
    if len(frame) > limits.max_frame:
        raise LimitExceeded(f"request of {len(frame)} bytes exceeds the {limits.max_frame}-byte frame limit")
    # Decoding a frame of many small lists or maps runs the cyclic garbage collector again and again
    # (five times the decoding itself): it is off while a big frame is decoded, as msgpack advises.
    pause = len(frame) > _BIG_FRAME and gc.isenabled()
    if pause:
        gc.disable()
    try:
        request = msgpack.unpackb(frame, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise ProtocolError(f"request is not valid msgpack ({type(exc).__name__}: {exc})") from None
    finally:
        if pause:
            gc.enable()
    if not isinstance(request, list) or len(request) < 2 or not isinstance(request[0], int) \
            or not isinstance(request[1], int):
        raise ProtocolError("a request is a msgpack array [request_id, op, *args]")
    return request[0], request[1], request[2:]


def error_reply(rid, exc: BaseException) -> bytes:
    name = type(exc).__name__ if isinstance(exc, PastSetError) else "ProtocolError"
    return pack([rid, ERROR, name, str(exc)])


def error_of(name, message) -> PastSetError:
    """The error a reply names, by name: unknown names become ProtocolError, never anything else."""
    cls = ERRORS_BY_NAME.get(name, ProtocolError) if name.__class__ is str else ProtocolError
    return cls(message)
