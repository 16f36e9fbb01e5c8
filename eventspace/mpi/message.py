"""How many bytes an mpi4py buffer argument moves, as mpi4py reads it (buffer, or [buffer, count, displ, datatype])."""

from __future__ import annotations

import operator

from mpi4py import MPI
from numpy import ndarray

U32 = 0xFFFFFFFF
_Datatype = MPI.Datatype
_BOTTOM, _IN_PLACE = MPI.BOTTOM, MPI.IN_PLACE


def buffer_bytes(msg, blocks: int = 1) -> int:
    """Bytes of a message as mpi4py reads it: count x the datatype's size, or the whole buffer's
    size; for a vector message over `blocks` ranks (Scatterv's or Alltoallv's send buffer), the
    sum of its counts x the size. 0 for None, MPI.IN_PLACE or a message mpi4py would refuse
    (the call itself then says what is wrong). At most 2**32 - 1."""
    kind = type(msg)
    if kind is ndarray:
        n = msg.nbytes
    elif kind is bytes or kind is bytearray:
        n = len(msg)
    else:
        n = _simple(msg, blocks)
    return n if n < U32 else U32


def vector_w_bytes(msg) -> int:
    """Bytes of an Alltoallw message [buffer, counts, displs, datatypes]: sum of count x size."""
    try:
        if len(msg) == 4:
            _, counts, _, types = msg
        elif len(msg) == 3:
            _, (counts, _), types = msg
        else:
            return 0
        n = sum(int(c) * t.Get_size() for c, t in zip(counts, types))
    except (TypeError, ValueError, AttributeError, MPI.Exception):
        return 0
    return n if n < U32 else U32


def _simple(msg, blocks: int) -> int:
    try:
        if msg is None or msg is _IN_PLACE:
            return 0
        if not isinstance(msg, (list, tuple)):
            return _nbytes(msg)
        buf, count, datatype = msg[0], None, None
        if len(msg) == 2:
            count = msg[1]
            if isinstance(count, _Datatype):
                count, datatype = None, count
            elif isinstance(count, (list, tuple)) and blocks == 1:
                count = count[0]
            elif isinstance(count, tuple):
                count = count[0]
        elif len(msg) == 3:
            count, datatype = msg[1], msg[2]
            if isinstance(count, (list, tuple)) and (blocks == 1 or isinstance(count, tuple)):
                count = count[0]
        elif len(msg) == 4:
            count, datatype = msg[1], msg[3]
        else:
            return 0
        if count is None:
            if buf is None or buf is _BOTTOM:
                return 0
            return _nbytes(buf) if datatype is None else _nbytes(buf) // max(1, datatype.Get_extent()[1]) * datatype.Get_size()
        try:
            total = operator.index(count) * blocks
        except TypeError:
            total = sum(operator.index(c) for c in count)
        return total * (datatype.Get_size() if datatype is not None else _itemsize(buf))
    except (TypeError, ValueError, AttributeError, IndexError, MPI.Exception):
        return 0


def _nbytes(buf) -> int:
    if isinstance(buf, ndarray):
        return buf.nbytes
    return memoryview(buf).nbytes


def _itemsize(buf) -> int:
    if isinstance(buf, ndarray):
        return buf.itemsize
    return memoryview(buf).itemsize
