"""How an MPI call is written into a 36-byte trace tuple: op codes (`eventspace.opcodes`, re-exported
here), flags, and the meaning of each field.

Every MPI record is an ordinary trace tuple (`eventspace.trace`, `=HHIIIIQQ`); the collector id
says which rank and which communicator it belongs to (its catalogue entry: the source collector
of path `rK/commC` for point-to-point calls, the contribute collector of member `rK` of tree
`commC` for collectives). The other fields:

| field     | point-to-point call                    | request record (flag REQUEST)          | completion call (Wait...)   | collective                   |
|-----------|----------------------------------------|----------------------------------------|-----------------------------|------------------------------|
| op        | MPI_Send, MPI_Recv, MPI_Isend, ...     | the op that posted it (MPI_Irecv, ...) | MPI_Wait, MPI_Waitall, ...  | MPI_Allreduce, ...           |
| flags     | PICKLED, ANY_SOURCE, ANY_TAG, EMPTY    | REQUEST, + FREED, CANCELLED            | EMPTY when none completed   | PICKLED                      |
| element   | peer's world rank (actual source)      | peer's world rank (actual source)      | requests passed             | root's world rank, or NONE   |
| arg       | tag (actual tag for receives)          | tag (actual tag for receives)          | traced requests completed   | round on this communicator   |
| nbytes    | bytes sent / received                  | bytes sent / received                  | 0                           | bytes this rank sent         |
| t_start   | call entered                           | the posting call entered               | call entered                | call entered                 |
| t_end     | call returned                          | the completion call returned           | call returned               | call returned                |

World ranks, not communicator ranks, so that a record names its peer without a group table. A
receive records where its message came from (ANY_SOURCE and ANY_TAG are resolved through the
Status); the flags ANY_SOURCE / ANY_TAG say the program asked for any. PEER_NONE means no peer
(MPI.PROC_NULL, or a collective without a root); PEER_ANY and TAG_ANY appear only where the
source or tag is not yet known (an in-flight mark, or the post record of an MPI_Irecv).

Bytes: buffer forms count the message's bytes (count x datatype size; a receive, what arrived);
the pickle forms (send, recv, bcast...) count the pickled bytes, taken from mpi4py's own pickling
(a send, collective or posting call) or from the receive's Status (what arrived). A collective's
`nbytes` is what this rank handed to the call to send: its send buffer (a Bcast or Scatter, the
root's only; with MPI.IN_PLACE, its share of the receive buffer), or for the pickle forms what
mpi4py pickled during the call (its object reductions pass pickles along their own algorithm, so
an allreduce may pickle more than once). Values saturate at 2**32 - 1.

Nonblocking operations give two records: the posting call (MPI_Isend, MPI_Irecv: peer and tag as
asked, bytes as sent, 0 for a receive), and, when a completion call finds the request complete,
a request record (flag REQUEST) from the post to the completion, with the receive's actual
source, tag and bytes; the completion call itself is a third record. A point-to-point message
is therefore: a blocking send or a post record at its sender, a blocking receive or a request
record at its receiver; sends in the order of their `t_start`, receives in the order posted
(their `t_start`), which is what MPI's non-overtaking rule matches.

MPI_Sendrecv writes two records with the same times, one per half (op MPI_Sendrecv.send and
MPI_Sendrecv.recv). Rounds count a communicator's collectives on each member from 0, in call
order (MPI orders collectives on a communicator the same on every member), so round r of every
member is the same operation. A nonblocking collective (MPI_Iallreduce...) takes its round when it
is posted, as MPI orders it by its post; a persistent collective (MPI_Allreduce_init...) at each
MPI_Start of its request (the init call itself writes no record), which keeps rounds aligned when
the members start their persistent collectives in the same order relative to their other
collectives (what MPI's `mpi_assert_strict_persistent_collective_ordering` asserts, and what a
loop that starts the same requests does). Each gives two records with the round as `arg`, in the
communicator's collective collector: its post (bytes this rank sends) and, when a completion call
finds it done, its request record (flag REQUEST), which spans post to completion: that is its time
in the round (`round_records`). The completion call's own record goes to the same collector.

Persistent point-to-point requests (MPI_Send_init, ..., MPI_Recv_init) write nothing when made;
each MPI_Start (or each request in an MPI_Startall) is a post record with the op that made the
request (MPI_Send_init to r1 tag 3, the bytes; MPI_Recv_init from the source asked), and each
completion its request record, as for MPI_Isend and MPI_Irecv: a request started n times gives n
of each.

One-sided calls (MPI windows). A window made on a traced communicator is declared to the run as
its next communicator entry W (element and tree `commW`, made "Win.Create of comm C"), so its
records are those of the collectors of communicator W, and the heartbeat, colop, views and
archives know it as they know a communicator (`describe` says `on win W` for its calls):

| field   | creation, Fence, Free (tree commW)     | data call (element commW)              | Lock, Unlock, Flush(_local)  | Post, Start, Complete, Win.Wait, Test |
|---------|----------------------------------------|----------------------------------------|------------------------------|---------------------------------------|
| op      | MPI_Win_create 0x1C0, MPI_Win_allocate, MPI_Win_allocate_shared, MPI_Win_create_dynamic, MPI_Win_fence 0x1C5, MPI_Win_free 0x1C4 | MPI_Put 0x1C8, MPI_Get, MPI_Accumulate, MPI_Get_accumulate, MPI_Fetch_and_op, MPI_Compare_and_swap, MPI_Rput 0x1CE, MPI_Rget, MPI_Raccumulate, MPI_Rget_accumulate 0x1D1 | MPI_Win_lock 0x1D4, MPI_Win_unlock, MPI_Win_flush 0x1D8, MPI_Win_flush_local; (no target) MPI_Win_lock_all, MPI_Win_unlock_all, MPI_Win_flush_all, MPI_Win_flush_local_all, MPI_Win_sync | MPI_Win_post 0x1DD, MPI_Win_start, MPI_Win_complete, MPI_Win_wait 0x1E0, MPI_Win_test |
| flags   | ERROR when MPI failed it               | REQUEST (an R-form's request record)   |                              | EMPTY: a Test that found the epoch open |
| element | NONE                                   | the target's world rank                | the target's world rank (NONE without one) | ranks in the group          |
| arg     | round: creation 0, then each Fence and Free | 0                                 | Lock: 0 exclusive, 1 shared  | a bit per window rank in the group (below 32) |
| nbytes  | creation: bytes this rank exposes      | the origin buffer's bytes              | 0                            | 0                                     |

A data call's bytes are its origin buffer's (what a Put or Accumulate sends, what a Get fetches);
an R-form is a post record, then a request record when a completion call sees it done, as an Isend.
Complete names the group of the rank's last Start; Win.Wait and Test that of its last Post. A
window's creation is recorded once it is made (its collectors exist from then on), so a rank
blocked in creating one has no mark; windows on an untraced communicator (COMM_SELF, mpi4py's
default) are not traced.

An in-flight mark (`eventspace.space.Mark`, what the heartbeat reads while a call blocks) holds
the record's fields as known when the call began: peer and tag as asked; for a completion call,
the first request it waits for (its post op, flag REQUEST): "waits in MPI_Wait for MPI_Irecv
from r3 tag 7".
"""

from __future__ import annotations

import copy

import numpy as np

from ..opcodes import (  # noqa: F401 (re-exported: the codes live a floor below, for eventspace.trace)
    FIRST_OP, LAST_OP, SEND, BSEND, SSEND, RSEND, ISEND, IBSEND, ISSEND, IRSEND, RECV, IRECV,
    MRECV, IMRECV, SENDRECV_SEND, SENDRECV_RECV, SENDRECV_REPLACE_SEND, SENDRECV_REPLACE_RECV,
    PROBE, IPROBE, MPROBE, IMPROBE, WAIT, WAITALL, WAITANY, WAITSOME, TEST, TESTALL, TESTANY,
    TESTSOME, BARRIER, BCAST, GATHER, GATHERV, SCATTER, SCATTERV, ALLGATHER, ALLGATHERV, ALLTOALL,
    ALLTOALLV, ALLTOALLW, REDUCE, ALLREDUCE, REDUCE_SCATTER_BLOCK, REDUCE_SCATTER, SCAN, EXSCAN,
    NAMES, CODES, SENDS, RECEIVES, NONBLOCKING, PROBES, COMPLETIONS, COLLECTIVES, ROOTED, is_mpi,
    IBARRIER, IBCAST, IGATHER, IGATHERV, ISCATTER, ISCATTERV, IALLGATHER, IALLGATHERV, IALLTOALL, IALLTOALLV,
    IALLTOALLW, IREDUCE, IALLREDUCE, IREDUCE_SCATTER_BLOCK, IREDUCE_SCATTER, ISCAN, IEXSCAN,
    BARRIER_INIT, BCAST_INIT, GATHER_INIT, GATHERV_INIT, SCATTER_INIT, SCATTERV_INIT, ALLGATHER_INIT,
    ALLGATHERV_INIT, ALLTOALL_INIT, ALLTOALLV_INIT, ALLTOALLW_INIT, REDUCE_INIT, ALLREDUCE_INIT,
    REDUCE_SCATTER_BLOCK_INIT, REDUCE_SCATTER_INIT, SCAN_INIT, EXSCAN_INIT,
    SEND_INIT, BSEND_INIT, SSEND_INIT, RSEND_INIT, RECV_INIT, POSTED_COLLECTIVES, ROUNDS, BLOCKING_OF,
    NONBLOCKING_COLLECTIVES, PERSISTENT_COLLECTIVES,
    NEIGHBOR_ALLGATHER, NEIGHBOR_ALLGATHERV, NEIGHBOR_ALLTOALL, NEIGHBOR_ALLTOALLV, NEIGHBOR_ALLTOALLW,
    WIN_CREATE, WIN_ALLOCATE, WIN_ALLOCATE_SHARED, WIN_CREATE_DYNAMIC, WIN_FREE, WIN_FENCE, PUT, GET, ACCUMULATE,
    GET_ACCUMULATE, FETCH_AND_OP, COMPARE_AND_SWAP, RPUT, RGET, RACCUMULATE, RGET_ACCUMULATE, WIN_LOCK, WIN_UNLOCK,
    WIN_LOCK_ALL, WIN_UNLOCK_ALL, WIN_FLUSH, WIN_FLUSH_ALL, WIN_FLUSH_LOCAL, WIN_FLUSH_LOCAL_ALL, WIN_SYNC, WIN_POST,
    WIN_START, WIN_COMPLETE, WIN_WAIT, WIN_TEST, WINDOWS, RMA, TARGETED, GROUPED,
)

# Flags (the low byte is eventspace.trace's: ERROR 1, TREE 2, SUMMARY 4).
PICKLED = 0x0100      # a lowercase (pickle) form: nbytes are pickled bytes
ANY_SOURCE = 0x0200   # the program asked for MPI.ANY_SOURCE (element: the actual source, once known)
ANY_TAG = 0x0400      # the program asked for MPI.ANY_TAG (arg: the actual tag, once known)
REQUEST = 0x0800      # a request record: a nonblocking operation from its post to its completion
FREED = 0x1000        # a request freed before its completion was seen (element, arg, nbytes as posted)
CANCELLED = 0x2000    # a request the program cancelled and whose Status says it was
EMPTY = 0x4000        # a test or nonblocking probe that found nothing

# Special values of `element` (peer, root) and `arg` (tag).
PEER_NONE = 0xFFFFFFFF    # no peer: MPI.PROC_NULL, or a collective without a root
PEER_ANY = 0xFFFFFFFE     # MPI.ANY_SOURCE, not yet resolved
TAG_ANY = 0xFFFFFFFF      # MPI.ANY_TAG, not yet resolved
U32 = 0xFFFFFFFF

COMM_PREFIX = "comm"      # communicator C is element `commC` and tree `commC` of the run's pathmap


def comm_name(comm: int) -> str:
    """`comm3` for communicator 3 (its element and tree in the run's pathmap)."""
    return f"{COMM_PREFIX}{comm}"


def comm_of(entry) -> int | None:
    """The communicator a catalogue entry collects (from its element or tree), None if none."""
    name = entry.element or entry.tree
    if not name or not name.startswith(COMM_PREFIX) or not name[len(COMM_PREFIX):].isdigit():
        return None
    return int(name[len(COMM_PREFIX):])


def rank_of(thread: str | None) -> int | None:
    """The world rank of thread `rK`, None for any other name."""
    if thread and thread[0] == "r" and thread[1:].isdigit():
        return int(thread[1:])
    return None


def peer_text(value: int) -> str:
    """`r3`, `any source` or `nobody` for an `element` value."""
    if value == PEER_NONE:
        return "nobody"
    if value == PEER_ANY:
        return "any source"
    return f"r{value}"


SHARED_LOCK = 1   # `arg` of an MPI_Win_lock record: 0 exclusive, 1 shared
GROUP_BITS = 32   # a group's window ranks that `arg` holds (see group_ranks)


def group_ranks(element: int, arg: int) -> tuple[int, ...] | None:
    """The window ranks of the group an MPI_Win_post/start/complete/wait/test record names (`element`:
    how many, `arg`: a bit per window rank below GROUP_BITS); None where the group has ranks beyond."""
    ranks = tuple(k for k in range(GROUP_BITS) if arg >> k & 1)
    return ranks if len(ranks) == element else None


def describe(op: int, flags: int, element: int, arg: int, comm: int | None = None) -> str:
    """One phrase for a record or an in-flight mark, e.g. `MPI_Recv from r3 tag 7 on comm 0`,
    `MPI_Allreduce on comm 0, round 41`, `MPI_Bcast from r0 on comm 2, round 3`, `MPI_Win_fence on
    win 3, round 2`, `MPI_Put target r1 on win 3`, `MPI_Win_wait for window ranks 1, 2 on win 3`."""
    name = NAMES.get(op, f"op {op}")
    where = f" on {'win' if op in WINDOWS else 'comm'} {comm}" if comm is not None else ""
    if op in WINDOWS and op not in COLLECTIVES:
        if op in TARGETED:
            kind = " (shared)" if op == WIN_LOCK and arg == SHARED_LOCK else ""
            return f"{'request ' if flags & REQUEST else ''}{name} target {peer_text(element)}{where}{kind}"
        if op in GROUPED:
            ranks = group_ranks(element, arg)
            group = f"{element} window ranks" if ranks is None else f"window ranks {', '.join(map(str, ranks))}"
            return f"{name} for {group}{where}"
        return f"{name}{where}"
    if op in ROUNDS:
        root = f" from r{element}" if op in ROOTED and element != PEER_NONE else ""
        return f"{name}{root}{where}, round {arg}"
    if op in COMPLETIONS:
        return f"{name} ({arg} of {element} requests completed){where}"
    tag = "any tag" if arg == TAG_ANY and (flags & ANY_TAG or op in PROBES or op in RECEIVES) else f"tag {arg}"
    direction = "to" if op in SENDS else "from"
    text = f"{name} {direction} {peer_text(element)} {tag}{where}"
    if flags & REQUEST:
        text = f"request {text}"
    return text


def round_records(op: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Which of a tree's contribute records (columns `op`, `flags`) stand for a member's part in a
    round: a blocking collective's record, a nonblocking or persistent collective's request record
    (from its post to its completion: that is its time in the round), and any record that is not an
    MPI call's (a PATHS tree's); not their post records (the request record repeats their round) nor
    the completion calls (Wait...) that a collective request's collector writes too."""
    op = op.astype(np.int64)
    posted = np.isin(op, _POSTED_COLLECTIVES)
    return (~((op >= FIRST_OP) & (op <= LAST_OP)) | np.isin(op, _COLLECTIVES)
            | (posted & (flags & REQUEST != 0)))


_COLLECTIVES = np.array(sorted(COLLECTIVES), dtype=np.int64)
_POSTED_COLLECTIVES = np.array(sorted(POSTED_COLLECTIVES), dtype=np.int64)


class Collectors:
    """What the collector ids of an MPI run's catalogue say, as arrays indexed by id (id 0 stands for
    any id the catalogue does not know: `index` maps ids to it): `rank`, the world rank of the
    collector's thread, and `comm`, its communicator (-1 where the collector is not an MPI rank's);
    `p2p`, a source collector (point-to-point calls and completions on its communicator);
    `collective`, a contribute collector (its communicator's collectives), and `member`, its
    thread's rank in the communicator (-1 otherwise). `ranks` is the run's rank count (its threads
    rK) and `sizes` {communicator: members} of the communicators with collective collectors."""

    def __init__(self, catalogue):
        entries = catalogue.entries
        self.size = len(entries) + 1
        self.rank = np.full(self.size, -1, dtype=np.int64)
        self.comm = np.full(self.size, -1, dtype=np.int64)
        self.member = np.full(self.size, -1, dtype=np.int64)
        self.p2p = np.zeros(self.size, dtype=bool)
        self.collective = np.zeros(self.size, dtype=bool)
        self.sizes: dict[int, int] = {}
        trees = getattr(catalogue, "trees", {})
        for cid, entry in enumerate(entries, 1):
            rank, comm = rank_of(entry.thread), comm_of(entry)
            if rank is None or comm is None:
                continue
            if entry.role == "source":
                self.rank[cid], self.comm[cid], self.p2p[cid] = rank, comm, True
            elif entry.role == "contribute" and entry.tree in trees and entry.thread in trees[entry.tree].members:
                members = trees[entry.tree].members
                self.rank[cid], self.comm[cid], self.collective[cid] = rank, comm, True
                self.member[cid] = members.index(entry.thread)
                self.sizes[comm] = len(members)
        ranks = [rank_of(thread) for thread, _ in getattr(catalogue, "threads", ())]
        known = [r for r in ranks if r is not None] + [int(r) for r in self.rank if r >= 0]
        self.ranks = max(known) + 1 if known else 0

    def within(self, ids) -> Collectors:
        """These collectors as seen through a view that has only `ids`: the others are unknown, and a
        communicator some of whose members' collective collectors are left out has size 0 (none of
        its rounds can be seen whole)."""
        out = copy.copy(self)
        keep = np.zeros(self.size, bool)
        chosen = np.array([i for i in ids if 0 < i < self.size], dtype=np.int64)
        keep[chosen] = True
        out.rank, out.comm, out.member = (np.where(keep, a, -1) for a in (self.rank, self.comm, self.member))
        out.p2p, out.collective = self.p2p & keep, self.collective & keep
        seen = np.bincount(out.comm[out.collective], minlength=max(self.sizes, default=-1) + 1)
        out.sizes = {comm: size if seen[comm] == size else 0 for comm, size in self.sizes.items()}
        return out

    def index(self, collector: np.ndarray) -> np.ndarray:
        """The records' `collector` column as indices into these arrays (0 for an unknown id)."""
        cid = collector.astype(np.int64)
        cid[(cid < 1) | (cid >= self.size)] = 0
        return cid
