"""ColOpMon: where the time of collective operations goes: per operation, per tree node, per contributor."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from eventspace import clock, trace
from eventspace.catalogue import Catalogue
from eventspace.mpi.encoding import round_records
from eventspace.scope import EventScope, resolve

from .scoped import ScopeMon

TREE_ROLES = ("contribute", "arrival", "departure")


@dataclass(frozen=True)
class OpStats:
    """One kind of collective (allreduce, barrier, broadcast...) over the rounds seen.

    `latency`: from the last member's arrival to the last member's return (what the tree itself
    costs), median and 95th percentile, microseconds. `in_op`: a member's time inside the call
    (waiting for the others included). `slowest`: the member that arrived last most often (of
    members last equally often, the first in the tree's order), in
    `slowest_share` of the rounds, `lateness_us` after the median of the other members (mean over
    the rounds it was last). `worst_*`: the round whose last member was latest (one outlier that
    the mean over many rounds would dilute), that member, and its lateness. Microseconds on the
    monitor's clock (clocks synchronised)."""

    op: str
    rounds: int
    latency_median_us: float
    latency_p95_us: float
    in_op_median_us: float
    slowest: str
    slowest_share: float
    lateness_us: float
    worst_round: int = -1
    worst_member: str = ""
    worst_lateness_us: float = 0.0


@dataclass(frozen=True)
class OpenRound:
    """A round under way at the last read: the members inside the collective now (`arrived`), the
    ones it waits for (not in it yet), and for how long its first member has been in it
    (seconds, monitor clock). Members enter and leave a round within microseconds when all is
    well; a round open for long is blocked on `waiting_for`."""

    round: int
    arrived: list[str]
    waiting_for: list[str]
    open_for_s: float


@dataclass(frozen=True)
class JoinStats:
    """One inner node of the tree (a join stage), over the rounds kept (Rounds): time from its first child's
    contribution to handing the result back (`total`), the spread of its children's arrivals
    (`imbalance`: how long it waited for the last one), and the time its parent took (`up`, 0 at
    the root). Medians in microseconds."""

    stage: str
    node: str
    fan_in: int
    rounds: int
    total_median_us: float
    imbalance_median_us: float
    up_median_us: float


@dataclass(frozen=True)
class ColOpReport:
    """One tree's collective operations over the rounds kept: per op (OpStats), per join
    (JoinStats), each member's mean lateness, the records analysed (`events`), and the round open
    at the read, if any."""

    tree: str
    ops: list[OpStats] = field(default_factory=list)
    joins: list[JoinStats] = field(default_factory=list)
    lateness_us: dict[str, float] = field(default_factory=dict)   # member -> mean lateness, all rounds
    events: int = 0
    open: OpenRound | None = None

    @property
    def rounds(self) -> int:
        """Complete rounds seen, over every op."""
        return sum(o.rounds for o in self.ops)

    def as_dict(self) -> dict:
        return {"tree": self.tree, "events": self.events, "ops": [o.__dict__ for o in self.ops],
                "joins": [j.__dict__ for j in self.joins], "lateness_us": self.lateness_us,
                "open": self.open.__dict__ if self.open else None}


class ColOpMon(ScopeMon):
    """Streams a tree's contribute, arrival and departure events (a scope over `tree:NAME`) with
    clocks synchronised, and analyses the rounds every member has finished. Rounds are numbered by
    the collectors themselves (a contribute record's `arg` is the member's round; an arrival's is
    the join's arrival count, so round = arg // fan-in).

    On an MPI run each communicator C is tree `commC`, its members the ranks, and a round is one
    collective call on C (any op: rounds count every collective of the communicator); its
    contribute points are the only collectors, so the report has no joins. A nonblocking or
    persistent collective (MPI_Iallreduce, a Start of MPI_Allreduce_init) is in its round from its
    post to its completion: its request record (eventspace.mpi.encoding.round_records); its post
    record and the completion call's are left out.
    """

    def __init__(self, run, tree: str | None = None, *, scope_tree: str = "per-node", placement: str = "near",
                 sync_clocks: bool = True, timeout: float = 2.0, keep_rounds: int = 10_000):
        trees = instrumented_trees(run)
        if not trees:
            raise ValueError("the run's trees carry no collectors: instrument them "
                             "(`eventspace pathmap instrument FILE --all`)")
        if tree is None:
            if len(trees) != 1:
                raise ValueError(f"the run has trees {', '.join(trees)}; name one")
            tree = trees[0]
        elif tree not in trees:
            raise ValueError(f"tree {tree!r} carries no collectors; instrumented trees: {', '.join(trees) or 'none'}")
        self.tree = tree
        self.scope = EventScope(run, f"tree:{tree}", mode="stream", tree=scope_tree, placement=placement,
                                timeout=timeout, name=f"colop {tree}")
        pm = self.scope.pathmap
        if sync_clocks:
            nodes = sorted({e.node for e in self.scope.entries})
            estimates = clock.synchronise(pm, {n: self.scope.endpoints[n] for n in nodes})
            self.scope.clock_offsets = {n: e.offset_ns for n, e in estimates.items()}
        self.rounds = Rounds(self.scope.catalogue, tree, keep_rounds)
        self.members = self.rounds.members
        self.missing: set[str] = set()

    def read(self) -> ColOpReport:
        """Pull the events written since the last read, and see which members are inside the
        tree's collective right now (the open round); the report of every round kept."""
        pulled = self.scope.pull()
        self.missing = pulled.missing
        self.rounds.add(pulled.records)
        in_flight, _ = self.scope.in_flight_marks(skip=pulled.missing)
        inside = {}   # member -> since when it is inside (ns on the monitor's clock), with its round if marked
        for cid, mark in in_flight.items():
            entry = self.rounds.contribute.get(cid)
            if entry is not None:
                since = mark.t_start - self.scope.clock_offsets.get(entry.node, 0)
                inside[entry.thread] = (mark.arg, since) if mark.op else since
        return self.rounds.report(self.rounds.open_round(inside, time.monotonic_ns()))


class Rounds:
    """One tree's collective operations, analysed from its collectors' records (`add`): the live
    ColOpMon feeds it pulls, the sequence player (monitors.replay) an archive's records. Needs of
    the pathmap only what a catalogue keeps (Catalogue.trees: members and fan-ins).

    It keeps the records of the newest `keep_rounds` rounds or so (older ones go once every
    member has finished `keep_rounds` rounds after them) and, whatever they say, at most twice
    as many records as that many rounds should have: a run of any length, or an archive of any
    size, holds it to a bounded size."""

    def __init__(self, catalogue: Catalogue, tree: str, keep_rounds: int = 10_000):
        self.catalogue = catalogue
        self.tree = tree
        self.members = list(catalogue.trees[tree].members)
        self._order = {m: i for i, m in enumerate(self.members)}
        self.fan_in = dict(catalogue.trees[tree].fan_in)
        self.keep_rounds = keep_rounds
        self.contribute = {e.id: e for e in catalogue.entries if e.tree == tree and e.role == "contribute"}
        mine = [e for e in catalogue.entries if e.tree == tree]
        self._ids = [e.id for e in mine]
        # Per collector id: what its record's `arg` is divided by to give its round (an arrival's
        # counts its join's arrivals: fan-in of them a round).
        self._per_round = np.ones(len(catalogue.entries) + len(catalogue.system) + 1, dtype=np.int64)
        for e in mine:
            if e.role == "arrival":
                self._per_round[e.id] = max(1, self.fan_in.get(e.stage, 1))
        self._most = 2 * keep_rounds * (len(mine) + sum(self.fan_in.values()))   # records kept at most
        self._kept = 0
        self._records: list[np.ndarray] = []
        self._done: dict[str, int] = {}       # member -> the highest round it has finished

    def add(self, records: np.ndarray) -> None:
        """Count in records of the tree's collectors (others are left out)."""
        mine = records[np.isin(records["collector"], self._ids) & round_records(records["op"], records["flags"])]
        if not len(mine):
            return
        self._records.append(mine)
        self._kept += len(mine)
        contributions = mine[np.isin(mine["collector"], list(self.contribute))]
        for cid, r in zip(contributions["collector"].tolist(), contributions["arg"].tolist()):
            member = self.contribute[cid].thread
            self._done[member] = max(self._done.get(member, -1), r)
        if self._kept > self._most:
            self._prune()

    def _prune(self) -> None:
        """Let go of the rounds every member finished `keep_rounds` rounds ago, then of the oldest
        records beyond half of what may be kept."""
        records = np.concatenate(self._records)
        if len(self._done) == len(self.members):
            rounds = records["arg"].astype(np.int64) // self._per_round[records["collector"]]
            records = records[rounds >= min(self._done.values()) - self.keep_rounds]
        records = records[-(self._most // 2):]
        self._records, self._kept = [records], len(records)

    def open_round(self, inside: dict[str, int | tuple[int, int]], now_ns: int) -> OpenRound | None:
        """The lowest round a member is inside now, from `inside`: {member: since when it has been
        inside a contribution (ns, the clock of `now_ns`)}, or {member: (round, since)} where the
        collector marked the round it is in (an MPI collector does, as its mark's `arg`); else the
        round is the one after the last the member finished."""
        if not inside:
            return None
        at = {m: v if isinstance(v, tuple) else (self._done.get(m, -1) + 1, v) for m, v in inside.items()}
        current = min(r for r, _ in at.values())
        arrived = [m for m in self.members if (m in at and at[m][0] == current) or self._done.get(m, -1) >= current]
        first = min(since for r, since in at.values() if r == current)
        return OpenRound(current, arrived, [m for m in self.members if m not in arrived],
                         max(0.0, (now_ns - first) / 1e9))

    def report(self, open: OpenRound | None = None) -> ColOpReport:
        """What the rounds kept say (see the class), with `open`, the round under way."""
        records = np.concatenate(self._records) if self._records else trace.empty()
        self._records = [records] if len(records) else []
        catalogue = self.catalogue
        if not len(records):
            return ColOpReport(self.tree, events=0, open=open)
        roles = np.array([catalogue[int(c)].role for c in records["collector"]])
        ok = (records["flags"] & trace.ERROR) == 0
        ops, lateness = self._ops(records[(roles == "contribute") & ok])
        joins = self._joins(records[(roles == "arrival") & ok], records[(roles == "departure") & ok])
        return ColOpReport(self.tree, ops, joins, lateness, len(records), open)

    def _position(self, member: str) -> tuple[int, str]:
        return self._order.get(member, len(self._order)), member

    def _ops(self, contrib: np.ndarray):
        catalogue = self.catalogue
        members = [catalogue[int(c)].thread for c in contrib["collector"]]
        rounds: dict[int, dict[str, tuple]] = {}
        for r, member, rec in zip(contrib["arg"].tolist(), members, contrib):
            rounds.setdefault(r, {})[member] = (int(rec["op"]), int(rec["t_start"]), int(rec["t_end"]))
        complete = sorted(r for r, got in rounds.items() if len(got) == len(self.members))[-self.keep_rounds:]
        by_op: dict[int, list] = {}
        lateness: dict[str, list[float]] = {m: [] for m in self.members}
        for r in complete:
            got = rounds[r]
            ops = {v[0] for v in got.values()}
            if len(ops) != 1:
                continue  # members disagreed: the run reported an error for this round
            starts = {m: v[1] for m, v in got.items()}
            last = max(starts, key=starts.get)
            others = [s for m, s in starts.items() if m != last] or [starts[last]]
            late = (starts[last] - float(np.median(others))) / 1e3
            for m, s in starts.items():
                lateness[m].append((s - float(np.median([x for k, x in starts.items() if k != m] or [s]))) / 1e3)
            latency = (max(v[2] for v in got.values()) - starts[last]) / 1e3
            in_op = [(v[2] - v[1]) / 1e3 for v in got.values()]
            by_op.setdefault(ops.pop(), []).append((latency, in_op, last, late, r))
        out = []
        for code, rows in sorted(by_op.items()):
            latencies = np.array([row[0] for row in rows])
            lasts = [row[2] for row in rows]
            # Of members last equally often, the first in the tree's order: the same in every process.
            slowest = max(sorted(set(lasts), key=self._position), key=lasts.count)
            worst = max(rows, key=lambda row: row[3])
            out.append(OpStats(
                op=trace.OP_NAMES.get(code, str(code)), rounds=len(rows),
                latency_median_us=float(np.median(latencies)), latency_p95_us=float(np.percentile(latencies, 95)),
                in_op_median_us=float(np.median(np.concatenate([row[1] for row in rows]))),
                slowest=slowest, slowest_share=lasts.count(slowest) / len(rows),
                lateness_us=float(np.mean([row[3] for row in rows if row[2] == slowest])),
                worst_round=worst[4], worst_member=worst[2], worst_lateness_us=worst[3],
            ))
        return out, {m: float(np.mean(v)) for m, v in lateness.items() if v}

    def _joins(self, arrivals: np.ndarray, departures: np.ndarray) -> list[JoinStats]:
        catalogue = self.catalogue
        ups: dict[tuple[str, int], float] = {}
        for rec in departures:
            ups[(catalogue[int(rec["collector"])].stage, int(rec["arg"]))] = (int(rec["t_end"]) - int(rec["t_start"])) / 1e3
        out = []
        for stage in sorted({catalogue[int(c)].stage for c in arrivals["collector"]}):
            entry = next(e for e in catalogue.entries if e.tree == self.tree and e.role == "arrival" and e.stage == stage)
            fan_in = self.fan_in[stage]
            mine = arrivals[np.array([catalogue[int(c)].stage == stage for c in arrivals["collector"]])]
            rounds: dict[int, list] = {}
            for rec in mine:
                rounds.setdefault(int(rec["arg"]) // fan_in, []).append((int(rec["t_start"]), int(rec["t_end"])))
            complete = [r for r, got in rounds.items() if len(got) == fan_in]
            if not complete:
                continue
            totals = [(max(e for _, e in rounds[r]) - min(s for s, _ in rounds[r])) / 1e3 for r in complete]
            spreads = [(max(s for s, _ in rounds[r]) - min(s for s, _ in rounds[r])) / 1e3 for r in complete]
            up = [ups[(stage, r)] for r in complete if (stage, r) in ups]
            out.append(JoinStats(stage, entry.node, fan_in, len(complete), float(np.median(totals)),
                                 float(np.median(spreads)), float(np.median(up)) if up else 0.0))
        return out


def instrumented_trees(run) -> list[str]:
    """The trees of a run (what EventScope accepts) with collectors at their points, by name."""
    catalogue = Catalogue(resolve(run)[0])
    return sorted({e.tree for e in catalogue if e.tree and e.role in TREE_ROLES})


def wait_for(mon: ColOpMon, rounds: int, timeout: float = 30.0, interval: float = 0.05) -> ColOpReport:
    """Read until `rounds` complete rounds were seen (or `timeout` seconds); the report."""
    deadline = time.monotonic() + timeout
    while True:
        report = mon.read()
        if sum(o.rounds for o in report.ops) >= rounds or time.monotonic() >= deadline:
            return report
        time.sleep(interval)
