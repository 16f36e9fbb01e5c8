"""ClassesMon: threads (or nodes) in equivalence classes of like behaviour, one representative per class, live (MRNet)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from eventspace import classes
from eventspace.classes import EquivalenceClass
from eventspace.scope import EventScope

from .scoped import ScopeMon


@dataclass(frozen=True)
class ClassesReport:
    """One pull: the classes, largest first (each with its representative's counts), the members
    of the view that had no event in the interval (`quiet`), the bytes that reached the monitor,
    and the nodes that did not answer."""

    at: float
    by: str
    signature: str
    members: list[str]
    classes: list[EquivalenceClass]
    quiet: list[str] = field(default_factory=list)
    bytes_in: int = 0
    missing: set[str] = field(default_factory=set)

    def as_dict(self) -> dict:
        return {"at": self.at, "by": self.by, "signature": self.signature, "members": self.members,
                "classes": [c.as_dict() for c in self.classes], "quiet": self.quiet, "bytes_in": self.bytes_in,
                "missing": sorted(self.missing)}


class ClassesMon(ScopeMon):
    """A scope over `view` in stream mode whose joins reduce to equivalence classes of `by`
    (threads or nodes) by `signature` (`classes:SIGNATURE@BY`, eventspace.classes), placed in the
    node servers by default, so that one representative per class (and its member list) reaches
    the monitor. `read()` pulls the interval since the last read."""

    def __init__(self, run, view: str = "all", *, signature: str = "ops", by: str = "thread",
                 tree: str = "per-node", placement: str = "near", timeout: float = 2.0):
        self.by, self.signature = by, signature
        self.scope = EventScope(run, view, mode="stream", tree=tree, placement=placement, timeout=timeout,
                                stages=[f"classes:{signature}@{by}"], name="classes")
        lay = classes.layout(self.scope.catalogue, by)
        chosen = {int(lay.member_of[e.id]) for e in self.scope.entries} - {-1}
        self.members = [lay.members[i] for i in sorted(chosen)]
        self._bytes = 0

    def read(self) -> ClassesReport:
        pulled = self.scope.pull()
        stats = self.scope.stats()
        found = classes.decode(pulled.records, self.scope.catalogue, self.signature, self.by)
        seen = {m for c in found for m in c.members}
        report = ClassesReport(time.time(), self.by, self.signature, self.members, found,
                               [m for m in self.members if m not in seen], stats.bytes_in - self._bytes,
                               set(pulled.missing))
        self._bytes = stats.bytes_in
        return report


def describe(report: ClassesReport) -> str:
    """One line: `6 threads: class 1 (5 threads: T0..T4): 120 moves, 120 observes; class 2 (T5):
    3× the observes of class 1`, then the quiet members and the nodes that did not answer."""
    what = f"{report.by}s" if len(report.members) != 1 else report.by
    parts = []
    first = report.classes[0] if report.classes else None
    for k, c in enumerate(report.classes, 1):
        who = names(c.members, report.members)
        who = f"{len(c.members)} {report.by}s: {who}" if len(c.members) > 1 else who
        if report.signature == "durations":
            told = _durations(c) if c is first else _compared_durations(c, first)
        else:
            told = _counts(c) if c is first else _compared(c, first)
        parts.append(f"class {k} ({who}): {told}")
    if report.quiet:
        parts.append(f"no events: {names(report.quiet, report.members)}")
    if report.missing:
        parts.append(f"nodes not answering: {', '.join(sorted(report.missing))}")
    return f"{len(report.members)} {what}: " + ("; ".join(parts) if parts else "no events")


def names(chosen, order: list[str]) -> str:
    """Members as runs in `order`: `T0..T4, T6, T8..T15`."""
    position = {m: i for i, m in enumerate(order)}
    indices = sorted(position[m] for m in chosen if m in position)
    out = []
    for first, last in classes.runs(indices):
        if last - first >= 2:
            out.append(f"{order[first]}..{order[last]}")
        else:
            out.extend(order[first:last + 1])
    return ", ".join(out)


def _by_op(c: EquivalenceClass) -> dict[str, int]:
    out: dict[str, int] = {}
    for (op, _), n in c.counts.items():
        out[op] = out.get(op, 0) + n
    return out


def _counts(c: EquivalenceClass) -> str:
    return ", ".join(f"{n:,} {op}s" for op, n in _by_op(c).items())


def _compared(c: EquivalenceClass, first: EquivalenceClass) -> str:
    """How a class differs from the first: the op whose count differs most, as a ratio."""
    mine, theirs = _by_op(c), _by_op(first)
    only_mine = [op for op in mine if op not in theirs]
    if only_mine:
        return f"{', '.join(only_mine)}, which class 1 has not ({_counts(c)})"
    only_theirs = [op for op in theirs if op not in mine]
    if only_theirs:
        return f"no {', '.join(only_theirs)}, unlike class 1 ({_counts(c)})"
    op = max(mine, key=lambda o: abs(_log_ratio(mine[o], theirs[o])))
    ratio = mine[op] / theirs[op]
    if abs(ratio - 1) < 0.05:   # as many of each op: their parts differ, or their counts straddle a power of two
        return f"about as many of each op as class 1, in other parts or another power of two ({_counts(c)})"
    said = f"{ratio:.2g}×" if ratio >= 1 else f"1/{1 / ratio:.2g}"
    return f"{said} the {op}s of class 1"


def _durations(c: EquivalenceClass) -> str:
    return ", ".join(f"{op}s {part}" for (op, part) in c.counts)


def _compared_durations(c: EquivalenceClass, first: EquivalenceClass) -> str:
    """The ops whose typical duration differs from the first class's."""
    theirs = dict(first.counts)
    typical = {op: part for op, part in theirs}
    told = [f"{op}s {part} (class 1: {typical[op]})" if op in typical else f"{op}s {part}, which class 1 has not"
            for op, part in c.counts if (op, part) not in theirs]
    told += [f"no {op}s" for op in typical if op not in {o for o, _ in c.counts}]
    return "; ".join(told) or _durations(c)


def _log_ratio(a: int, b: int) -> float:
    import math

    return math.log(a / b) if a and b else 0.0
