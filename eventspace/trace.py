"""The trace tuple: 36 bytes per event, packed by collectors, decoded a batch at a time with numpy."""

from __future__ import annotations

import struct

import numpy as np

from paths import operation as op

from . import opcodes

# op (u16), flags (u16), collector (u32), element (u32), arg (u32), nbytes (u32), t_start, t_end (u64 ns)
FORMAT = "=HHIIIIQQ"
RECORD = struct.Struct(FORMAT)
SIZE = RECORD.size
assert SIZE == 36

# Native byte order, as the struct format ("=").
DTYPE = np.dtype([
    ("op", "=u2"), ("flags", "=u2"), ("collector", "=u4"), ("element", "=u4"),
    ("arg", "=u4"), ("nbytes", "=u4"), ("t_start", "=u8"), ("t_end", "=u8"),
])
FIELDS = DTYPE.names
assert DTYPE.itemsize == SIZE

# Flags.
ERROR = 1       # the operation raised (t_end is when it did)
TREE = 2        # `element` holds a tree index, not an element index
SUMMARY = 4     # a reduce:count/sum record: `arg` counts the events it stands for
SYSTEM = 8      # a system summary record: `op` is a metric (METRICS), its value is `arg` + `nbytes` << 32
CLASS = 16      # an equivalence class record of a `classes` stage (eventspace.classes)
HISTOGRAM = 32  # a histogram bucket record of a `histogram` stage (eventspace.histogram)

# What a SYSTEM record measures, by its `op` (eventspace.system): codes apart from PATHS's, so that
# filters and archives name them as they name operations (`filter:op == rss_bytes`).
METRICS = {
    64: "cpu_user_ns", 65: "cpu_system_ns", 66: "rss_bytes", 67: "voluntary_ctx", 68: "involuntary_ctx",
    69: "msgs_in", 70: "bytes_in", 71: "msgs_out", 72: "bytes_out",
}

# Operation codes are PATHS's (paths.operation), system metrics' (64-72) and, from 0x0100, MPI calls'
# (eventspace.opcodes): one name space for paths, MPI programs and traces.
OP_NAMES = dict(op.NAMES) | METRICS | opcodes.NAMES
OP_CODES = {name: code for code, name in OP_NAMES.items()}
assert len(OP_CODES) == len(OP_NAMES), "a metric code names a PATHS operation too"


def decode(data: bytes | bytearray | memoryview) -> np.ndarray:
    """A structured array (DTYPE) over a batch of packed records; one `frombuffer`, no copy."""
    if len(data) % SIZE:
        raise ValueError(f"a trace batch is a whole number of {SIZE}-byte records, got {len(data)} bytes")
    return np.frombuffer(data, dtype=DTYPE)


def encode(records: np.ndarray) -> bytes:
    """The packed bytes of a structured array of records (the inverse of `decode`). Records that
    `decode` made from a whole batch are that batch: a join forwards what its children sent
    without copying it again."""
    base = records.base
    if (base.__class__ is bytes and records.dtype == DTYPE and records.nbytes == len(base)
            and records.flags.c_contiguous):
        return base   # whole, contiguous, and read-only: the batch it was decoded from
    return np.ascontiguousarray(records, dtype=DTYPE).tobytes()


def empty() -> np.ndarray:
    return np.empty(0, dtype=DTYPE)


def concat(batches: list[np.ndarray]) -> np.ndarray:
    """The records of several batches in one array, in order.

    Joined as bytes: `np.concatenate` on a structured dtype promotes the dtypes field by field
    on every call, which costs more than copying a few thousand records, and a scope's tree
    joins batches at every join of every pull (benchmarks/scope_bench.py).
    """
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return empty()
    return decode(b"".join(encode(b) for b in batches))
