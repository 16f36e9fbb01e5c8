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
CODES = {name: code for code, name in NAMES.items()}
assert all(FIRST_OP <= code <= LAST_OP for code in NAMES)

# What each op does, for analyses (a message's two ends, what blocks on whom).
SENDS = frozenset({SEND, BSEND, SSEND, RSEND, ISEND, IBSEND, ISSEND, IRSEND, SENDRECV_SEND,
                   SENDRECV_REPLACE_SEND})
RECEIVES = frozenset({RECV, IRECV, MRECV, IMRECV, SENDRECV_RECV, SENDRECV_REPLACE_RECV})
NONBLOCKING = frozenset({ISEND, IBSEND, ISSEND, IRSEND, IRECV, IMRECV})
PROBES = frozenset({PROBE, IPROBE, MPROBE, IMPROBE})
COMPLETIONS = frozenset({WAIT, WAITALL, WAITANY, WAITSOME, TEST, TESTALL, TESTANY, TESTSOME})
COLLECTIVES = frozenset({BARRIER, BCAST, GATHER, GATHERV, SCATTER, SCATTERV, ALLGATHER, ALLGATHERV,
                         ALLTOALL, ALLTOALLV, ALLTOALLW, REDUCE, ALLREDUCE, REDUCE_SCATTER_BLOCK,
                         REDUCE_SCATTER, SCAN, EXSCAN,
                         WIN_CREATE, WIN_ALLOCATE, WIN_ALLOCATE_SHARED, WIN_CREATE_DYNAMIC, WIN_FENCE, WIN_FREE})
ROOTED = frozenset({BCAST, GATHER, GATHERV, SCATTER, SCATTERV, REDUCE})
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
