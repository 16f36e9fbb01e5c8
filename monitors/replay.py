"""The sequence player: an archived run played back through the dashboard, interval by interval, as if live."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from eventspace import system, trace
from eventspace.roster import ActiveScope, ScopeEntry

from .archive import Archive
from .colop import TREE_ROLES, Rounds
from .dashboard import DashboardState
from .heartbeat import Blocked, Judge

HEARTBEAT_ROLES = ("source", "contribute", "stage")   # what the live heartbeat watches by default
MAX_FRAMES = 100_000   # frames a replay makes at most: 28 hours in frames of a second


class ReplayError(ValueError):
    """A replay that cannot be played as asked (an empty archive, a window outside the recording)."""


@dataclass(frozen=True)
class Frame:
    """One interval of the recording as the dashboard shows it (the player's Report): its number
    (from 0), its end (`at`, seconds from the recording's start), the events that ended in it
    (operations; system summary records are not counted), and the state."""

    index: int
    at: float
    events: int
    state: DashboardState

    def as_dict(self) -> dict:
        s = self.state
        return {"index": self.index, "at": self.at, "events": self.events, "events_per_s": s.events_per_s,
                "heartbeat": s.heartbeat.as_dict() if s.heartbeat else None,
                "colops": [r.as_dict() for r in s.colops],
                "scopes": [dict(a.entry.__dict__, observe_rate=a.entry.observe_rate, tuples_per_s=a.tuples_per_s,
                                bytes_per_s=a.bytes_per_s, busy=a.busy) for a in s.scopes],
                "nodes": [n.as_dict() for n in s.nodes]}


class Replay:
    """Plays an archive (monitors.archive) back in intervals of `interval` seconds of recorded
    time, from `start` to `end` seconds after the recording's first operation began (default:
    all of it; system samples taken before it make the first frame's starting state).

    Each frame is the DashboardState the live dashboard would have shown at the interval's end:
    - the heartbeat, judged as the live one judges (monitors.heartbeat.Judge) from each thread's
      newest recorded event so far, a thread whose recorded operation spans the moment being
      inside it (waiting); nodes are never missing in a replay;
    - the collective operations of every instrumented tree, from the rounds recorded so far
      (monitors.colop.Rounds), with the round open at that moment;
    - the recording scope's own figures over the interval (pulls, observe rate, events and bytes
      per second), when the archive kept them (GetEventMon keeps them; the roster of other
      scopes is live-only and not in an archive);
    - each node's newest system summary (eventspace.system), when the archive holds samples;
    - the events (operations) per second recorded in the interval.

    Frames come in order, one per `read()` (each builds on the one before; `ended` once the last was
    read), or all from `frames()`. ReplayError for an
    archive without events, a window outside the recording, or one of more than MAX_FRAMES
    frames (times that span years: a damaged or hand-made archive).

    The archive is streamed, never loaded: one pass over its records finds where the recording
    begins and ends, and frames are made from two more, one in order of t_end (SQLite sorts
    on disk) and one in order of t_start (for the operations under way), a batch at a time. What
    the player holds is each thread's newest event, the operations under way, and each tree's
    newest rounds (Rounds keeps `keep_rounds` of them), whatever the archive's size. Rows that
    are not trace records the archive's catalogue accepts are left out (Archive.batches).
    """

    def __init__(self, archive: Archive, interval: float = 1.0, start: float | None = None,
                 end: float | None = None):
        if not interval > 0:
            raise ReplayError(f"the interval must be a positive number of seconds, got {interval!r}")
        self.archive = archive
        self.catalogue = catalogue = archive.catalogue
        # Time 0 is the first operation's start: system samples began when the nodes did, maybe
        # long before the application, and what they held by then is the first frame's start.
        first_operation = first_any = last = None
        for _, records in archive.batches():
            if not len(records):
                continue
            operations = records["t_start"][(records["flags"] & trace.SYSTEM) == 0]
            if len(operations):
                first_operation = _least(first_operation, int(operations.min()))
            first_any = _least(first_any, int(records["t_start"].min()))
            last = max(last or 0, int(records["t_end"].max()))
        if last is None:
            raise ReplayError(f"{archive.path} holds no events; record some first "
                              "(eventspace monitor getevent --run RUN --out FILE.sqlite)")
        self.origin = first_operation if first_operation is not None else first_any
        self.length = (last - self.origin) / 1e9
        start = 0.0 if start is None else float(start)
        end = self.length if end is None else min(float(end), self.length)
        if not 0 <= start < end:
            raise ReplayError(f"nothing to play from {start:g} s to {end:g} s: the recording lasts "
                              f"{self.length:.1f} s (give --from and --to within it, --from before --to)")
        self.interval, self.start, self.end = interval, start, end
        frames = (end - start) / interval
        if frames > MAX_FRAMES:
            raise ReplayError(f"{archive.path}: {end - start:.6g} s of recording in frames of {interval:g} s would "
                              f"be {frames:.3g} frames, more than {MAX_FRAMES:,}; its events span "
                              f"{_span(self.length)}, which no run lasts if its times are right. Play a part of it "
                              "(--from T --to T, seconds after its first event), or give a longer --interval")
        self.count = max(1, math.ceil(frames - 1e-9))
        self.info = archive.info
        # Per collector id: the thread the heartbeat counts its records for (-1: none), as the live
        # heartbeat's view, and whether an operation of it under way matters to a frame.
        every = catalogue.entries + catalogue.system
        order = [name for name, _ in catalogue.threads]
        watched = {e.thread for e in catalogue.entries if e.thread and e.role in HEARTBEAT_ROLES}
        self.threads = sorted(watched, key=lambda t: (order.index(t) if t in order else len(order), t))
        code = {t: i for i, t in enumerate(self.threads)}
        self._thread_of = np.full(len(every) + 1, -1, dtype=np.int64)
        for e in every:
            if e.thread in code and e.role in HEARTBEAT_ROLES:
                self._thread_of[e.id] = code[e.thread]
        node_of = dict(catalogue.threads) or {e.thread: e.node for e in catalogue.entries if e.thread}
        self._judge = Judge(self.threads, {t: node_of.get(t, "?") for t in self.threads})
        self._rounds = [Rounds(catalogue, tree) for tree in sorted(catalogue.trees)
                        if any(e.tree == tree and e.role in TREE_ROLES for e in catalogue.entries)]
        self._watched = self._thread_of >= 0
        for rounds in self._rounds:
            self._watched[list(rounds.contribute)] = True
        pulls = archive.pulls()
        self._pulls = pulls[np.argsort(pulls["at_ns"], kind="stable")]
        scope = json.loads(self.info.extra.get("scope", "null") or "null")
        self._scope = scope if isinstance(scope, dict) else None
        self._played = self._play()
        self.ended = False   # whether the last frame was read

    def read(self) -> Frame:
        """The next frame; ReplayError after the last (`ended`)."""
        frame = next(self._played, None)
        if frame is None:
            raise ReplayError(f"the replay of {self.archive.path} has ended: its {self.count} frames were read")
        self.ended = frame.index == self.count - 1
        return frame

    def close(self) -> None:
        """Stop playing: the archive's reads under way end (the archive stays open; who opened it
        closes it), and `read` raises ReplayError."""
        self._played.close()

    def frames(self) -> Iterator[Frame]:
        """Every frame not read yet, in order."""
        while not self.ended:
            yield self.read()

    def _play(self) -> Iterator[Frame]:
        newest = np.full(len(self.threads), -1, dtype=np.int64)
        nodes: dict[str, system.NodeSample] = {}
        step = round(self.interval * 1e9)
        begin = self.origin + round(self.start * 1e9)
        ended = _InOrder(self.archive.batches("t_end"), "t_end")
        started = _InOrder(self.archive.batches("t_start"), "t_start")
        under_way = _UnderWay()
        for _, records in ended.upto(begin):   # what ended before the window: the state the first frame starts from
            self._count_in(records, newest, nodes)
        for k in range(self.count):
            t = min(begin + (k + 1) * step, self.origin + round(self.end * 1e9))
            events = 0
            for _, records in ended.upto(t):
                self._count_in(records, newest, nodes)
                events += int(np.count_nonzero((records["flags"] & trace.SYSTEM) == 0))
            for seq, records in started.upto(t):
                mine = self._watched[records["collector"]]
                under_way.add(seq[mine], records[mine])
            under_way.drop_ended(t)
            yield self._frame(k, t, events, under_way, newest, nodes)

    def _count_in(self, records: np.ndarray, newest: np.ndarray, nodes: dict) -> None:
        threads = self._thread_of[records["collector"]]
        mine = threads >= 0
        np.maximum.at(newest, threads[mine], records["t_end"][mine].astype(np.int64))
        for rounds in self._rounds:
            rounds.add(records)
        nodes.update(system.newest(records, self.catalogue))

    def _frame(self, k: int, t: int, events: int, under_way: _UnderWay, newest: np.ndarray, nodes: dict) -> Frame:
        seconds = (t - self.origin) / 1e9
        # Operations under way at t: recorded later, but begun by then (what the live in-flight table held).
        going = under_way.ordered()
        catalogue = self.catalogue

        def blocked(missing):
            inside: dict[str, str] = {}
            for cid in going["collector"].tolist():
                code = self._thread_of[cid]
                if code >= 0 and self.threads[code] not in inside:
                    inside[self.threads[code]] = catalogue[cid].describe()
            return Blocked(inside, set(), set())

        clock = self.info.clock
        at = clock.realtime(t) / 1e9 if clock is not None else seconds
        seen = {self.threads[i]: int(v) for i, v in enumerate(newest.tolist()) if v >= 0}
        heartbeat = self._judge.judge(seen, t / 1e9, blocked, at=at)
        colops = []
        for rounds in self._rounds:
            inside = {}
            for cid, t_start in zip(going["collector"].tolist(), going["t_start"].tolist()):
                entry = rounds.contribute.get(cid)
                if entry is not None:
                    inside[entry.thread] = min(inside.get(entry.thread, t), t_start)
            colops.append(rounds.report(rounds.open_round(inside, t)))
        span = min(self.interval, seconds - self.start) or self.interval
        state = DashboardState(f"replay of {self.archive.path.name} ({self.info.pathmap})", seconds, heartbeat,
                               colops, self._scopes(t), [nodes[n] for n in sorted(nodes, key=self._node_rank)],
                               events_per_s=events / span)
        return Frame(k, seconds, events, state)

    def _node_rank(self, node: str):
        ranks = [e.node for e in self.catalogue.system]
        return (ranks.index(node) if node in ranks else len(ranks), node)

    def _scopes(self, t: int) -> list[ActiveScope]:
        """The recording scope over the interval ending at `t`, from the pulls the archive kept."""
        if self._scope is None or not len(self._pulls):
            return []
        at = self._pulls["at_ns"]
        pulls = self._pulls[np.searchsorted(at, t - round(self.interval * 1e9), side="right"):
                            np.searchsorted(at, t, side="right")]
        s = self._scope
        entry = ScopeEntry("recorded", str(s.get("name", "getevent")), str(s.get("monitor", "")), str(s.get("view", "")),
                           str(s.get("shape", "")), str(s.get("placement", "")), str(s.get("mode", "")),
                           int(s.get("collectors", 0)), 0.0, len(pulls), float(pulls["seconds"].sum()),
                           int(pulls["tuples"].sum()), int(pulls["bytes_in"].sum()), 0, t / 1e9)
        return [ActiveScope(entry, entry.tuples / self.interval, entry.bytes_in / self.interval,
                            entry.seconds / self.interval)]


class _InOrder:
    """An archive's records in order of one time field (Archive.batches by it), taken a batch at a
    time up to a moment: `upto(t)` gives (seq, records) of those at or before t not given yet."""

    def __init__(self, batches, field: str):
        self._batches = iter(batches)
        self._field = field
        self._seq = self._records = None   # what is left of the batch at hand

    def upto(self, t: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        while True:
            if self._records is None:
                batch = next(self._batches, None)
                if batch is None:
                    return
                self._seq, self._records = batch
            n = int(np.searchsorted(self._records[self._field], np.uint64(t), side="right"))
            if n:
                yield self._seq[:n], self._records[:n]
            if n < len(self._records):
                self._seq, self._records = self._seq[n:], self._records[n:]
                return
            self._seq = self._records = None


class _UnderWay:
    """The operations under way at a moment: records begun by then that end after it, with their
    seq, ordered (`ordered`) by start, then end, then seq, as a player sorted by end sees them."""

    def __init__(self):
        self._seq = np.empty(0, dtype=np.int64)
        self._records = trace.empty()

    def add(self, seq: np.ndarray, records: np.ndarray) -> None:
        if len(records):
            self._seq = np.concatenate([self._seq, seq])
            self._records = trace.concat([self._records, records])

    def drop_ended(self, t: int) -> None:
        going = self._records["t_end"] > np.uint64(t)
        if not going.all():
            self._seq, self._records = self._seq[going], self._records[going]

    def ordered(self) -> np.ndarray:
        order = np.lexsort((self._seq, self._records["t_end"], self._records["t_start"]))
        return self._records[order]


def _least(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)


def _span(seconds: float) -> str:
    """`3.2 days`, `292 years`: a long span, readably."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"
