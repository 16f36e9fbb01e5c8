"""The sequence player: an archived run played back through the dashboard, interval by interval, as if live."""

from __future__ import annotations

import json
import math
import re
import time
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
SLOWEST, FASTEST = 1 / 64, 1024   # speeds `-` and `+` stop at (× recorded time)


class ReplayError(ValueError):
    """A replay that cannot be played as asked (an empty archive, a window outside the recording)."""


@dataclass
class Frame:
    """One interval of the recording as the dashboard shows it: its number (from 0), its end
    (`at`, seconds from the recording's start), the events that ended in it (operations; system
    summary records are not counted), and the state."""

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

    Frames come in order from `frames()` (each builds on the one before). ReplayError for an
    archive without events, or a window outside the recording.
    """

    def __init__(self, archive: Archive, interval: float = 1.0, start: float | None = None,
                 end: float | None = None):
        if not interval > 0:
            raise ReplayError(f"the interval must be a positive number of seconds, got {interval!r}")
        self.archive = archive
        self.catalogue = catalogue = archive.catalogue
        records = archive.records()
        if not len(records):
            raise ReplayError(f"{archive.path} holds no events; record some first "
                              "(eventspace monitor getevent --run RUN --out FILE.sqlite)")
        self.records = records[np.argsort(records["t_end"], kind="stable")]
        # Time 0 is the first operation's start: system samples began when the nodes did, maybe
        # long before the application, and what they held by then is the first frame's start.
        operations = records[(records["flags"] & trace.SYSTEM) == 0]
        self.origin = int((operations if len(operations) else records)["t_start"].min())
        self.length = (int(records["t_end"].max()) - self.origin) / 1e9
        start = 0.0 if start is None else float(start)
        end = self.length if end is None else min(float(end), self.length)
        if not 0 <= start < end:
            raise ReplayError(f"nothing to play from {start:g} s to {end:g} s: the recording lasts "
                              f"{self.length:.1f} s (give --from and --to within it, --from before --to)")
        self.interval, self.start, self.end = interval, start, end
        self.count = max(1, math.ceil((end - start) / interval - 1e-9))
        self.info = archive.info
        self._t_end = self.records["t_end"].astype(np.int64)
        self._t_start = self.records["t_start"].astype(np.int64)
        # Per record: the thread the heartbeat counts it for (-1: none), as the live heartbeat's view.
        every = catalogue.entries + catalogue.system
        order = [name for name, _ in catalogue.threads]
        watched = {e.thread for e in catalogue.entries if e.thread and e.role in HEARTBEAT_ROLES}
        self.threads = sorted(watched, key=lambda t: (order.index(t) if t in order else len(order), t))
        code = {t: i for i, t in enumerate(self.threads)}
        thread_of = np.full(len(every) + 1, -1, dtype=np.int64)
        for e in every:
            if e.thread in code and e.role in HEARTBEAT_ROLES:
                thread_of[e.id] = code[e.thread]
        cids = self.records["collector"].astype(np.int64)
        self._thread = np.where((cids >= 1) & (cids <= len(every)), thread_of[np.clip(cids, 0, len(every))], -1)
        node_of = dict(catalogue.threads) or {e.thread: e.node for e in catalogue.entries if e.thread}
        self._judge = Judge(self.threads, {t: node_of.get(t, "?") for t in self.threads})
        self._rounds = [Rounds(catalogue, tree) for tree in sorted(catalogue.trees)
                        if any(e.tree == tree and e.role in TREE_ROLES for e in catalogue.entries)]
        self._pulls = archive.pulls()
        scope = json.loads(self.info.extra.get("scope", "null") or "null")
        self._scope = scope if isinstance(scope, dict) else None

    def frames(self) -> Iterator[Frame]:
        """Every frame, in order."""
        newest: dict[str, int] = {}
        nodes: dict[str, system.NodeSample] = {}
        step = round(self.interval * 1e9)
        begin = self.origin + round(self.start * 1e9)
        lo = int(np.searchsorted(self._t_end, begin, side="right"))
        if lo:   # what ended before the window: the state the first frame starts from
            self._count_in(slice(0, lo), newest, nodes)
        for k in range(self.count):
            t = min(begin + (k + 1) * step, self.origin + round(self.end * 1e9))
            hi = int(np.searchsorted(self._t_end, t, side="right"))
            window = slice(lo, hi)
            self._count_in(window, newest, nodes)
            yield self._frame(k, t, window, newest, nodes)
            lo = hi

    def _count_in(self, window: slice, newest: dict[str, int], nodes: dict) -> None:
        records = self.records[window]
        threads = self._thread[window]
        for code, t_end in zip(threads[threads >= 0].tolist(), self._t_end[window][threads >= 0].tolist()):
            thread = self.threads[code]
            if t_end > newest.get(thread, -1):
                newest[thread] = t_end
        for rounds in self._rounds:
            rounds.add(records)
        nodes.update(system.newest(records, self.catalogue))

    def _frame(self, k: int, t: int, window: slice, newest: dict[str, int], nodes: dict) -> Frame:
        seconds = (t - self.origin) / 1e9
        # Operations under way at t: recorded later, but begun by then (what the live in-flight table held).
        later = slice(window.stop, len(self.records))
        under_way = np.flatnonzero(self._t_start[later] <= t) + window.stop
        catalogue = self.catalogue

        def blocked(missing):
            inside: dict[str, str] = {}
            for i in under_way[np.argsort(self._t_start[under_way], kind="stable")].tolist():
                code = self._thread[i]
                if code >= 0 and self.threads[code] not in inside:
                    inside[self.threads[code]] = catalogue[int(self.records["collector"][i])].describe()
            return Blocked(inside, set(), set())

        clock = self.info.clock
        at = clock.realtime(t) / 1e9 if clock is not None else seconds
        heartbeat = self._judge.judge(dict(newest), t / 1e9, blocked, at=at)
        colops = []
        for rounds in self._rounds:
            inside = {}
            for i in under_way.tolist():
                entry = rounds.contribute.get(int(self.records["collector"][i]))
                if entry is not None:
                    inside[entry.thread] = min(inside.get(entry.thread, t), int(self._t_start[i]))
            colops.append(rounds.report(rounds.open_round(inside, t)))
        events = int(np.count_nonzero((self.records["flags"][window] & trace.SYSTEM) == 0))
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
        pulls = self._pulls[(self._pulls["at_ns"] > t - round(self.interval * 1e9)) & (self._pulls["at_ns"] <= t)]
        s = self._scope
        entry = ScopeEntry("recorded", str(s.get("name", "getevent")), str(s.get("monitor", "")), str(s.get("view", "")),
                           str(s.get("shape", "")), str(s.get("placement", "")), str(s.get("mode", "")),
                           int(s.get("collectors", 0)), 0.0, len(pulls), float(pulls["seconds"].sum()),
                           int(pulls["tuples"].sum()), int(pulls["bytes_in"].sum()), 0, t / 1e9)
        return [ActiveScope(entry, entry.tuples / self.interval, entry.bytes_in / self.interval,
                            entry.seconds / self.interval)]


# -- playing in a terminal ---------------------------------------------------------------------------

class Keys:
    """Single keys from a terminal's stdin, without echo and without waiting for Enter (cbreak
    mode), while the block runs; the terminal's settings come back on exit, however it ends.
    Off a terminal (a pipe, a file) there are no keys: `read` only waits."""

    def __init__(self, stream):
        self.stream = stream
        self._saved = None
        self._pending: list[str] = []

    def __enter__(self) -> Keys:
        import termios
        import tty

        try:
            fd = self.stream.fileno()
            if self.stream.isatty():
                self._saved = termios.tcgetattr(fd)
                tty.setcbreak(fd)
                self.fd = fd
        except (OSError, ValueError, termios.error):
            self._saved = None
        return self

    @property
    def live(self) -> bool:
        return self._saved is not None

    def read(self, timeout: float) -> str | None:
        """The next key within `timeout` seconds: a character, `right` for the right arrow; None."""
        import os
        import select

        if not self._pending:
            if self._saved is None:
                time.sleep(max(0.0, timeout))
                return None
            ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
            if not ready:
                return None
            # Keys typed quickly come in one read: each is taken in turn.
            self._pending = re.findall(r"\x1b\[[A-D]|.", os.read(self.fd, 64).decode(errors="replace"), re.S)
        key = self._pending.pop(0) if self._pending else None
        return "right" if key == "\x1b[C" else key

    def __exit__(self, *exc) -> None:
        if self._saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None


HELP = "space pause · s or → step · + faster · - slower · q quit"


def play(replay: Replay, console, speed: float = 1.0, stdin=None) -> int:
    """Show `replay` in the terminal (rich Live), one frame per `interval / speed` seconds, with
    keys (HELP) when stdin is a terminal; returns the frames shown. When the recording ends, a
    terminal stays on the last frame until `q`; without one it returns."""
    import sys

    from rich.live import Live

    from .dashboard import render

    frames = replay.frames()
    frame = next(frames)
    shown, paused, ended = 1, False, False
    if not speed > 0:
        raise ReplayError(f"the speed must be a positive number (1 plays as recorded), got {speed!r}")
    with Keys(stdin if stdin is not None else sys.stdin) as keys, \
            Live(console=console, auto_refresh=False, transient=False) as live:
        def show():
            status = "ended" if ended else "paused" if paused else "playing"
            frame.state.notes = [f"frame {frame.index + 1} of {replay.count}: {frame.at:.1f} s of "
                                 f"{replay.end:.1f} s, {_speed_text(speed)} speed, {status}",
                                 f"{frame.events:,} events in this interval", HELP if keys.live else ""]
            live.update(render(frame.state), refresh=True)

        show()
        due = time.monotonic() + replay.interval / speed
        while True:
            key = keys.read(0.05 if keys.live else max(0.0, due - time.monotonic()))
            advance = False
            if key in ("q", "Q"):
                break
            if key == " ":
                paused = not paused
                due = time.monotonic() + replay.interval / speed
            elif key in ("s", "S", "right"):
                paused, advance = True, True
            elif key in ("+", "="):
                speed = min(FASTEST, speed * 2)
            elif key in ("-", "_"):
                speed = max(SLOWEST, speed / 2)
            if not paused and not ended and time.monotonic() >= due:
                advance = True
                due += replay.interval / speed
            if advance and not ended:
                try:
                    frame = next(frames)
                    shown += 1
                except StopIteration:
                    ended = True
                    if not keys.live:
                        break
            if key is not None or advance:
                show()
    return shown


def _speed_text(speed: float) -> str:
    return f"{speed:g}×" if speed >= 1 else f"1/{round(1 / speed)}×"
