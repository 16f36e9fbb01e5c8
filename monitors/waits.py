"""Waits: what each rank of an MPI run is blocked in, on whom, and the deadlocks among them."""

from __future__ import annotations

from dataclasses import dataclass

from eventspace.mpi import encoding as e
from eventspace.scope import EventScope
from eventspace.space import Mark


@dataclass(frozen=True)
class Wait:
    """Rank `rank` blocked in an MPI call on communicator `comm`: `call` says which (`Recv from
    r3 tag 7 on comm 0`, `Allreduce on comm 0, round 41`), `on` the world ranks that can release
    it: all of them (a named source or destination; the members that have not entered a
    collective's round) or, if `any_of`, any one (a receive from MPI.ANY_SOURCE). `collector`
    and `since` (its start, ns on the rank's node clock) tell one blocked call from the next."""

    rank: int
    comm: int   # or window (a window is a communicator entry of the run: encoding.WINDOWS)
    call: str
    on: tuple[int, ...]
    any_of: bool
    collective: bool
    collector: int
    since: int
    grouped: bool = False   # a window's Post/Start epoch call: waits on its group (the ranks `on`)

    @property
    def text(self) -> str:
        """`Recv from r1 tag 0 on comm 0`, `Allreduce on comm 0, round 41, waiting for r5`, or `Win_wait
        for window ranks 1, 2 on win 3, waiting for r1, r2`."""
        if (self.collective or self.grouped) and self.on:
            return f"{self.call}, waiting for {', '.join(f'r{r}' for r in self.on)}"
        return self.call


@dataclass(frozen=True)
class Deadlock:
    """Ranks that wait on each other with none of them releasable: a cycle of waits (or, when a
    receive from any source is among them, every rank that none can release), by rank."""

    waits: tuple[Wait, ...]

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(w.rank for w in self.waits)

    @property
    def lines(self) -> list[str]:
        """`r0 waits Recv from r1 tag 0 on comm 0`, one per rank."""
        return [f"r{w.rank} waits {w.text}" for w in self.waits]

    def lines_at(self, where: dict[int, str]) -> list[str]:
        """`lines`, each with where its rank is in the program: `r0 waits Recv from r1 tag 0 on comm 0 at
        heat.py:88 in exchange` (`where`: {rank: "heat.py:88 in exchange"}; a rank without one as in `lines`)."""
        return [line + (f" at {where[w.rank]}" if where.get(w.rank) else "") for w, line in zip(self.waits, self.lines)]

    @property
    def text(self) -> str:
        """`deadlock: r0 waits Recv from r1 ...; r1 waits Recv from r0 ...`."""
        return "deadlock: " + "; ".join(self.lines)


def call_text(mark: Mark, comm: int) -> str:
    """The call a mark says a rank is in, without the `MPI_` prefix: `Recv from r3 tag 7 on comm 0`,
    `Wait for Irecv from r3 tag 7 on comm 0` (a completion call marks the first request it waits for)."""
    text = e.describe(mark.op, mark.flags & ~e.REQUEST, mark.element, mark.arg, comm).replace("MPI_", "", 1)
    return f"Wait for {text}" if mark.flags & e.REQUEST else text


def waits(marks: dict[int, Mark], catalogue, rounds: dict[tuple[int, int], int]) -> dict[int, Wait]:
    """{rank: its Wait} of the ranks whose collectors mark an MPI call now (`marks`, as
    EventScope.in_flight_marks gives them). A collective waits on the members of its communicator
    that have not entered its round: neither inside a collective of that communicator at that
    round or later, nor (`rounds`: {(rank, comm): the last round it completed there, or posted: a
    nonblocking collective's}) past it; a window's Fence is a round of the window's. A Wait for a
    nonblocking or persistent collective's request waits as that collective does (its mark holds the
    request's op and round). A window's Lock, Unlock, Flush or data call waits on its target (MPI
    completes it there); its Start, Complete and Win.Wait on the group they name, which
    encoding.group_ranks reads in the window's ranks (nobody where the group is beyond what it holds)."""
    marked = {}
    for cid, mark in marks.items():
        entry = catalogue[cid]
        rank, comm = e.rank_of(entry.thread), e.comm_of(entry)
        if e.is_mpi(mark.op) and rank is not None and comm is not None:
            marked[cid] = (rank, comm, mark)
    inside = {(rank, comm): mark.arg for rank, comm, mark in marked.values() if mark.op in e.ROUNDS}
    found = {}
    for cid, (rank, comm, mark) in marked.items():
        collective = mark.op in e.ROUNDS
        any_of = False
        if collective:
            on = tuple(m for m in members(catalogue, comm) if m != rank
                       and inside.get((m, comm), -1) < mark.arg and rounds.get((m, comm), -1) < mark.arg)
        elif mark.op in e.GROUPED:
            ranks = e.group_ranks(mark.element, mark.arg)
            window = ordered_members(catalogue, comm)
            on = tuple(window[k] for k in ranks or () if k < len(window) and window[k] != rank)
            found[rank] = Wait(rank, comm, call_text(mark, comm), on, False, False, cid, mark.t_start, grouped=True)
            continue
        elif mark.element == e.PEER_ANY:
            on, any_of = tuple(m for m in members(catalogue, comm) if m != rank), True
        elif mark.element == e.PEER_NONE:
            on = ()
        else:
            on = (mark.element,)
        found[rank] = Wait(rank, comm, call_text(mark, comm), on, any_of, collective, cid, mark.t_start)
    return found


def members(catalogue, comm: int) -> list[int]:
    """The world ranks of communicator `comm` (those with a collector on it), in order."""
    return sorted({e.rank_of(x.thread) for x in catalogue if e.comm_of(x) == comm and e.rank_of(x.thread) is not None})


def ordered_members(catalogue, comm: int) -> list[int]:
    """The world ranks of communicator (or window) `comm` in its own rank order (its tree's members)."""
    tree = catalogue.trees.get(e.comm_name(comm))
    return [] if tree is None else [e.rank_of(m) for m in tree.members]


def deadlock(found: dict[int, Wait], ranks, unknown=()) -> Deadlock | None:
    """The deadlock among `found` waits, if there is one: the ranks that can never be released.
    A rank of `ranks` that is not waiting is free (it may still call whatever releases others), and
    so is any rank in `unknown` (its node did not answer: nothing is known of it); a waiting rank is
    released when all it waits on (any one, for `any_of`) are free or released in turn."""
    free = {r for r in ranks if r not in found} | set(unknown)
    changed = True
    while changed:
        changed = False
        for rank, wait in found.items():
            if rank in free:
                continue
            ready = [r in free for r in wait.on]
            if (any(ready) if wait.any_of else all(ready)):
                free.add(rank)
                changed = True
    stuck = {r: w for r, w in found.items() if r not in free}
    if not stuck:
        return None
    if any(w.any_of for w in stuck.values()):
        return Deadlock(tuple(stuck[r] for r in sorted(stuck)))
    import networkx as nx   # here: a heartbeat that never sees ranks stuck never needs it (a fifth of a second)

    graph = nx.DiGraph((r, o) for r, w in stuck.items() for o in w.on if o in stuck)
    cycle = [u for u, _ in nx.find_cycle(graph, source=min(stuck))] if graph.number_of_edges() else sorted(stuck)
    start = cycle.index(min(cycle))
    return Deadlock(tuple(stuck[r] for r in cycle[start:] + cycle[:start]))


class WaitFor:
    """The waits of a live MPI run, look after look (the heartbeat calls `look` at every beat).

    A deadlock is reported only when every wait in it was seen at two looks running (the same
    collector, the same call start): two ranks that pass each other's receives in the instant
    between their calls never are.
    """

    def __init__(self, run, catalogue, timeout: float = 2.0):
        self.run, self.catalogue, self.timeout = run, catalogue, timeout
        self.ranks = sorted({r for r in (e.rank_of(x.thread) for x in catalogue) if r is not None})
        self.active = False          # an MPI mark has been seen: look at every beat from now on
        self._last: dict[int, Wait] = {}
        self._rounds: EventScope | None = None

    def look(self, marks: dict[int, Mark], missing=()) -> tuple[dict[int, Wait], Deadlock | None]:
        """({rank: Wait}, a confirmed Deadlock or None) from this look's marks; the ranks of nodes
        in `missing` (they did not answer) count as free."""
        rounds = {}
        if any(e.is_mpi(m.op) and m.op in e.ROUNDS for m in marks.values()):
            rounds = self._completed_rounds()
        found = waits(marks, self.catalogue, rounds)
        self.active = self.active or bool(found)
        last, self._last = self._last, found
        steady = {r: w for r, w in found.items() if last.get(r) is not None
                  and (last[r].collector, last[r].since) == (w.collector, w.since)}
        unknown = {e.rank_of(x.thread) for x in self.catalogue if x.node in missing}
        return found, deadlock(steady, self.ranks, unknown - {None})

    def _completed_rounds(self) -> dict[tuple[int, int], int]:
        """{(rank, comm): its last completed round}: the newest record of every collective collector
        (a nonblocking collective's post counts: the member has entered that round). Where the newest
        is a completion call's (a Wait for a collective request), the member's round is not known
        from it: it counts as not entered, so a wait may name it until its next collective."""
        if self._rounds is None:
            self._rounds = EventScope(self.run, "role:contribute", mode="latest", timeout=self.timeout,
                                      name="heartbeat-rounds")
        rounds = {}
        for record in self._rounds.pull().records:
            entry = self.catalogue[int(record["collector"])]
            rank, comm = e.rank_of(entry.thread), e.comm_of(entry)
            if int(record["op"]) in e.ROUNDS and rank is not None and comm is not None:
                rounds[(rank, comm)] = int(record["arg"])
        return rounds

    def close(self) -> None:
        if self._rounds is not None:
            self._rounds.close()
