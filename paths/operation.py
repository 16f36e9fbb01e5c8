"""Operation codes: what travels along a path, and what a trace tuple's `op` field names."""

# Element operations (the PastSet API, forwarded stage by stage).
MOVE = 1          # (values, timeout)            -> index
OBSERVE = 2       # (index|None, timeout)        -> (index read, tuple)
FIRST = 3         # ()                           -> index
LAST = 4          # ()                           -> index
DELTA = 5         # (n|None,)                    -> delta
AXE = 6           # (index,)                     -> new first
READ_RANGE = 7    # (lo, hi)                     -> (start, items)
LATEST = 8        # (n,)                         -> (start, items)
MOVE_MANY = 9     # (list of values, timeout)    -> index of the last one

# Collective operations over trees (joined stages).
REDUCE = 16       # (contribution, how, timeout) -> result at the root member, None elsewhere
ALLREDUCE = 17    # (contribution, how, timeout) -> result everywhere
BROADCAST = 18    # (contribution, how, timeout) -> the root member's value everywhere
BARRIER = 19      # (contribution, how, timeout) -> None once every member arrived
GATHER = 20       # (contribution, how, timeout) -> every member's value, by member

NAMES = {
    MOVE: "move", OBSERVE: "observe", FIRST: "first", LAST: "last", DELTA: "delta", AXE: "axe",
    READ_RANGE: "read_range", LATEST: "latest", MOVE_MANY: "move_many",
    REDUCE: "reduce", ALLREDUCE: "allreduce", BROADCAST: "broadcast", BARRIER: "barrier",
    GATHER: "gather",
}
CODES = {name: code for code, name in NAMES.items()}
COLLECTIVES = frozenset({REDUCE, ALLREDUCE, BROADCAST, BARRIER, GATHER})
# Operations whose last argument is a timeout (seconds or None): a remote hop waits that long.
BLOCKING = frozenset({MOVE, OBSERVE, MOVE_MANY}) | COLLECTIVES
