"""The collectives micro-benchmark's thread program: rounds of allreduce, barrier and broadcast, each timed."""

from __future__ import annotations

import time

from paths import PathsError

OPS = ("allreduce", "barrier", "broadcast")
TREE = "ops"
# The combining function for allreduce with a payload: an entry point of eventspace.functions, so
# that pathmaps need not list this module under allow_modules.
SUM_WITH_PAYLOAD = "collectives.sum"
# A round that waits longer than this (seconds) for a member fails the run rather than hang it.
TIMEOUT = 60.0


class WrongResult(PathsError):
    """A collective returned something other than what its members contributed."""


def check_ops(ops) -> tuple[str, ...]:
    """The op names as a tuple; ValueError naming an unknown or repeated op."""
    names = tuple(o.strip() for o in (ops.split(",") if isinstance(ops, str) else ops) if o.strip())
    if not names:
        raise ValueError(f"no ops given; use some of {', '.join(OPS)}")
    for name in names:
        if name not in OPS:
            raise ValueError(f"unknown op {name!r}; use some of {', '.join(OPS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"ops {','.join(names)} name an op twice")
    return names


def pattern(seed: int, size: int) -> bytes:
    """`size` bytes that say which contribution (seed) they came from."""
    return bytes([seed % 256]) * size


def sum_with_payload(values: list) -> list:
    """Combine [int, bytes] contributions: the ints summed, the greatest payload kept (associative)."""
    return [sum(v[0] for v in values), max(v[1] for v in values)]


def thread(ctx) -> dict:
    """One application thread: `rounds` rounds, each running every op of `ops` once over tree `tree`.

    Args: rounds (default 10), payload (bytes, default 0), ops (default allreduce,barrier,broadcast),
    tree (default "ops"), and the test hook `delay`: {thread, seconds, every}, by which that thread
    sleeps `seconds` before each op of every `every`-th round, so that it arrives late. Returns
    {"latency": {op: [seconds per round]}, "delayed": total seconds it slept}; raises WrongResult
    if a collective's result is not what the members contributed.
    """
    rounds = int(ctx.args.get("rounds", 10))
    size = int(ctx.args.get("payload", 0))
    ops = check_ops(ctx.args.get("ops", OPS))
    tree = ctx.args.get("tree", TREE)
    delay = ctx.args.get("delay") or {}
    late = float(delay.get("seconds", 0.0)) if delay.get("thread") == ctx.thread else 0.0
    every = max(1, int(delay.get("every", 1)))
    try:
        members = list(ctx.pathmap.tree(tree).members)
    except KeyError:
        known = ", ".join(t.name for t in ctx.pathmap.trees) or "(none)"
        raise PathsError(f"no tree {tree!r} in pathmap {ctx.pathmap.name}; trees: {known}") from None
    if ctx.thread not in members:
        raise PathsError(f"thread {ctx.thread} is not a member of tree {tree} (members: {', '.join(members)})")
    me, root = members.index(ctx.thread), members[0]
    is_root = ctx.thread == root
    latency: dict[str, list[float]] = {name: [] for name in ops}
    steps = [(name, _RUN[name], latency[name]) for name in ops]  # resolved once, outside the timed loop
    delayed = 0.0
    ctx.report(round=0)
    for r in range(rounds):
        for name, run_op, times in steps:
            if late and r % every == 0:
                time.sleep(late)
                delayed += late
            started = time.perf_counter()
            result = run_op(ctx, tree, r, me, is_root, size)
            times.append(time.perf_counter() - started)
            check_result(name, result, r, len(members), size)
        ctx.report(round=r + 1)
    return {"latency": latency, "delayed": delayed}


def _allreduce(ctx, tree, r, me, is_root, size):
    if size:
        return ctx.allreduce([me + r, pattern(me + r, size)], SUM_WITH_PAYLOAD, tree=tree, timeout=TIMEOUT)
    return ctx.allreduce(me + r, "sum", tree=tree, timeout=TIMEOUT)


def _barrier(ctx, tree, r, me, is_root, size):
    return ctx.barrier(tree=tree, timeout=TIMEOUT)


def _broadcast(ctx, tree, r, me, is_root, size):
    return ctx.broadcast([r, pattern(r, size)] if is_root else None, tree=tree, timeout=TIMEOUT)


_RUN = {"allreduce": _allreduce, "barrier": _barrier, "broadcast": _broadcast}


def check_result(name: str, result, r: int, members: int, size: int) -> None:
    """Raise WrongResult unless `result` is what op `name` of round `r` should give every member."""
    if name == "allreduce":
        total = members * r + members * (members - 1) // 2
        if size:
            expected = [total, pattern(max((m + r) % 256 for m in range(members)), size)]
            got = list(result) if isinstance(result, (list, tuple)) else result
        else:
            expected, got = total, result
    elif name == "broadcast":
        expected = [r, pattern(r, size)]
        got = list(result) if isinstance(result, (list, tuple)) else result
    else:
        expected, got = None, result
    if got != expected:
        raise WrongResult(f"round {r}: {name} gave {_short(got)}, expected {_short(expected)}")


def _short(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    if isinstance(value, (bytes, bytearray)):
        head = bytes(value[:4]).hex()
        return f"{len(value)} bytes ({head}{'…' if len(value) > 4 else ''})"
    return repr(value)
