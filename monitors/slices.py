"""What an exported trace shows of a record: its slice's name and arguments, and the flows: from each
move to the observes that read its tuple, and from each MPI send to the receive that got it."""

from __future__ import annotations

import numpy as np

from eventspace import trace
from eventspace.catalogue import Catalogue, Entry
from eventspace.mpi.matching import message_pairs

# A flow ends on an instant of this name where the observe returned (its t_end): a flow binds to
# a slice and a viewer draws its arrow to the slice's start, and an observe often began blocking
# before the move it waited for, so an arrow into the observe itself would point back in time.
READ = "read"
ROLE_RANK = {"source": 0, "stage": 1, "sink": 2}   # a flow joins the outermost record of an operation

_MOVE, _OBSERVE = trace.OP_CODES["move"], trace.OP_CODES["observe"]
_NO_MATCH = trace.ERROR | trace.TREE | trace.SUMMARY


def slice_name(op: int, flags: int) -> str:
    """The op's name (`op N` for a code PATHS does not name), `NAME [error]` if it raised."""
    name = trace.OP_NAMES.get(op, f"op {op}")
    return f"{name} [error]" if flags & trace.ERROR else name


def collector_args(cid: int, entry: Entry | None) -> dict:
    """The arguments every record of collector `cid` shares: collector, and (for a collector the
    catalogue knows) role, tree, element and path where they apply, in that order."""
    args: dict = {"collector": cid}
    if entry is not None:
        args["role"] = entry.role
        if entry.tree:
            args["tree"] = entry.tree
        if entry.element:
            args["element"] = entry.element
        if entry.path:
            args["path"] = entry.path
    return args


def record_args(op: int, flags: int, arg: int, nbytes: int) -> dict:
    """The arguments of one record, after its collector's: `summary_of` (a SUMMARY record's count),
    `index` (the tuple a move or observe touched) or `arg`; `nbytes`; `error: True` if it raised."""
    if flags & trace.SUMMARY:
        args = {"summary_of": arg}
    elif op in (_MOVE, _OBSERVE):
        args = {"index": arg}
    else:
        args = {"arg": arg}
    args["nbytes"] = nbytes
    if flags & trace.ERROR:
        args["error"] = True
    return args


def flows(records: np.ndarray, catalogue: Catalogue) -> FlowIds:
    """Every flow of `records`, from and to record positions: each tuple's move to its observes
    (`tuple_flows`), then each MPI message's send to its receive (eventspace.mpi.matching)."""
    return FlowIds(tuple_flows(records, catalogue) + message_pairs(records, catalogue), len(records))


def tuple_flows(records: np.ndarray, catalogue: Catalogue) -> list[tuple[int, int]]:
    """(move, observe) pairs of record positions: the observe read the tuple the move put in.

    A `move` records the index its tuple got (`arg`), an `observe` the index it read, so the two
    match on (element name, index). Records flagged ERROR, TREE or SUMMARY match nothing. One
    operation may be seen by several collectors (a source and a sink): the move is the outermost
    record (source, then stage, then sink; then the earliest); the observes are, for each reading
    thread, its outermost records, and sink records only where no thread's record exists. Pairs
    come in order of move position, then observe start. A move nobody observed gets no pair.
    """
    entries = catalogue.entries
    # Per collector id (0 stands for an id the catalogue does not know): its element's number
    # (-1: none), its rank, its thread's number (-1: none, a sink).
    element_of = np.full(len(entries) + 1, -1, dtype=np.int64)
    rank_of = np.ones(len(entries) + 1, dtype=np.int64)
    thread_of = np.full(len(entries) + 1, -1, dtype=np.int64)
    elements: dict[str, int] = {}
    threads: dict[str, int] = {}
    for cid, entry in enumerate(entries, 1):
        if entry.element is not None:
            element_of[cid] = elements.setdefault(entry.element, len(elements))
        if entry.thread is not None:
            thread_of[cid] = threads.setdefault(entry.thread, len(threads))
        rank_of[cid] = ROLE_RANK.get(entry.role, 1)
    cid = records["collector"].astype(np.int64)
    cid[(cid < 1) | (cid > len(entries))] = 0
    element, rank, thread = element_of[cid], rank_of[cid], thread_of[cid]
    key = element << 32 | records["arg"].astype(np.int64)   # (element, index)
    t_start, op = records["t_start"], records["op"]
    matches = (element >= 0) & (records["flags"] & _NO_MATCH == 0)

    # One move per tuple: the outermost record, then the earliest, then the first; by key.
    moves = np.flatnonzero(matches & (op == _MOVE))
    moves = moves[np.lexsort((moves, t_start[moves], rank[moves], key[moves]))]
    moves = moves[np.r_[True, key[moves][1:] != key[moves][:-1]]] if len(moves) else moves
    observes = np.flatnonzero(matches & (op == _OBSERVE))
    if not len(moves) or not len(observes):
        return []
    at = np.minimum(np.searchsorted(key[moves], key[observes]), len(moves) - 1)
    read = key[moves][at] == key[observes]
    observes, at = observes[read], at[read]
    # Sinks stand for the readers only of tuples no thread's record saw read.
    seen_by_thread = np.unique(key[observes][thread[observes] >= 0])
    kept = (thread[observes] >= 0) | ~np.isin(key[observes], seen_by_thread)
    observes, at = observes[kept], at[kept]
    # Each reading thread's outermost records (all of them, if several share the best rank).
    by_group = np.lexsort((rank[observes], thread[observes], key[observes]))
    k, th, r = key[observes][by_group], thread[observes][by_group], rank[observes][by_group]
    first = np.r_[True, (k[1:] != k[:-1]) | (th[1:] != th[:-1])] if len(k) else np.zeros(0, dtype=bool)
    best = r[first][np.cumsum(first) - 1]
    chosen = by_group[r == best]
    observes, movers = observes[chosen], moves[at[chosen]]
    order = np.lexsort((observes, t_start[observes], movers))
    return list(zip(movers[order].tolist(), observes[order].tolist()))


class FlowIds:
    """Flow ids (1, 2, ... in the order of `pairs`, (from, to) record positions) by record position:
    those each move (send) starts, and those that end where each observe (receive) returned. Held
    as numpy arrays, a few integers a record, not a Python list per record (a trace may hold
    millions)."""

    def __init__(self, pairs, records: int):
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        self.count = len(pairs)
        ids = np.arange(1, len(pairs) + 1, dtype=np.int64)
        self._out = self._index(pairs[:, 0], ids, records)
        self._in = self._index(pairs[:, 1], ids, records)

    @staticmethod
    def _index(ends: np.ndarray, ids: np.ndarray, records: int):
        order = np.argsort(ends, kind="stable")
        count = np.bincount(ends, minlength=records).astype(np.int64)
        at = np.concatenate([[0], np.cumsum(count)[:-1]]) if records else count
        return ids[order], at, count

    def starting(self, i: int) -> list[int]:
        """The flows record `i` starts (a move's to the observes that read its tuple)."""
        ids, at, count = self._out
        return ids[at[i]:at[i] + count[i]].tolist()

    def ending(self, i: int) -> list[int]:
        """The flows that end where record `i` (an observe, a receive) returned."""
        ids, at, count = self._in
        return ids[at[i]:at[i] + count[i]].tolist()

    def starts(self, records: np.ndarray) -> np.ndarray:
        """Whether each of the record positions `records` starts a flow."""
        return self._out[2][records] > 0

    @property
    def readers(self) -> np.ndarray:
        """The positions of the records where flows end, in order."""
        return np.flatnonzero(self._in[2])
