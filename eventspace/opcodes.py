"""MPI op codes: the `op` of an MPI call's trace record, its name, and what kind of call it is.

The lowest floor of eventspace, so that the trace tuple (`eventspace.trace`) names MPI calls as it
names PATHS operations without importing the MPI layer; `eventspace.mpi.encoding` says how the other
fields of an MPI record read.
"""

# Op codes 0x0100..0x01FF; PATHS operations (paths.operation) use 1..0x00FF.
FIRST_OP, LAST_OP = 0x0100, 0x01FF

# Point-to-point: blocking sends, nonblocking sends, receives, the halves of a send-receive.
SEND, BSEND, SSEND, RSEND = 0x0100, 0x0101, 0x0102, 0x0103
ISEND, IBSEND, ISSEND, IRSEND = 0x0104, 0x0105, 0x0106, 0x0107
RECV, IRECV, MRECV, IMRECV = 0x0108, 0x0109, 0x010A, 0x010B
SENDRECV_SEND, SENDRECV_RECV = 0x010C, 0x010D
SENDRECV_REPLACE_SEND, SENDRECV_REPLACE_RECV = 0x010E, 0x010F
# Probes.
PROBE, IPROBE, MPROBE, IMPROBE = 0x0110, 0x0111, 0x0112, 0x0113
# Completion calls.
WAIT, WAITALL, WAITANY, WAITSOME = 0x0118, 0x0119, 0x011A, 0x011B
TEST, TESTALL, TESTANY, TESTSOME = 0x011C, 0x011D, 0x011E, 0x011F
# Collectives (blocking).
BARRIER, BCAST, GATHER, GATHERV, SCATTER, SCATTERV = 0x0140, 0x0141, 0x0142, 0x0143, 0x0144, 0x0145
ALLGATHER, ALLGATHERV, ALLTOALL, ALLTOALLV, ALLTOALLW = 0x0146, 0x0147, 0x0148, 0x0149, 0x014A
REDUCE, ALLREDUCE, REDUCE_SCATTER_BLOCK, REDUCE_SCATTER = 0x014B, 0x014C, 0x014D, 0x014E
SCAN, EXSCAN = 0x014F, 0x0150
# Neighbourhood collectives (on a communicator with a topology).
NEIGHBOR_ALLGATHER, NEIGHBOR_ALLGATHERV, NEIGHBOR_ALLTOALL, NEIGHBOR_ALLTOALLV, NEIGHBOR_ALLTOALLW = \
    0x0158, 0x0159, 0x015A, 0x015B, 0x015C
# Nonblocking collectives: each the blocking one's code + 0x40 (MPI_Ibarrier 0x0180 ... MPI_Iexscan 0x0190).
IBARRIER, IBCAST, IGATHER, IGATHERV, ISCATTER, ISCATTERV = 0x0180, 0x0181, 0x0182, 0x0183, 0x0184, 0x0185
IALLGATHER, IALLGATHERV, IALLTOALL, IALLTOALLV, IALLTOALLW = 0x0186, 0x0187, 0x0188, 0x0189, 0x018A
IREDUCE, IALLREDUCE, IREDUCE_SCATTER_BLOCK, IREDUCE_SCATTER = 0x018B, 0x018C, 0x018D, 0x018E
ISCAN, IEXSCAN = 0x018F, 0x0190
# Persistent collectives (MPI-4): the blocking one's code + 0x60 (MPI_Barrier_init 0x01A0 ... MPI_Exscan_init 0x01B0).
BARRIER_INIT, BCAST_INIT, GATHER_INIT, GATHERV_INIT, SCATTER_INIT, SCATTERV_INIT = \
    0x01A0, 0x01A1, 0x01A2, 0x01A3, 0x01A4, 0x01A5
ALLGATHER_INIT, ALLGATHERV_INIT, ALLTOALL_INIT, ALLTOALLV_INIT, ALLTOALLW_INIT = 0x01A6, 0x01A7, 0x01A8, 0x01A9, 0x01AA
REDUCE_INIT, ALLREDUCE_INIT, REDUCE_SCATTER_BLOCK_INIT, REDUCE_SCATTER_INIT = 0x01AB, 0x01AC, 0x01AD, 0x01AE
SCAN_INIT, EXSCAN_INIT = 0x01AF, 0x01B0
# Persistent point-to-point: a Start's post record and its request record carry the op that made the request.
SEND_INIT, BSEND_INIT, SSEND_INIT, RSEND_INIT, RECV_INIT = 0x0160, 0x0161, 0x0162, 0x0163, 0x0164
# One-sided (RMA, eventspace.mpi.collector's window rows), from 0x01C0: a window's life, numbered as
# its collectives (creation, Fence, Free); its data calls, from an origin to a target; its synchronisation.
WIN_CREATE, WIN_ALLOCATE, WIN_ALLOCATE_SHARED, WIN_CREATE_DYNAMIC = 0x01C0, 0x01C1, 0x01C2, 0x01C3
WIN_FREE, WIN_FENCE = 0x01C4, 0x01C5
PUT, GET, ACCUMULATE, GET_ACCUMULATE, FETCH_AND_OP, COMPARE_AND_SWAP = 0x01C8, 0x01C9, 0x01CA, 0x01CB, 0x01CC, 0x01CD
RPUT, RGET, RACCUMULATE, RGET_ACCUMULATE = 0x01CE, 0x01CF, 0x01D0, 0x01D1
WIN_LOCK, WIN_UNLOCK, WIN_LOCK_ALL, WIN_UNLOCK_ALL = 0x01D4, 0x01D5, 0x01D6, 0x01D7
WIN_FLUSH, WIN_FLUSH_ALL, WIN_FLUSH_LOCAL, WIN_FLUSH_LOCAL_ALL, WIN_SYNC = 0x01D8, 0x01D9, 0x01DA, 0x01DB, 0x01DC
WIN_POST, WIN_START, WIN_COMPLETE, WIN_WAIT, WIN_TEST = 0x01DD, 0x01DE, 0x01DF, 0x01E0, 0x01E1

NAMES = {
    SEND: "MPI_Send", BSEND: "MPI_Bsend", SSEND: "MPI_Ssend", RSEND: "MPI_Rsend",
    ISEND: "MPI_Isend", IBSEND: "MPI_Ibsend", ISSEND: "MPI_Issend", IRSEND: "MPI_Irsend",
    RECV: "MPI_Recv", IRECV: "MPI_Irecv", MRECV: "MPI_Mrecv", IMRECV: "MPI_Imrecv",
    SENDRECV_SEND: "MPI_Sendrecv.send", SENDRECV_RECV: "MPI_Sendrecv.recv",
    SENDRECV_REPLACE_SEND: "MPI_Sendrecv_replace.send", SENDRECV_REPLACE_RECV: "MPI_Sendrecv_replace.recv",
    PROBE: "MPI_Probe", IPROBE: "MPI_Iprobe", MPROBE: "MPI_Mprobe", IMPROBE: "MPI_Improbe",
    WAIT: "MPI_Wait", WAITALL: "MPI_Waitall", WAITANY: "MPI_Waitany", WAITSOME: "MPI_Waitsome",
    TEST: "MPI_Test", TESTALL: "MPI_Testall", TESTANY: "MPI_Testany", TESTSOME: "MPI_Testsome",
    BARRIER: "MPI_Barrier", BCAST: "MPI_Bcast", GATHER: "MPI_Gather", GATHERV: "MPI_Gatherv",
    SCATTER: "MPI_Scatter", SCATTERV: "MPI_Scatterv", ALLGATHER: "MPI_Allgather",
    ALLGATHERV: "MPI_Allgatherv", ALLTOALL: "MPI_Alltoall", ALLTOALLV: "MPI_Alltoallv",
    ALLTOALLW: "MPI_Alltoallw", REDUCE: "MPI_Reduce", ALLREDUCE: "MPI_Allreduce",
    REDUCE_SCATTER_BLOCK: "MPI_Reduce_scatter_block", REDUCE_SCATTER: "MPI_Reduce_scatter",
    SCAN: "MPI_Scan", EXSCAN: "MPI_Exscan",
    NEIGHBOR_ALLGATHER: "MPI_Neighbor_allgather", NEIGHBOR_ALLGATHERV: "MPI_Neighbor_allgatherv",
    NEIGHBOR_ALLTOALL: "MPI_Neighbor_alltoall", NEIGHBOR_ALLTOALLV: "MPI_Neighbor_alltoallv",
    NEIGHBOR_ALLTOALLW: "MPI_Neighbor_alltoallw",
    SEND_INIT: "MPI_Send_init", BSEND_INIT: "MPI_Bsend_init", SSEND_INIT: "MPI_Ssend_init",
    RSEND_INIT: "MPI_Rsend_init", RECV_INIT: "MPI_Recv_init",
    WIN_CREATE: "MPI_Win_create", WIN_ALLOCATE: "MPI_Win_allocate", WIN_ALLOCATE_SHARED: "MPI_Win_allocate_shared",
    WIN_CREATE_DYNAMIC: "MPI_Win_create_dynamic", WIN_FREE: "MPI_Win_free", WIN_FENCE: "MPI_Win_fence",
    PUT: "MPI_Put", GET: "MPI_Get", ACCUMULATE: "MPI_Accumulate", GET_ACCUMULATE: "MPI_Get_accumulate",
    FETCH_AND_OP: "MPI_Fetch_and_op", COMPARE_AND_SWAP: "MPI_Compare_and_swap", RPUT: "MPI_Rput", RGET: "MPI_Rget",
    RACCUMULATE: "MPI_Raccumulate", RGET_ACCUMULATE: "MPI_Rget_accumulate",
    WIN_LOCK: "MPI_Win_lock", WIN_UNLOCK: "MPI_Win_unlock", WIN_LOCK_ALL: "MPI_Win_lock_all",
    WIN_UNLOCK_ALL: "MPI_Win_unlock_all", WIN_FLUSH: "MPI_Win_flush", WIN_FLUSH_ALL: "MPI_Win_flush_all",
    WIN_FLUSH_LOCAL: "MPI_Win_flush_local", WIN_FLUSH_LOCAL_ALL: "MPI_Win_flush_local_all", WIN_SYNC: "MPI_Win_sync",
    WIN_POST: "MPI_Win_post", WIN_START: "MPI_Win_start", WIN_COMPLETE: "MPI_Win_complete", WIN_WAIT: "MPI_Win_wait",
    WIN_TEST: "MPI_Win_test",
}
_BLOCKING_COLLECTIVES = (BARRIER, BCAST, GATHER, GATHERV, SCATTER, SCATTERV, ALLGATHER, ALLGATHERV, ALLTOALL,
                         ALLTOALLV, ALLTOALLW, REDUCE, ALLREDUCE, REDUCE_SCATTER_BLOCK, REDUCE_SCATTER, SCAN, EXSCAN,
                         NEIGHBOR_ALLGATHER, NEIGHBOR_ALLGATHERV, NEIGHBOR_ALLTOALL, NEIGHBOR_ALLTOALLV,
                         NEIGHBOR_ALLTOALLW)
for _code in _BLOCKING_COLLECTIVES:   # MPI_Iallreduce, MPI_Allreduce_init: named after the blocking one
    NAMES[_code + 0x40] = "MPI_I" + NAMES[_code][4:].lower()
    NAMES[_code + 0x60] = NAMES[_code] + "_init"
assert NAMES[IALLREDUCE] == "MPI_Iallreduce" and NAMES[EXSCAN_INIT] == "MPI_Exscan_init"
CODES = {name: code for code, name in NAMES.items()}
assert all(FIRST_OP <= code <= LAST_OP for code in NAMES)

# What each op does, for analyses (a message's two ends, what blocks on whom).
SENDS = frozenset({SEND, BSEND, SSEND, RSEND, ISEND, IBSEND, ISSEND, IRSEND, SENDRECV_SEND,
                   SENDRECV_REPLACE_SEND, SEND_INIT, BSEND_INIT, SSEND_INIT, RSEND_INIT})
RECEIVES = frozenset({RECV, IRECV, MRECV, IMRECV, SENDRECV_RECV, SENDRECV_REPLACE_RECV, RECV_INIT})
# Posted (a post record, then a request record): persistent requests' Starts too.
NONBLOCKING = frozenset({ISEND, IBSEND, ISSEND, IRSEND, IRECV, IMRECV, SEND_INIT, BSEND_INIT, SSEND_INIT, RSEND_INIT,
                         RECV_INIT})
PROBES = frozenset({PROBE, IPROBE, MPROBE, IMPROBE})
COMPLETIONS = frozenset({WAIT, WAITALL, WAITANY, WAITSOME, TEST, TESTALL, TESTANY, TESTSOME})
# Communicator collectives and a window's collective calls (its creation, Fence and Free): rounds.
COLLECTIVES = frozenset(_BLOCKING_COLLECTIVES) | {WIN_CREATE, WIN_ALLOCATE, WIN_ALLOCATE_SHARED, WIN_CREATE_DYNAMIC,
                                                  WIN_FENCE, WIN_FREE}
# Nonblocking and persistent collectives: a post record (a persistent one's: each Start) and a request
# record (post to completion) per operation, numbered by their communicator's rounds as COLLECTIVES are;
# BLOCKING_OF names the blocking collective each one is a form of.
NONBLOCKING_COLLECTIVES = frozenset(c + 0x40 for c in _BLOCKING_COLLECTIVES)
PERSISTENT_COLLECTIVES = frozenset(c + 0x60 for c in _BLOCKING_COLLECTIVES)
POSTED_COLLECTIVES = NONBLOCKING_COLLECTIVES | PERSISTENT_COLLECTIVES
BLOCKING_OF = {c + k: c for c in _BLOCKING_COLLECTIVES for k in (0x40, 0x60)}
# Ops whose `arg` is a round of their communicator (or window).
ROUNDS = COLLECTIVES | POSTED_COLLECTIVES
ROOTED = frozenset(c + k for c in (BCAST, GATHER, GATHERV, SCATTER, SCATTERV, REDUCE) for k in (0, 0x40, 0x60))
# One-sided: every call on a window; those that move data between an origin and a target (their
# R-forms too); those that name one target rank (`element`); those that name a group of the window's
# ranks (`arg`: a bit per window rank); those whose records are a window's collective rounds.
WINDOWS = frozenset(range(WIN_CREATE, WIN_TEST + 1)) & frozenset(NAMES)
RMA = frozenset({PUT, GET, ACCUMULATE, GET_ACCUMULATE, FETCH_AND_OP, COMPARE_AND_SWAP, RPUT, RGET, RACCUMULATE,
                 RGET_ACCUMULATE})
TARGETED = RMA | {WIN_LOCK, WIN_UNLOCK, WIN_FLUSH, WIN_FLUSH_LOCAL}
GROUPED = frozenset({WIN_POST, WIN_START, WIN_COMPLETE, WIN_WAIT, WIN_TEST})

def is_mpi(op: int) -> bool:
    """True for an MPI op code (as opposed to a PATHS operation)."""
    return FIRST_OP <= op <= LAST_OP
