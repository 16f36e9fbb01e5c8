"""What an exported trace shows of a record: its slice's name and arguments, and the flow from each
move to the observes that read its tuple."""

from __future__ import annotations

import numpy as np

from eventspace import trace
from eventspace.catalogue import Catalogue, Entry

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
    moves: dict[tuple[str, int], list[int]] = {}
    observes: dict[tuple[str, int], list[int]] = {}
    ops, flags, cids, args = (records[f].tolist() for f in ("op", "flags", "collector", "arg"))
    for i, (op, flag, cid, arg) in enumerate(zip(ops, flags, cids, args)):
        if op not in (_MOVE, _OBSERVE) or flag & _NO_MATCH or not 1 <= cid <= len(entries):
            continue
        element = entries[cid - 1].element
        if element is None:
            continue
        (moves if op == _MOVE else observes).setdefault((element, arg), []).append(i)

    t_start = records["t_start"].tolist()

    def rank(i):
        return ROLE_RANK.get(entries[cids[i] - 1].role, 1)

    pairs = []
    for key, movers in moves.items():
        readers = observes.get(key)
        if not readers:
            continue
        move = min(movers, key=lambda i: (rank(i), t_start[i], i))
        by_thread: dict[str | None, list[int]] = {}
        for i in readers:
            by_thread.setdefault(entries[cids[i] - 1].thread, []).append(i)
        if len(by_thread) > 1:
            by_thread.pop(None, None)
        chosen = []
        for group in by_thread.values():
            best = min(rank(i) for i in group)
            chosen.extend(i for i in group if rank(i) == best)
        pairs.extend((move, i) for i in chosen)
    pairs.sort(key=lambda p: (p[0], t_start[p[1]], p[1]))
    return pairs


def flows_by_record(pairs: list[tuple[int, int]]) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Flow ids (1, 2, ... in the order of `pairs`) by record position: those each move starts,
    and those that end where each observe returned."""
    out_flows: dict[int, list[int]] = {}
    in_flows: dict[int, list[int]] = {}
    for fid, (move, observe) in enumerate(pairs, 1):
        out_flows.setdefault(move, []).append(fid)
        in_flows.setdefault(observe, []).append(fid)
    return out_flows, in_flows
