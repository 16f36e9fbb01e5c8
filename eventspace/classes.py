"""Equivalence classes (MRNet): a scope stage that sorts threads or nodes into classes of like behaviour, one representative per class, merged up the tree."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from . import trace
from .catalogue import SYSTEM_ROLE, Catalogue
from .histogram import bucket_of

SIGNATURES = ("ops", "durations")
MEMBERS = ("thread", "node")
_EVENTS_ONLY = trace.SUMMARY | trace.SYSTEM | trace.HISTOGRAM   # not events: left out of signatures
RANGE = 0          # a class record whose `op` is 0 lists members: indices `arg`..`nbytes`
_U32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Membership:
    """What the stage needs of a catalogue, by collector id: each collector's member (an index
    into `members`, -1 for none) and the part of a signature its events count under for `ops`
    (its element class: the element's or tree's name without digits and underscores, an index
    into `element_classes`)."""

    members: tuple[str, ...]
    member_of: np.ndarray
    element_classes: tuple[str, ...]
    element_class_of: np.ndarray


def layout(catalogue: Catalogue, by: str) -> Membership:
    every = catalogue.entries + catalogue.system
    if by == "thread":
        members = tuple(name for name, _ in catalogue.threads)
        index = {name: i for i, name in enumerate(members)}
        member = [index.get(e.thread, -1) if e.role != SYSTEM_ROLE else -1 for e in every]
    else:
        members = tuple(e.node for e in catalogue.system)
        index = {name: i for i, name in enumerate(members)}
        member = [index[e.node] if e.role != SYSTEM_ROLE else -1 for e in every]
    names = [element_class(e.element or e.tree or "") for e in every]
    classes = tuple(sorted(set(names)))
    code = {name: i for i, name in enumerate(classes)}
    return Membership(members, np.array([-1] + member, dtype=np.int64), classes,
                  np.array([0] + [code[n] for n in names], dtype=np.int64))


def element_class(name: str) -> str:
    """`down` for down0_5 and down3_4: an element's (or tree's) name without its numbers."""
    return re.sub(r"[\d_]+", "", name) or name or "-"


def duration_class(bucket: int) -> int:
    """The coarse duration class of a log2 bucket (histogram.bucket_of): a factor of 8 each."""
    return (bucket + 2) // 3


@dataclass
class _Class:
    collector: int                       # the representative's collector: the class's key on the wire
    member: int                          # the representative
    parts: dict[tuple[int, int], list]   # (op, part) -> [count, signature value, t_start, t_end]
    members: set[int] = field(default_factory=set)

    @property
    def signature(self) -> frozenset:
        return frozenset((key, value[1]) for key, value in self.parts.items())


def reducer(signature: str, lay: Membership):
    """The `classes:SIGNATURE@MEMBERS` stage as a function of a record batch (see ScopeStage).

    Each member (thread or node) whose events are in the batch gets a signature: for `ops`, per
    op and element class, the count's log2 bucket (histogram.bucket_of: members whose counts
    straddle a power of two fall in two classes, each showing its counts); for `durations`, per
    op, the duration class (a factor of 8) that most of its events fall in, its typical
    duration. Members with equal signatures form a class; classes coming from
    joins below (records with flag trace.CLASS) merge with those of equal signature. Out go,
    per class, records with flag CLASS and the representative's collector id (the member with
    the least index): one per op and part (`op`, `element` the part, `arg` the representative's
    count, `nbytes` the count's bucket (0 for `durations`), t_start and t_end the least and greatest of its
    events') and one per run of members (`op` 0, members `arg` to `nbytes`, indices into the
    layout's members). Events of no member (a sink's, for threads) are left out; records of
    other kinds (summaries, system, histograms) pass through unchanged.
    """

    def reduce(records: np.ndarray) -> np.ndarray:
        flags = records["flags"]
        member = lay.member_of[records["collector"]]
        other = (flags & _EVENTS_ONLY) != 0
        mine = ~other & (member >= 0)
        classes = _from_events(records[mine & ((flags & trace.CLASS) == 0)], signature, lay)
        classes += _from_records(records[mine & ((flags & trace.CLASS) != 0)], lay)
        merged: dict[frozenset, _Class] = {}
        for c in sorted(classes, key=lambda c: c.member):
            same = merged.get(c.signature)
            if same is None:
                merged[c.signature] = c
            else:
                same.members |= c.members
        out = _encode(list(merged.values()))
        return trace.concat([records[other], out]) if other.any() else out

    return reduce


def _from_events(events: np.ndarray, signature: str, lay: Membership) -> list[_Class]:
    if not len(events):
        return []
    member = lay.member_of[events["collector"]]
    if signature == "ops":
        part = lay.element_class_of[events["collector"]]
    else:
        span = np.where(events["t_end"] > events["t_start"], events["t_end"] - events["t_start"], 0)
        part = duration_class(bucket_of(span))
    key = member << 40 | events["op"].astype(np.int64) << 20 | part
    uniq, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    t_start = np.full(len(uniq), np.iinfo(np.uint64).max, dtype=np.uint64)
    np.minimum.at(t_start, inverse, events["t_start"])
    t_end = np.zeros(len(uniq), dtype=np.uint64)
    np.maximum.at(t_end, inverse, events["t_end"])
    collector = np.full(len(uniq), _U32, dtype=np.uint32)
    np.minimum.at(collector, inverse, events["collector"])
    classes: dict[int, _Class] = {}
    for k, n, t0, t1, cid in zip(uniq.tolist(), counts.tolist(), t_start.tolist(), t_end.tolist(),
                                 collector.tolist()):
        m, op, part = k >> 40, k >> 20 & 0xFFFFF, k & 0xFFFFF
        c = classes.get(m)
        if c is None:
            c = classes[m] = _Class(cid, m, {}, {m})
        c.collector = min(c.collector, cid)
        if signature == "ops":
            c.parts[(op, part)] = [n, int(bucket_of([n])[0]), t0, t1]
            continue
        # durations: one part per op, the class most of its events are in (the lower on a tie)
        same = next((key for key in c.parts if key[0] == op), None)
        if same is None:
            c.parts[(op, part)] = [n, 0, t0, t1, n]
            continue
        total, _, s0, s1, most = c.parts[same]
        if n > most:
            del c.parts[same]
            same = (op, part)
            most = n
        c.parts[same] = [total + n, 0, min(s0, t0), max(s1, t1), most]
    return list(classes.values())


def _from_records(records: np.ndarray, lay: Membership) -> list[_Class]:
    classes: dict[int, _Class] = {}
    for op, cid, element, arg, nbytes, t0, t1 in zip(*(records[f].tolist() for f in (
            "op", "collector", "element", "arg", "nbytes", "t_start", "t_end"))):
        c = classes.get(cid)
        if c is None:
            c = classes[cid] = _Class(cid, int(lay.member_of[cid]), {})
        if op == RANGE:
            c.members.update(range(arg, nbytes + 1))
        else:
            c.parts[(op, element)] = [arg, nbytes, t0, t1]
    return list(classes.values())


def _encode(classes: list[_Class]) -> np.ndarray:
    rows = []
    for c in classes:
        if not c.parts:
            continue   # members without a count (member runs alone came in): nothing to say of them
        for (op, part), (count, value, t0, t1, *_) in sorted(c.parts.items()):
            rows.append((op, trace.CLASS, c.collector, part, min(count, _U32), value, t0, t1))
        t0 = min(v[2] for v in c.parts.values())
        t1 = max(v[3] for v in c.parts.values())
        for first, last in runs(sorted(c.members)):
            rows.append((RANGE, trace.CLASS, c.collector, 0, first, last, t0, t1))
    return np.array(rows, dtype=trace.DTYPE) if rows else trace.empty()


def runs(indices: list[int]) -> list[tuple[int, int]]:
    """Sorted indices as (first, last) runs of consecutive ones: [0, 1, 2, 5] -> [(0, 2), (5, 5)]."""
    out: list[tuple[int, int]] = []
    for i in indices:
        if out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def split_member(by: str, leaves: list[dict[str, list[str]]], catalogue: Catalogue) -> str | None:
    """The first member whose trace elements more than one join of a tree reads (`leaves`: each
    join's {node: [trace element, ...]}), or None: a member split so would be summarised in
    parts, each part a member of its own."""
    lay = layout(catalogue, by)
    by_trace = {e.trace: e.id for e in catalogue.entries + catalogue.system}
    join_of: dict[int, int] = {}
    for j, mine in enumerate(leaves):
        for names in mine.values():
            for name in names:
                m = int(lay.member_of[by_trace[name]])
                if m >= 0 and join_of.setdefault(m, j) != j:
                    return lay.members[m]
    return None


# -- what a monitor makes of them -------------------------------------------------------------------

@dataclass(frozen=True)
class EquivalenceClass:
    """One class at the monitor: its members (names, in order), its representative (the first),
    and the representative's event counts by (op, part) (part: an element class for `ops`, a
    duration range for `durations`)."""

    members: tuple[str, ...]
    counts: dict[tuple[str, str], int]

    @property
    def representative(self) -> str:
        return self.members[0]

    def as_dict(self) -> dict:
        return {"members": list(self.members), "representative": self.representative,
                "counts": [{"op": op, "part": part, "count": n} for (op, part), n in self.counts.items()]}


def decode(records: np.ndarray, catalogue: Catalogue, signature: str, by: str) -> list[EquivalenceClass]:
    """The classes a `classes:SIGNATURE@BY` scope delivered, the largest first (then by their
    representative's order)."""
    lay = layout(catalogue, by)
    classes = _from_records(records[(records["flags"] & trace.CLASS) != 0], lay)
    out = []
    for c in sorted(classes, key=lambda c: (-len(c.members), min(c.members, default=0))):
        counts = {(trace.OP_NAMES.get(op, str(op)), _part_name(part, signature, lay)): v[0]
                  for (op, part), v in sorted(c.parts.items())}
        out.append(EquivalenceClass(tuple(lay.members[i] for i in sorted(c.members) if i < len(lay.members)), counts))
    return out


def _part_name(part: int, signature: str, lay: Membership) -> str:
    if signature == "ops":
        return lay.element_classes[part] if part < len(lay.element_classes) else str(part)
    low, high = 3 * part - 2, 3 * part
    return "0 ns" if part == 0 else f"{_ns(1 << max(low - 1, 0))}–{_ns((1 << high) - 1)}"


def _ns(value: int) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value} ns"
