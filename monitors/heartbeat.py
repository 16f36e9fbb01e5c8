"""Heartbeat: which threads make progress, which one stopped first, and which nodes are gone or not answering."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from eventspace.scope import EventScope
from paths.stack import DEPTH, ThreadState, from_the_program

from .scoped import ScopeMon
from .waits import WaitFor

# Thread statuses, as reported.
ALIVE = "alive"        # its newest event moved since the last beat
STALLED = "stalled"    # no progress, and not inside any communication operation: stuck in its own code
WAITING = "waiting"    # no progress, blocked inside an operation (an observe, a collective): on another
SLOW = "slow"          # no progress for an interval, outside any operation: stalled if it stays so
QUIET = "quiet"        # no event seen yet
IDLE = "idle"          # no progress, like every other thread, and none is waiting: the application
                       # is not communicating at all (it ended, or is between phases)
GONE = "gone"          # its node is gone: its process ended, or its connection closed
NOT_ANSWERING = "not answering"   # its node keeps its connection but does not answer: paused, swapping, busy
UNSEEN = "unseen"      # none of its events reached this beat, though its node is not known to be gone
                       # (a join between its node and the monitor did not answer): nothing is known
OFF = "off"            # no progress seen because its collectors are switched off (`eventspace space switch`)
COMPUTING = "computing"  # no new events and in no operation, but using the CPU: busy in its own code
FAILED = "failed"      # it ended by raising (`waiting_in` says what and where)

# A thread without new events counts as computing while it uses at least this share of a core.
COMPUTING_SHARE = 0.05


class Blocked(NamedTuple):
    """What a heartbeat learns when it asks about the threads that did not move: {thread: the
    operation it is inside now}, the nodes that did not answer, those of them gone, and the threads
    whose collectors are all switched off."""

    inside: dict[str, str]
    late: set[str]
    gone: set[str]
    off: set[str] = frozenset()
    threads: dict[str, ThreadState] = {}   # where each thread is, as its process says (paths.stack)


@dataclass(frozen=True)
class ThreadBeat:
    """One thread at one beat: status, its newest event's end (ns, node clock), and for how long
    (seconds, by the monitor's clock) that has not moved."""

    thread: str
    node: str
    status: str
    last_t_end: int
    still_for: float
    waiting_in: str = ""     # for WAITING: the operation it is blocked in, e.g. "observe down0_5",
                             # "Recv from r3 tag 7 on comm 0" (an MPI rank); for FAILED, its error
    where: str = ""          # the innermost frame of the program's own code: "heat.py:88 in exchange"
    stack: tuple[str, ...] = ()   # its whole stack, outermost first ("file.py:12 in f"), when asked


@dataclass(frozen=True)
class HeartbeatReport:
    """One beat: every thread of the view, the nodes that are gone and those that did not answer
    (but keep their connection), those not asked because a join above them did not answer
    (`unreached`), the pull's figures, and on an MPI run a deadlock, if ranks wait on each other
    with none releasable (`deadlock`: one line per rank, `r0 waits Recv from r1 tag 0 on comm 0`)."""

    at: float
    threads: list[ThreadBeat]
    gone: set[str] = field(default_factory=set)
    pull_seconds: float = 0.0
    not_answering: set[str] = field(default_factory=set)
    unreached: set[str] = field(default_factory=set)
    deadlock: list[str] = field(default_factory=list)

    def by_status(self, status: str) -> list[str]:
        return [b.thread for b in self.threads if b.status == status]

    def counts(self) -> list[tuple[str, int]]:
        """(status, threads with it), the most common first."""
        counts: dict[str, int] = {}
        for beat in self.threads:
            counts[beat.status] = counts.get(beat.status, 0) + 1
        return sorted(counts.items(), key=lambda kv: -kv[1])

    @property
    def flagged(self) -> list[str]:
        """The threads reported as without progress of their own (STALLED)."""
        return self.by_status(STALLED)

    def as_dict(self) -> dict:
        return {"at": self.at, "gone": sorted(self.gone), "not_answering": sorted(self.not_answering),
                "unreached": sorted(self.unreached), "pull_seconds": self.pull_seconds,
                "deadlock": list(self.deadlock),
                "threads": [dict(b.__dict__, stack=list(b.stack)) for b in self.threads]}


class Heartbeat(ScopeMon):
    """Per thread, the newest event over all its paths and trees: a scope whose joins reduce to
    the greatest t_end per thread (`reduce:max_t_end@thread`) inside the tree, so that one record
    per thread reaches the monitor. `read()` pulls once (a beat) and compares with the previous beat;
    the HeartbeatReport says every thread's status.

    A thread whose newest event did not move since the previous beat is without progress. If one
    of its collectors is timing an operation right now (the scope's in-flight table), it is
    WAITING inside that operation, on another thread; otherwise it is STALLED: stuck outside
    communication, in its own code, the thread a user looks for (seen so at two beats running,
    so it is flagged within three intervals of stopping); when every thread has stopped
    and none waits, they are IDLE (the application ended or pauses). Threads of nodes that are
    gone (process ended, connection closed) are GONE; of nodes that keep their connection but
    do not answer in time (paused, swapping, busy), NOT_ANSWERING. A thread is only ever ALIVE
    (or any status that says what it does) on the strength of a record that reached this beat:
    without one it is GONE, NOT_ANSWERING, QUIET or UNSEEN.

    On an MPI run, a rank's collectors mark the call they time, so a WAITING rank says what it waits
    in and on whom (`Allreduce on comm 0, round 41, waiting for r5`), and ranks that wait on each
    other with none releasable are reported as a deadlock (monitors.waits): once MPI marks were
    seen, marks are read at every beat, and a deadlock is reported when its waits are the same at
    two beats running, so within three intervals of its start.
    """

    def __init__(self, run, view: str = "role:source | role:contribute | role:stage", *, tree: str = "per-node",
                 placement: str = "near", timeout: float = 2.0, stacks: bool = False, depth: int = DEPTH):
        self.stacks, self.depth = stacks, depth   # whole stacks in the report (`where` always)
        self.scope = EventScope(run, view, mode="latest", tree=tree, placement=placement,
                                stages=["reduce:max_t_end@thread"], timeout=timeout, name="heartbeat")
        catalogue = self.scope.catalogue
        self.waits = WaitFor(run, catalogue, timeout)
        order = [t.name for t in catalogue.pathmap.threads]
        self.threads = sorted({e.thread for e in self.scope.entries if e.thread}, key=order.index)
        self.node_of = {t.name: t.node for t in catalogue.pathmap.threads}
        self._take(catalogue)
        self.judge = Judge(self.threads, self.node_of)

    def _take(self, catalogue) -> None:
        """Use `catalogue` (the scope's, as the run grows) for what each thread's collectors are."""
        self.waits.catalogue = catalogue
        self._collectors: dict[str, set[int]] = {}   # thread -> its collectors in the view
        for entry in self.scope.entries:
            if entry.thread:
                self._collectors.setdefault(entry.thread, set()).add(entry.id)

    def read(self) -> HeartbeatReport:
        pulled = self.scope.pull()
        catalogue = self.scope.catalogue
        if catalogue is not self.waits.catalogue:   # the run grew (an MPI run's new communicators)
            self._take(catalogue)
        newest: dict[str, int] = {}
        for record in pulled.records:
            thread = catalogue[int(record["collector"])].thread
            if thread is not None:
                newest[thread] = max(newest.get(thread, 0), int(record["t_end"]))

        deadlock = []

        def blocked(missing: set[str]) -> Blocked:
            look = self.scope.look(missing, marks=True, off=True, threads=True, stacks=True, depth=self.depth)
            marks, off_ids, states, late = look.marks, look.off, look.threads, look.missing
            inside: dict[str, str] = {}
            for cid in sorted(marks, key=lambda c: marks[c].t_start):
                entry = catalogue[cid]
                if entry.thread is not None and entry.thread not in inside:
                    inside[entry.thread] = entry.describe()
            ranks, found = self.waits.look(marks, missing | late)
            inside.update({f"r{rank}": wait.text for rank, wait in ranks.items()})
            if found:
                deadlock.extend(found.lines_at({r: states[f"r{r}"].where for r in found.ranks if f"r{r}" in states}))
            off = {t for t, ids in self._collectors.items() if ids and ids <= off_ids}
            return Blocked(inside, late, self.scope.gone(late), off, states)

        # On an MPI run marks are read at every beat (a deadlock is confirmed over two), and where
        # a thread has no record yet (it may be blocked in its first call).
        report = self.judge.judge(newest, time.monotonic(), blocked, pulled.missing, pulled.gone, pulled.unreached,
                                  pulled.seconds, always=self.waits.active or len(newest) < len(self.threads),
                                  stacks=self.stacks)
        return replace(report, deadlock=deadlock) if deadlock else report

    def close(self) -> None:
        self.waits.close()
        super().close()


class Judge:
    """What a heartbeat makes of each thread's newest event, beat after beat (see Heartbeat): the
    live heartbeat feeds it pulls, the sequence player (monitors.replay) an archive's records.

    `judge(newest, now, blocked, missing, gone, unreached)`: `newest` is {thread: its newest
    event's t_end} of the threads whose records reached this beat; `now` the beat's time in
    seconds; `blocked(missing)` gives a Blocked (what each thread is inside now, the nodes that did
    not answer that question and those of them gone, the threads whose collectors are switched
    off), and is asked only when a thread did not move (or at every beat, `always`);
    `missing`, `gone`, `unreached` are the beat's nodes as a pull reports them.
    """

    def __init__(self, threads: list[str], node_of: dict[str, str]):
        self.threads = list(threads)
        self.node_of = dict(node_of)
        self._last: dict[str, int] = {}
        self._moved_at: dict[str, float] = {}
        self._cpu: dict[str, tuple[int, float]] = {}   # thread -> (CPU ns, when) as last asked
        # Threads seen stopped outside any operation at the last beat: a thread is STALLED only
        # when seen so twice running, so that one unlucky look cannot flag a healthy thread.
        self._suspects: set[str] = set()

    def judge(self, newest: dict[str, int], now: float, blocked, missing=frozenset(), gone=frozenset(),
              unreached=frozenset(), seconds: float = 0.0, at: float | None = None,
              always: bool = False, stacks: bool = False) -> HeartbeatReport:
        missing, gone = set(missing), set(gone)
        seen = [t for t in self.threads if t in newest and self.node_of[t] not in missing]
        still = []
        for thread in seen:
            if newest[thread] != self._last.get(thread):
                self._last[thread] = newest[thread]
                self._moved_at[thread] = now
            elif thread in self._moved_at:
                still.append(thread)
        inside: dict[str, str] = {}
        off: set[str] = set()
        states: dict[str, ThreadState] = {}
        if still or always:
            inside, late, late_gone, off, states = blocked(missing)
            missing |= late
            gone |= late_gone
        computing = self._computing(states, now)
        # A thread stopped outside communication is the one others wait on, unless nobody waits or
        # moves at all: then the application as a whole is quiet, and no thread is to blame.
        seen = [t for t in seen if self.node_of[t] not in missing]
        everyone_idle = not inside and set(seen) <= set(still)   # (still may hold threads of nodes gone since)
        beats = []
        suspects = set()
        everyone_idle = everyone_idle and not computing
        for thread in self.threads:
            node = self.node_of[thread]
            state = states.get(thread)
            place = {"where": state.where,
                     "stack": tuple(f.text for f in from_the_program(state.frames)) if stacks else ()} if state else {}
            if node in missing:
                status = GONE if node in gone else NOT_ANSWERING
                beats.append(ThreadBeat(thread, node, status, self._last.get(thread, 0), 0.0))
            elif state is not None and state.failed:
                beats.append(ThreadBeat(thread, node, FAILED, self._last.get(thread, 0), 0.0, state.failed, **place))
            elif thread in off and (thread in still or thread not in newest):
                # Its collectors write nothing: its progress cannot be seen, which is not a stall.
                beats.append(ThreadBeat(thread, node, OFF, self._last.get(thread, 0), 0.0, **place))
            elif thread not in newest:
                # No record reached us: say so, never ALIVE on an old record (nor QUIET when the join
                # that reads its node did not answer). One in an operation already (an MPI rank blocked
                # in its first call) is waiting; one that uses the CPU is computing.
                if thread in inside:
                    status = WAITING
                elif thread in computing:
                    status = COMPUTING
                else:
                    status = QUIET if thread not in self._last and node not in unreached else UNSEEN
                beats.append(ThreadBeat(thread, node, status, self._last.get(thread, 0), 0.0,
                                        inside.get(thread, ""), **place))
            elif thread in still:
                status = WAITING if thread in inside else (
                    COMPUTING if thread in computing else IDLE if everyone_idle else STALLED)
                if status == STALLED and thread not in self._suspects:
                    status = SLOW  # first sight: it may have left an operation just before we looked
                if status == STALLED or (thread not in inside and thread not in computing):
                    suspects.add(thread)
                beats.append(ThreadBeat(thread, node, status, self._last[thread], now - self._moved_at[thread],
                                        inside.get(thread, ""), **place))
            else:
                beats.append(ThreadBeat(thread, node, ALIVE, self._last[thread], 0.0))
        self._suspects = suspects
        return HeartbeatReport(time.time() if at is None else at, beats, gone, seconds, not_answering=missing - gone,
                               unreached=set(unreached) - missing)

    def _computing(self, states: dict[str, ThreadState], now: float) -> set[str]:
        """The threads that used at least COMPUTING_SHARE of a core since they were last asked."""
        busy = set()
        for thread, state in states.items():
            if state.cpu_ns is None:
                continue
            before = self._cpu.get(thread)
            self._cpu[thread] = (state.cpu_ns, now)
            if before is not None and now > before[1]:
                if (state.cpu_ns - before[0]) / 1e9 >= COMPUTING_SHARE * (now - before[1]):
                    busy.add(thread)
        return busy
