"""Wait states of an MPI run (Scalasca's patterns): who waited for whom, how long, and where; live and from an archive.

Not the heartbeat's waits (`monitors.waits`): those are what a rank is blocked in *now*, read from
in-flight marks, and the deadlocks among them. Wait states are measured on the records of calls
that returned: the time a rank spent in an MPI call only because another rank was late (or early),
by pattern, after Scalasca's definitions (its pattern reference, "Performance properties", and
the `scout` analyser's MPI patterns):

- Late Sender: a receive (MPI_Recv, a Sendrecv's receive half, or the Wait that completes an
  MPI_Irecv) waits for its message's send to begin: min(send's start, receive's end) minus the
  receive's start. A Waitall (Waitany, Waitsome) of several receives waits for the latest sender
  only: the largest of its receives' waits, caused by that sender.
- Late Receiver: a blocking MPI_Send or MPI_Ssend waits for its receive to be posted: the receive's
  post minus the send's start, where the send was still in its call when the receive was posted.
- Wait at N×N (Allreduce, Allgather(v), Alltoall, Reduce_scatter(_block)) and Wait at Barrier:
  time in the call before the last member entered it, caused by that last member; N×N Completion
  and Barrier Completion: time in the call after the first member left it (no rank causes it).
- Late Broadcast (Bcast, Scatter(v)): a member waits for the root to enter; Early Reduce (Reduce,
  Gather(v)): the root waits for the first other member to enter, that member the cause.
- A nonblocking or persistent collective (Iallreduce, a Start of Allreduce_init) is in its blocking
  op's pattern with its post as its entry, and waits only in the completion call that completed it
  (found as a request's: the same rank and end): from that call's start.

A wait whose size is within the clock error between the two ranks (`ClockBounds`) is reported as
uncertain, not as a wait. Point-to-point waits need both ends' records, matched by MPI's
non-overtaking rule (`eventspace.mpi.matching.MessageMatcher`); collectives need every member's record of
a round (a communicator's collectives are numbered alike on every member).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import numpy as np

from eventspace import clock as clocks
from eventspace import trace
from eventspace.mpi import encoding as e
from eventspace.mpi.matching import ENDS, MessageMatcher, channel_ends, end_positions, post_rows
from eventspace.scope import EventScope

from .scoped import ScopeMon


@dataclass(frozen=True)
class Pattern:
    """One wait-state pattern: `key` (its name in JSON) and `name` (Scalasca's)."""

    key: str
    name: str


PATTERNS = (Pattern("late_sender", "Late Sender"), Pattern("late_receiver", "Late Receiver"),
            Pattern("wait_nxn", "Wait at N×N"), Pattern("nxn_completion", "N×N Completion"),
            Pattern("wait_barrier", "Wait at Barrier"), Pattern("barrier_completion", "Barrier Completion"),
            Pattern("late_broadcast", "Late Broadcast"), Pattern("early_reduce", "Early Reduce"))
LATE_SENDER, LATE_RECEIVER, WAIT_NXN, NXN_COMPLETION, WAIT_BARRIER, BARRIER_COMPLETION, LATE_BROADCAST, \
    EARLY_REDUCE = range(len(PATTERNS))

UNKNOWN = np.iinfo(np.int64).max   # a clock bound that is not known: nothing between those ranks is certain
_LATEST = 1 << 62                  # no clock reads this (eventspace.ignored's bound on a record's times)
_CHUNK = 1 << 16                   # records analysed at a time
LATE_ROUNDS = 1024                 # how far behind the newest complete round a round may still complete

# What an MPI op is to this analysis, by op - FIRST_OP.
_OTHER, _WAIT, _TEST, _NXN, _BARRIER, _ONE_TO_N, _N_TO_ONE, _COLLECTIVE = range(8)
_KIND = np.full(e.LAST_OP - e.FIRST_OP + 1, _OTHER, dtype=np.int8)
for _ops, _kind in ((e.COLLECTIVES, _COLLECTIVE), ((e.WAIT, e.WAITALL, e.WAITANY, e.WAITSOME), _WAIT),
                    ((e.TEST, e.TESTALL, e.TESTANY, e.TESTSOME), _TEST),
                    ((e.ALLREDUCE, e.ALLGATHER, e.ALLGATHERV, e.ALLTOALL, e.REDUCE_SCATTER,
                      e.REDUCE_SCATTER_BLOCK), _NXN),
                    ((e.BARRIER,), _BARRIER), ((e.BCAST, e.SCATTER, e.SCATTERV), _ONE_TO_N),
                    ((e.REDUCE, e.GATHER, e.GATHERV), _N_TO_ONE)):
    _KIND[np.array(sorted(_ops)) - e.FIRST_OP] = _kind
# A nonblocking or persistent collective (MPI_Iallreduce, MPI_Allreduce_init) is of its blocking op's kind.
for _posted, _blocking in e.BLOCKING_OF.items():
    _KIND[_posted - e.FIRST_OP] = _KIND[_blocking - e.FIRST_OP]
_POSTED_COLLECTIVES = np.array(sorted(e.POSTED_COLLECTIVES), dtype=np.int64)
_POSTED = np.array(sorted(e.RECEIVES & e.NONBLOCKING), dtype=np.int64)
_HALVES = np.array([e.SENDRECV_RECV, e.SENDRECV_REPLACE_RECV], dtype=np.int64)   # a Sendrecv's time once
_BLOCKING_SENDS = np.array([e.SEND, e.SSEND], dtype=np.int64)   # those that may wait for their receive

# A message end as the analysis keeps it: its rank, communicator, op and times, and for a receive
# the completion call it waited in (an index into `_calls`; -1: a blocking receive; -2: none seen).
_END = np.dtype([("rank", "i8"), ("comm", "i8"), ("op", "i8"), ("t_start", "i8"), ("t_end", "i8"),
                 ("call", "i8")])
_BLOCKING, _NO_CALL = -1, -2
# A request record waiting for the completion call that saw it done (same rank, same t_end).
_REQUEST = np.dtype(ENDS.descr + [("end", "?")] + [(f"p_{n}", "i8") for n in _END.names])
# A completion call (Wait..., Test...) and its requests: how many it completed (`expected`), how
# many request records are linked to it, how many of them are receive ends and matched, and the
# largest Late Sender wait of its receives so far (with its cause and communicator).
_CALL = np.dtype([("id", "i8"), ("rank", "i8"), ("t_start", "i8"), ("t_end", "i8"), ("op", "i8"),
                  ("expected", "i8"), ("linked", "i8"), ("receives", "i8"), ("matched", "i8"),
                  ("wait", "i8"), ("cause", "i8"), ("comm", "i8")])
# One member's record of one collective round: key = communicator << 32 | round; from `t_start` (its call,
# or a nonblocking one's post) to `t_end`, waiting from `t_wait` on (its call's start, or the start of
# the completion call that completed a nonblocking one: what it did between post and completion is not
# waiting).
_ROUND = np.dtype([("key", "i8"), ("member", "i8"), ("rank", "i8"), ("op", "i8"), ("root", "i8"),
                   ("t_start", "i8"), ("t_end", "i8"), ("t_wait", "i8")])
# One wait found: its pattern, the rank that waited, the rank that caused it (-1: none), the rank
# whose clock it was measured against (`ref`), the communicator, the call waited in, how long (ns).
_WAITED = np.dtype([("pattern", "i8"), ("waiter", "i8"), ("cause", "i8"), ("ref", "i8"), ("comm", "i8"),
                    ("op", "i8"), ("ns", "i8")])


@dataclass(frozen=True)
class ClockBounds:
    """How far apart two ranks' times may be once each is on the monitor's clock. Ranks on one host
    read one clock (CLOCK_MONOTONIC; the compiled collector's TSC is scaled to it), so their times
    compare as they are: 0 between them. A host's offset from the monitor is estimated NTP-style
    (eventspace.clock) and is off by at most `error_ns[host]` (half the least round trip), so two
    ranks on different hosts may be off by the sum of their hosts' errors; None where it is not
    known (an archive keeps no offsets), and then nothing between them is certain. `hosts[r]`:
    rank r's host."""

    hosts: tuple[str, ...]
    error_ns: dict[str, int | None]

    @classmethod
    def one_clock(cls, ranks: int) -> ClockBounds:
        """Every rank on one host."""
        return cls(("",) * ranks, {"": 0})

    def matrix(self) -> np.ndarray:
        """[a, b]: the bound between ranks a and b, ns (UNKNOWN where it is not known)."""
        names = sorted(set(self.hosts))
        host = np.array([names.index(h) for h in self.hosts], dtype=np.int64)
        errors = [self.error_ns.get(h) for h in names]
        error = np.array([UNKNOWN if x is None else x for x in errors], dtype=np.int64)[host]
        unknown = np.array([x is None for x in errors], dtype=bool)[host]
        out = np.where(unknown[:, None] | unknown[None, :], UNKNOWN,
                       np.minimum(error, UNKNOWN // 2)[:, None] + np.minimum(error, UNKNOWN // 2)[None, :])
        out[host[:, None] == host[None, :]] = 0
        return out

    @property
    def bound_ns(self) -> int | None:
        """The largest bound between two ranks, None if one is not known."""
        if not len(self.hosts):
            return 0
        largest = int(self.matrix().max())
        return None if largest == UNKNOWN else largest

    def as_dict(self) -> dict:
        return {"hosts": len(set(self.hosts)), "bound_ns": self.bound_ns}

    def line(self) -> str:
        """`4 ranks on 1 host: one clock, every wait is certain`, or the bound between hosts."""
        hosts = len(set(self.hosts))
        where = f"{len(self.hosts)} rank{'s' if len(self.hosts) != 1 else ''} on {hosts} host{'s' if hosts != 1 else ''}"
        bound = self.bound_ns
        if hosts <= 1:
            return f"{where}: one clock, so every wait is certain (clock bound 0)"
        if bound is None:
            return (f"{where}, whose clock offsets are not known (an archive keeps none): a wait between ranks on "
                    "different hosts is uncertain")
        return (f"{where}: clock bound {bound / 1e3:,.1f} µs between hosts (half the least round trip of each "
                "host's offset estimate, summed), 0 within a host; a wait within it is uncertain")


def host_clocks(hosts: dict[str, str], estimates: dict[str, clocks.ClockEstimate],
                ranks: int) -> tuple[dict[str, int], ClockBounds]:
    """({node: offset to take off its times}, ClockBounds) from every rank node's clock estimate
    (eventspace.clock.synchronise; `hosts`: node -> host): each host's offset is the estimate of
    least round trip among its nodes, taken off all of them (one clock per host)."""
    best: dict[str, clocks.ClockEstimate] = {}
    for node, estimate in estimates.items():
        host = hosts.get(node, node)
        if host not in best or estimate.delay_ns < best[host].delay_ns:
            best[host] = estimate
    offsets = {node: best[hosts.get(node, node)].offset_ns for node in estimates}
    per_rank = tuple(hosts.get(f"r{r}", f"r{r}") for r in range(ranks))
    return offsets, ClockBounds(per_rank, {h: best[h].delay_ns // 2 if h in best else None for h in set(per_rank)})


@dataclass(frozen=True)
class PatternTotal:
    """One pattern over the records analysed: its certain waits (`waiting_ns`, `instances`, and
    their `share` of the MPI time), and the waits within the clock bound (`uncertain_*`)."""

    key: str
    name: str
    waiting_ns: int
    instances: int
    share: float
    uncertain_ns: int
    uncertain_instances: int


@dataclass(frozen=True)
class TopWait:
    """Rank `rank` waited `waiting_ns` in `calls` calls of `op` on communicator `comm`, in
    `pattern`, for rank `peer` (-1: no rank caused it)."""

    pattern: str
    rank: int
    op: str
    peer: int
    comm: int
    calls: int
    waiting_ns: int


@dataclass(frozen=True)
class WaitReport:
    """What the wait-state analysis found in the records it was given (plain data; times in ns).

    `patterns`: every pattern's totals, in PATTERNS order. `per_rank[r][p]`: rank r's certain
    waiting in pattern p; `pairs[w][c]`: how long rank w waited because of rank c (every pattern
    with a cause); `communicators`: per communicator its MPI time and its waiting per pattern; `top`:
    the waits grouped by (rank, pattern, op, peer, communicator), largest first. `mpi_ns`: time in
    MPI calls of the records analysed (a Sendrecv once), in total and per rank. `clock`: the
    clocks' bound (ClockBounds.as_dict). `pending`: records whose other end has not come (sends,
    receives, completion calls, members' records of rounds not every member has finished), and
    `complete`: no more will come (the analysis was finished: what still waited was settled).
    `discarded`: records a live scope lost before reading them (then the figures are short)."""

    ranks: int
    records: int
    mpi_ns: int
    mpi_ns_per_rank: list[int]
    patterns: list[PatternTotal]
    per_rank: list[list[int]]
    pairs: list[list[int]]
    communicators: dict[int, dict]
    top: list[TopWait]
    clock: dict
    pending: dict[str, int]
    complete: bool
    ignored: int = 0
    discarded: int = 0
    clock_line: str = field(default="", compare=False)

    @property
    def waiting_ns(self) -> int:
        """Certain waiting, every pattern."""
        return sum(p.waiting_ns for p in self.patterns)

    def pattern(self, key: str) -> PatternTotal:
        return next(p for p in self.patterns if p.key == key)

    def as_dict(self) -> dict:
        return {"ranks": self.ranks, "records": self.records, "mpi_ns": self.mpi_ns,
                "mpi_ns_per_rank": self.mpi_ns_per_rank, "patterns": [p.__dict__ for p in self.patterns],
                "per_rank": self.per_rank, "pairs": self.pairs,
                "communicators": {str(c): v for c, v in self.communicators.items()},
                "top": [t.__dict__ for t in self.top], "clock": self.clock, "pending": self.pending,
                "complete": self.complete, "ignored": self.ignored, "discarded": self.discarded}


class WaitStates:
    """The wait-state analysis of an MPI run, fed its records as they come (`add`), in batches of any
    size (a monitor's pulls) or at once (an archive); `finish` when no more will come; `report` at
    any time. The same records give the same report whatever the batches (after `finish`): a send
    and its receive may come in different batches, and whatever waits for its other end is kept.

    `catalogue`: the run's (collector ids to ranks and communicators; a live run's grows with its
    communicators: see `follow`). `within`: the ids of the collectors whose records come (a scope's
    view; default: all of them): a message end whose other end is outside, and the rounds of a
    communicator not all of whose members are inside, are not kept waiting for what cannot come.
    `clock`: the bounds between ranks' clocks (default: one clock). Records are taken to be on one
    time base (a scope corrects each node's offset).
    Records of other collectors, of non-MPI ops or with impossible times are left out (`ignored`).
    Memory: what waits for its other end (normally a pull's worth), and one row per rank pair.
    """

    def __init__(self, catalogue, clock: ClockBounds | None = None, *, within=None, top: int = 10):
        self.follow(catalogue, within)
        self.ranks = n = self._collectors.ranks
        self.clock = clock or ClockBounds.one_clock(n)
        if len(self.clock.hosts) != n:
            raise ValueError(f"the clock bounds name {len(self.clock.hosts)} ranks, the run has {n}")
        self._bound = self.clock.matrix()
        if top < 0:
            raise ValueError(f"top {top}: give how many of the largest waits to list, 0 or more")
        self.top = top
        self._matcher = MessageMatcher(_END)
        self._awaiting = np.empty(0, _REQUEST)
        self._calls = np.empty(0, _CALL)
        self._next_call = 0
        self._rounds = np.empty(0, _ROUND)
        self._settled: dict[int, int] = {}    # communicator -> the highest round complete
        patterns = len(PATTERNS)
        self._waiting = np.zeros(patterns, np.int64)
        self._instances = np.zeros(patterns, np.int64)
        self._uncertain = np.zeros(patterns, np.int64)
        self._uncertain_instances = np.zeros(patterns, np.int64)
        self._per_rank = np.zeros((n, patterns), np.int64)
        self._pairs = np.zeros((n, n), np.int64)
        self._per_comm: dict[int, np.ndarray] = {}
        self._mpi = np.zeros(n, np.int64)
        self._mpi_comm: dict[int, int] = {}
        self._groups: dict[tuple[int, int, int, int, int], list[int]] = {}
        self.records = 0
        self.ignored = 0
        self.complete = False

    # -- feeding --------------------------------------------------------------------------------

    def follow(self, catalogue, within=None) -> None:
        """Take the run's catalogue as it has grown (an MPI run's new communicators append
        collectors; the ids known keep their meaning), and the collectors whose records come."""
        every = collectors = e.Collectors(catalogue)
        if within is not None:
            collectors = every.within(within)
            if collectors.p2p.sum() == every.p2p.sum():
                within = None   # every point-to-point collector is in: nothing to leave out
        p2p = np.flatnonzero(collectors.p2p)
        self._collectors, self._entries = collectors, len(catalogue.entries)
        # Where point-to-point ends may come from: communicator << 21 | rank of each p2p collector.
        self._p2p = None if within is None else np.unique(collectors.comm[p2p] << 21 | collectors.rank[p2p])

    def add(self, records: np.ndarray) -> int:
        """Analyse a batch of trace records (trace.DTYPE), of any size; how many were MPI records of the run."""
        if len(records) > _CHUNK:   # as fast per record as the whole, in memory a cache holds
            return sum(self.add(records[i:i + _CHUNK]) for i in range(0, len(records), _CHUNK))
        c = self._collectors
        self.records += len(records)
        cid = c.index(records["collector"])
        op = records["op"].astype(np.int64)
        rank = c.rank[cid]
        usable = ((op >= e.FIRST_OP) & (op <= e.LAST_OP) & (rank >= 0) & (rank < self.ranks)
                  & (records["t_end"] < _LATEST) & (records["t_start"] <= records["t_end"]))
        self.ignored += int(len(records) - usable.sum())
        if not usable.all():
            records, cid, op, rank = records[usable], cid[usable], op[usable], rank[usable]
        if not len(records):
            return 0
        t_start, t_end = records["t_start"].astype(np.int64), records["t_end"].astype(np.int64)
        flags = records["flags"]
        request = flags & e.REQUEST != 0
        self._count_mpi_time(c.comm[cid], op, rank, t_start, t_end, request)
        self._take_calls(records, op, rank, t_start, t_end, request)
        ends = self._end_rows(records, cid, op, rank, t_start, t_end, _BLOCKING)
        sends, receives = end_positions(records, c)
        send_ends = channel_ends(records, sends, c, sending=True)
        kept = self._reachable(send_ends["comm"], send_ends["dst"])
        sends, send_ends = sends[kept], send_ends[kept]
        receive_ends = channel_ends(records, receives, c, sending=False)
        receives = receives[self._reachable(receive_ends["comm"], receive_ends["src"])]
        posted = np.isin(op, _POSTED) & ~request
        posts = post_rows(cid[posted], t_start[posted])
        # Request records wait for their completion call; one of a posted receive that is no
        # message's end (freed, cancelled, from PROC_NULL) ends its post at once: it orders nothing.
        is_end = np.zeros(len(records), bool)
        is_end[receives] = True
        waiting = np.flatnonzero(request & (flags & e.FREED == 0))
        closed = request & ~is_end & np.isin(op, _POSTED)
        self._awaiting = np.concatenate([self._awaiting, _requests(channel_ends(records, waiting, c, sending=False),
                                                                   is_end[waiting], ends[waiting])])
        linked, posted_rounds = self._link()
        blocking = receives[~request[receives]]
        found = self._pair(*self._matcher.add(
            send_ends, ends[sends], np.concatenate([channel_ends(records, blocking, c, sending=False), _ends_of(linked)]),
            np.concatenate([ends[blocking], _payload_of(linked)]),
            posts, np.concatenate([post_rows(cid[closed], t_start[closed]), post_rows(linked["ring"], linked["t"])])))
        collective = (c.collective[cid] & (_KIND[op - e.FIRST_OP] >= _NXN) & (flags & trace.ERROR == 0)
                      & ~np.isin(op, _POSTED_COLLECTIVES))   # those come by their request records, linked
        found.append(self._take_rounds(self._round_rows(records[collective], cid[collective], rank[collective],
                                                        t_start[collective], t_end[collective])))
        found.append(self._take_rounds(posted_rounds))
        found.append(self._settle_calls(everything=False))
        self._count(np.concatenate(found))
        return len(records)

    def _reachable(self, comm: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """Whether the point-to-point collector of `rank` on `comm` is among those whose records come."""
        if self._p2p is None:
            return np.ones(len(comm), bool)
        return np.isin(comm << 21 | rank, self._p2p)

    def finish(self) -> None:
        """No more records will come (the run ended, or an archive was read whole): settle what
        still waits. A receive whose completion call never came waited in none (it still ends a
        message); the held receives are matched; a Waitall with receives whose sends never came
        keeps the largest wait of those that did; rounds some member never finished are left out
        (`pending` keeps their count)."""
        if self.complete:
            return
        orphans = self._awaiting[self._awaiting["end"]]
        orphans["p_call"] = _NO_CALL
        posted = self._awaiting[np.isin(self._awaiting["p_op"], _POSTED_COLLECTIVES)]
        rounds = self._take_rounds(self._posted_round_rows(posted, posted["p_t_end"]))   # in no call seen: no wait
        self._awaiting = self._awaiting[:0]
        found = self._pair(*self._matcher.add(np.empty(0, ENDS), np.empty(0, _END), _ends_of(orphans),
                                              _payload_of(orphans), closes=post_rows(orphans["ring"], orphans["t"])))
        found += self._pair(*self._matcher.finish())
        found.append(rounds)
        found.append(self._settle_calls(everything=True))
        self._count(np.concatenate(found))
        self.complete = True

    # -- MPI time ---------------------------------------------------------------------------------

    def _count_mpi_time(self, comm, op, rank, t_start, t_end, request) -> None:
        """Time in MPI calls, per rank and communicator: every call record once (not a request record,
        which spans a post to its completion, nor a Sendrecv's second half, which repeats the first)."""
        call = ~request & ~np.isin(op, _HALVES)
        took = (t_end - t_start)[call]
        self._mpi += _sums(rank[call], took, self.ranks)
        comms, at = np.unique(comm[call], return_inverse=True)
        for k, total in zip(comms.tolist(), _sums(at.reshape(-1), took, len(comms)).tolist()):
            self._mpi_comm[k] = self._mpi_comm.get(k, 0) + total

    # -- point to point -------------------------------------------------------------------------

    def _end_rows(self, records, cid, op, rank, t_start, t_end, call) -> np.ndarray:
        out = np.empty(len(records), _END)
        out["rank"], out["comm"], out["op"] = rank, self._collectors.comm[cid], op
        out["t_start"], out["t_end"], out["call"] = t_start, t_end, call
        return out

    def _take_calls(self, records, op, rank, t_start, t_end, request) -> None:
        """Keep the completion calls that completed requests, until their request records are in."""
        kind = _KIND[op - e.FIRST_OP]
        mine = ((kind == _WAIT) | (kind == _TEST)) & ~request & (records["flags"] & e.EMPTY == 0) & (records["arg"] > 0)
        calls = np.zeros(int(mine.sum()), _CALL)
        calls["id"] = self._next_call + np.arange(len(calls))
        self._next_call += len(calls)
        calls["rank"], calls["t_start"], calls["t_end"], calls["op"] = rank[mine], t_start[mine], t_end[mine], op[mine]
        calls["expected"], calls["cause"], calls["comm"] = records["arg"][mine], -1, -1
        self._calls = np.concatenate([self._calls, calls])

    def _link(self) -> tuple[np.ndarray, np.ndarray]:
        """Link the request records that wait to their completion calls (the same rank and t_end);
        (the receive ends among those linked, each with its call, as _REQUEST rows; the nonblocking
        collectives' among them as _ROUND rows, waiting from their completion call's start)."""
        waiting, calls = self._awaiting, self._calls
        if not len(waiting) or not len(calls):
            return waiting[:0], np.empty(0, _ROUND)
        at = _find(calls["rank"], calls["t_end"], waiting["p_rank"], waiting["p_t_end"])
        linked = at >= 0
        np.add.at(calls["linked"], at[linked], 1)
        ends = linked & waiting["end"]
        np.add.at(calls["receives"], at[ends], 1)
        out = waiting[ends]
        out["p_call"] = calls["id"][at[ends]]
        posted = linked & np.isin(waiting["p_op"], _POSTED_COLLECTIVES)
        rounds = self._posted_round_rows(waiting[posted], calls["t_start"][at[posted]])
        self._awaiting = waiting[~linked]
        return out, rounds

    def _pair(self, sends: np.ndarray, receives: np.ndarray) -> list[np.ndarray]:
        """The waits that matched messages show at once (Late Sender at a blocking receive, Late
        Receiver at a blocking send), and their receives' part in their completion calls."""
        found = []
        blocking = receives["call"] == _BLOCKING
        s, r = sends[blocking], receives[blocking]
        found.append(_waits(LATE_SENDER, r["rank"], s["rank"], r["comm"], r["op"],
                            np.minimum(s["t_start"], r["t_end"]) - r["t_start"]))
        late = np.isin(sends["op"], _BLOCKING_SENDS) & (sends["t_end"] >= receives["t_start"])
        s, r = sends[late], receives[late]
        found.append(_waits(LATE_RECEIVER, s["rank"], r["rank"], s["comm"], s["op"], r["t_start"] - s["t_start"]))
        called = receives["call"] >= 0
        if called.any():
            self._wait_in_calls(sends[called], receives[called])
        return found

    def _wait_in_calls(self, sends: np.ndarray, receives: np.ndarray) -> None:
        """A completion call's matched receives: each counts, and the largest Late Sender wait of
        its receives is kept (ties: the lower cause rank, then communicator, whatever came first)."""
        calls = self._calls
        at = np.searchsorted(calls["id"], receives["call"])
        np.add.at(calls["matched"], at, 1)
        ns = np.minimum(sends["t_start"], calls["t_end"][at]) - calls["t_start"][at]
        waited = (_KIND[calls["op"][at] - e.FIRST_OP] == _WAIT) & (ns > 0)
        at, ns, cause, comm = at[waited], ns[waited], sends["rank"][waited], receives["comm"][waited]
        if not len(at):
            return
        order = np.lexsort((-comm, -cause, ns, at))
        last = order[np.r_[at[order][1:] != at[order][:-1], True]]
        at, ns, cause, comm = at[last], ns[last], cause[last], comm[last]
        held = calls[at]
        better = (ns > held["wait"]) | ((ns == held["wait"]) & ((cause < held["cause"]) | (
            (cause == held["cause"]) & (comm < held["comm"]))))
        calls["wait"][at[better]], calls["cause"][at[better]], calls["comm"][at[better]] = \
            ns[better], cause[better], comm[better]

    def _settle_calls(self, everything: bool) -> np.ndarray:
        """Late Sender in the completion calls that have all their request records linked and every
        receive among them matched (`everything`: all calls); they are let go."""
        calls = self._calls
        done = np.ones(len(calls), bool) if everything else \
            (calls["linked"] >= calls["expected"]) & (calls["matched"] >= calls["receives"])
        settled = calls[done & (calls["wait"] > 0)]
        self._calls = calls[~done]
        return _waits(LATE_SENDER, settled["rank"], settled["cause"], settled["comm"], settled["op"], settled["wait"])

    # -- collectives ------------------------------------------------------------------------------

    def _round_rows(self, records, cid, rank, t_start, t_end) -> np.ndarray:
        """_ROUND rows of members' blocking collective records (waiting from their call's start)."""
        c = self._collectors
        rows = np.empty(len(records), _ROUND)
        rows["key"] = c.comm[cid] << 32 | records["arg"].astype(np.int64)
        rows["member"], rows["rank"], rows["op"] = c.member[cid], rank, records["op"]
        root = records["element"].astype(np.int64)
        rows["root"] = np.where(root == e.PEER_NONE, -1, root)
        rows["t_start"], rows["t_end"], rows["t_wait"] = t_start, t_end, t_start
        return rows

    def _posted_round_rows(self, requests: np.ndarray, t_wait: np.ndarray) -> np.ndarray:
        """_ROUND rows of nonblocking or persistent collectives' request records (_REQUEST rows: the
        round as their tag, the root as their source), waiting from `t_wait` on."""
        rows = np.empty(len(requests), _ROUND)
        rows["key"] = requests["comm"] << 32 | requests["tag"]
        rows["member"] = self._collectors.member[requests["ring"]]
        rows["rank"], rows["op"] = requests["p_rank"], requests["p_op"]
        rows["root"] = np.where(requests["src"] == e.PEER_NONE, -1, requests["src"])
        rows["t_start"], rows["t_end"], rows["t_wait"] = requests["p_t_start"], requests["p_t_end"], t_wait
        return rows

    def _take_rounds(self, rows: np.ndarray) -> np.ndarray:
        """Count in members' round rows; the waits of the rounds every member has finished."""
        c = self._collectors
        pending = np.concatenate([self._rounds, rows])
        if not len(pending):
            return np.empty(0, _WAITED)
        pending = pending[np.lexsort((pending["member"], pending["key"]))]
        again = np.r_[False, (pending["key"][1:] == pending["key"][:-1]) & (pending["member"][1:] == pending["member"][:-1])]
        pending = pending[~again]
        key = pending["key"]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        counts = np.diff(np.r_[first, len(key)])
        comm = key[first] >> 32
        size = np.array([c.sizes.get(k, 0) for k in comm.tolist()], dtype=np.int64)
        whole = np.repeat(counts >= size, counts)
        complete, pending = pending[whole], pending[~whole]
        for k, r in zip(comm[counts >= size].tolist(), (key[first][counts >= size] & 0xFFFFFFFF).tolist()):
            self._settled[k] = max(self._settled.get(k, -1), r)
        # A round older than one every member has finished never will be (a record lost or not made),
        # but for nonblocking collectives, which complete out of order: LATE_ROUNDS rounds older.
        settled = np.array([self._settled.get(k, -1) for k in (pending["key"] >> 32).tolist()], dtype=np.int64)
        self._rounds = pending[(pending["key"] & 0xFFFFFFFF) > settled - LATE_ROUNDS]
        return _round_waits(complete[np.repeat(size >= 2, counts)[whole]])

    # -- totals ------------------------------------------------------------------------------------

    def _count(self, found: np.ndarray) -> None:
        found = found[found["ns"] > 0]
        if not len(found):
            return
        bound = self._bound[found["waiter"], np.where(found["ref"] >= 0, found["ref"], found["waiter"])]
        certain = found["ns"] > bound
        patterns = len(PATTERNS)
        unsure = found[~certain]
        self._uncertain += _sums(unsure["pattern"], unsure["ns"], patterns)
        self._uncertain_instances += np.bincount(unsure["pattern"], minlength=patterns)
        found = found[certain]
        if not len(found):
            return
        self._waiting += _sums(found["pattern"], found["ns"], patterns)
        self._instances += np.bincount(found["pattern"], minlength=patterns)
        self._per_rank += _sums(found["waiter"] * patterns + found["pattern"], found["ns"],
                                self.ranks * patterns).reshape(self.ranks, patterns)
        caused = found[found["cause"] >= 0]
        self._pairs += _sums(caused["waiter"] * self.ranks + caused["cause"], caused["ns"],
                             self.ranks * self.ranks).reshape(self.ranks, self.ranks)
        comms, at = np.unique(found["comm"], return_inverse=True)
        at = at.reshape(-1)
        per_comm = _sums(at * patterns + found["pattern"], found["ns"], len(comms) * patterns).reshape(-1, patterns)
        for k, row in zip(comms.tolist(), per_comm):
            self._per_comm[k] = self._per_comm.get(k, np.zeros(patterns, np.int64)) + row
        fields = ("pattern", "waiter", "op", "cause", "comm")
        order = np.lexsort(tuple(found[f] for f in reversed(fields)))
        ordered = found[order]
        new = np.ones(len(ordered), bool)
        new[1:] = np.any(np.stack([ordered[f][1:] != ordered[f][:-1] for f in fields]), axis=0)
        first = np.flatnonzero(new)
        totals = np.add.reduceat(ordered["ns"], first)
        calls = np.diff(np.r_[first, len(ordered)])
        for row, n, total in zip(ordered[first].tolist(), calls.tolist(), totals.tolist()):
            group = self._groups.setdefault(tuple(row[i] for i in (0, 1, 5, 2, 4)), [0, 0])
            group[0] += n
            group[1] += total

    def report(self) -> WaitReport:
        """What the records so far say (see WaitReport)."""
        mpi = int(self._mpi.sum())
        patterns = [PatternTotal(p.key, p.name, int(w), int(n), (int(w) / mpi) if mpi else 0.0, int(u), int(un))
                    for p, w, n, u, un in zip(PATTERNS, self._waiting, self._instances, self._uncertain,
                                              self._uncertain_instances)]
        comms = {k: {"mpi_ns": int(self._mpi_comm.get(k, 0)),
                     "waiting_ns": {p.key: int(v) for p, v in zip(PATTERNS, self._per_comm.get(k, np.zeros(len(PATTERNS))))}}
                 for k in sorted(set(self._mpi_comm) | set(self._per_comm))}
        groups = sorted(self._groups.items(), key=lambda kv: (-kv[1][1], kv[0]))[:self.top]
        top = [TopWait(PATTERNS[p].key, waiter, e.NAMES.get(op, f"op {op}"), cause, comm, calls, ns)
               for (p, waiter, op, cause, comm), (calls, ns) in groups]
        sends, receives = self._matcher.unmatched
        pending = {"sends": sends, "receives": receives + int(self._awaiting["end"].sum()),
                   "completion_calls": len(self._calls), "round_records": len(self._rounds)}
        return WaitReport(self.ranks, self.records, mpi, self._mpi.tolist(), patterns, self._per_rank.tolist(),
                          self._pairs.tolist(), comms, top, self.clock.as_dict(), pending, self.complete,
                          self.ignored, clock_line=self.clock.line())


def _waits(pattern: int, waiter, cause, comm, op, ns, ref=None) -> np.ndarray:
    out = np.empty(len(ns), _WAITED)
    out["pattern"], out["waiter"], out["cause"], out["comm"], out["op"], out["ns"] = pattern, waiter, cause, comm, op, ns
    out["ref"] = cause if ref is None else ref
    return out[out["ns"] > 0]


def _round_waits(rows: np.ndarray) -> np.ndarray:
    """The waits of complete rounds (rows: every member's record of each, grouped by key)."""
    if not len(rows):
        return np.empty(0, _WAITED)
    rows = rows[np.lexsort((rows["member"], rows["t_start"], rows["key"]))]
    key = rows["key"]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    sizes = np.diff(np.r_[first, len(rows)])
    last = first + sizes - 1
    group = np.repeat(np.arange(len(first)), sizes)
    agree = ((np.minimum.reduceat(rows["op"], first) == np.maximum.reduceat(rows["op"], first))
             & (np.minimum.reduceat(rows["root"], first) == np.maximum.reduceat(rows["root"], first)))
    kind = np.where(agree, _KIND[rows["op"][first] - e.FIRST_OP], _OTHER)[group]
    comm, op, rank, t_start, t_end = key >> 32, rows["op"], rows["rank"], rows["t_start"], rows["t_end"]
    t_wait = rows["t_wait"]
    entered_last, last_rank = t_start[last][group], rank[last][group]
    by_end = np.lexsort((rows["member"], t_end, key))
    left_first, first_leaver = t_end[by_end[first]][group], rank[by_end[first]][group]
    found = []
    for pattern, completion, which in ((WAIT_NXN, NXN_COMPLETION, _NXN), (WAIT_BARRIER, BARRIER_COMPLETION, _BARRIER)):
        mine = (kind == which) & (np.arange(len(rows)) != last[group])
        found.append(_waits(pattern, rank[mine], last_rank[mine], comm[mine], op[mine],
                            np.minimum(entered_last, t_end)[mine] - t_wait[mine]))
        mine = kind == which
        found.append(_waits(completion, rank[mine], -1, comm[mine], op[mine],
                            (t_end - np.maximum(np.maximum(left_first, entered_last), t_wait))[mine],
                            ref=first_leaver[mine]))
    root = rows["root"]
    is_root = rank == root
    root_entered = np.maximum.reduceat(np.where(is_root, t_start, -1), first)[group]
    mine = (kind == _ONE_TO_N) & ~is_root & (root_entered >= 0)
    found.append(_waits(LATE_BROADCAST, rank[mine], root[mine], comm[mine], op[mine],
                        np.minimum(root_entered, t_end)[mine] - t_wait[mine]))
    earliest = np.where(is_root[first], np.minimum(first + 1, last), first)[group]   # the first other member in
    mine = (kind == _N_TO_ONE) & is_root & (earliest != np.arange(len(rows)))
    found.append(_waits(EARLY_REDUCE, rank[mine], rank[earliest][mine], comm[mine], op[mine],
                        np.minimum(t_start[earliest], t_end)[mine] - t_wait[mine]))
    return np.concatenate(found)


def _sums(index: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Per index, the sum of `values` (int64 ns), exactly."""
    out = np.zeros(size, np.int64)
    if len(index):
        np.add.at(out, index, values)
    return out


def _requests(ends: np.ndarray, is_end: np.ndarray, payload: np.ndarray) -> np.ndarray:
    out = np.empty(len(ends), _REQUEST)
    for name in ENDS.names:
        out[name] = ends[name]
    out["end"] = is_end
    for name in _END.names:
        out[f"p_{name}"] = payload[name]
    return out


def _ends_of(requests: np.ndarray) -> np.ndarray:
    out = np.empty(len(requests), ENDS)
    for name in ENDS.names:
        out[name] = requests[name]
    return out


def _payload_of(requests: np.ndarray) -> np.ndarray:
    out = np.empty(len(requests), _END)
    for name in _END.names:
        out[name] = requests[f"p_{name}"]
    return out


def _find(rank: np.ndarray, t_end: np.ndarray, want_rank: np.ndarray, want_t_end: np.ndarray) -> np.ndarray:
    """For each (want_rank, want_t_end), the index of the row of (rank, t_end) equal to it, or -1
    (rows are unique; two ranks seldom end a call in the same nanosecond, and then each is looked for)."""
    found = np.full(len(want_rank), -1, np.int64)
    if not len(rank) or not len(want_rank):
        return found
    order = np.argsort(t_end, kind="stable")
    ends = t_end[order]
    lo, hi = np.searchsorted(ends, want_t_end, "left"), np.searchsorted(ends, want_t_end, "right")
    one = hi - lo == 1
    at = order[np.minimum(lo, len(order) - 1)]
    found[one] = np.where(rank[at[one]] == want_rank[one], at[one], -1)
    for i in np.flatnonzero(hi - lo > 1).tolist():
        same = order[lo[i]:hi[i]]
        same = same[rank[same] == want_rank[i]]
        found[i] = same[0] if len(same) else -1
    return found


def archive_waits(archive, top: int = 10) -> WaitReport:
    """The wait states of every record in an MPI run's archive (eventspace.archive.Archive, opened).
    Its ranks' records are on their own hosts' clocks: ranks on one host compare exactly, ranks on
    different hosts not at all (the archive keeps no clock offsets). ValueError if the archive is
    not an MPI run's (it keeps no hosts)."""
    extra = archive.info.extra
    if "hosts" not in extra:
        raise ValueError(f"{archive.path} is not the archive of an MPI run (`eventspace mpirun --archive`): "
                         "it keeps no ranks' hosts")
    try:
        hosts = json.loads(extra["hosts"])
        if not isinstance(hosts, dict) or not all(isinstance(h, str) for h in hosts.values()):
            raise ValueError
    except ValueError:
        raise ValueError(f"{archive.path}: its meta `hosts` is not a JSON object of rank to host name; the archive "
                         "is damaged (an MPI run writes it)") from None
    catalogue = archive.catalogue
    ranks = e.Collectors(catalogue).ranks
    per_rank = tuple(hosts.get(f"r{r}", f"r{r}") for r in range(ranks))
    one = len(set(per_rank)) <= 1
    states = WaitStates(catalogue, ClockBounds(per_rank, {h: 0 if one else None for h in set(per_rank)}), top=top)
    for _, records in archive.batches():   # what waits for its other end is kept between batches
        states.add(records)
    states.finish()
    return states.report()


def has_mpi(catalogue) -> bool:
    """Whether a run's catalogue has MPI collectors (an MPI run's), whose records have wait states."""
    collectors = e.Collectors(catalogue)
    return bool(collectors.p2p.any() or collectors.collective.any())


class WaitStatesMon(ScopeMon):
    """The wait states of a live MPI run: a stream scope over `view` (default: every collector;
    a wait is found where both its ends are in the view), its nodes' clocks estimated once (one
    offset per host), each pull's records fed to a WaitStates (`read`), and `finish` when the run
    has ended. ValueError for a run without MPI collectors."""

    def __init__(self, run, view: str = "all", *, timeout: float = 2.0, top: int = 10):
        self.scope = EventScope(run, view, mode="stream", timeout=timeout, name="waitstates")
        try:
            catalogue, pathmap = self.scope.catalogue, self.scope.pathmap
            collectors = e.Collectors(catalogue)
            if not has_mpi(catalogue):
                raise ValueError(f"run {pathmap.name} has no MPI collectors: wait states are found in MPI programs' "
                                 "records (`eventspace mpirun`)")
            ranks = [f"r{r}" for r in range(collectors.ranks)]
            nodes = sorted(n for n in self.scope.endpoints if n in ranks)
            estimates = clocks.synchronise(pathmap, {n: self.scope.endpoints[n] for n in nodes}, timeout=timeout)
            offsets, bounds = host_clocks({n.name: n.host for n in pathmap.nodes}, estimates, collectors.ranks)
        except BaseException:
            self.scope.close()
            raise
        self.scope.clock_offsets = offsets
        self.states = WaitStates(catalogue, bounds, within=[x.id for x in self.scope.entries], top=top)
        self._catalogue = catalogue
        self.discarded = 0

    def read(self) -> WaitReport:
        """Pull the records written since the last read and analyse them; the report so far."""
        pulled = self.scope.pull()
        self.discarded += pulled.discarded
        if self.scope.catalogue is not self._catalogue:   # the run grew: new communicators' collectors
            self._catalogue = self.scope.catalogue
            self.states.follow(self._catalogue, [x.id for x in self.scope.entries])
        self.states.add(pulled.records)
        return self.report()

    def finish(self) -> WaitReport:
        """The run has ended and its records are in (the final pull made): settle what waits; the report."""
        self.states.finish()
        return self.report()

    def report(self) -> WaitReport:
        """The report so far, without pulling."""
        return replace(self.states.report(), discarded=self.discarded)
