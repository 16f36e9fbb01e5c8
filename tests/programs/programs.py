"""Application programs and user functions that the runtime tests run inside node processes."""

import time

import numpy as np

from paths import Wrapper
from paths import operation as op


def ring(ctx):
    """Pass a token round the ring of row_I_J elements; allreduce the thread numbers each step."""
    me = int(ctx.thread[1:])
    n = len(ctx.pathmap.threads)
    out = ctx.path(f"row_{me}_{(me + 1) % n}")
    inn = ctx.path(f"row_{(me - 1) % n}_{me}")
    seen, sums = [], []
    for step in range(int(ctx.args.get("steps", 10))):
        out.move((step * 1000 + me, ctx.thread.encode()))
        value, sender = inn.observe(timeout=20)
        seen.append([value, sender.decode()])
        sums.append(ctx.allreduce(me, "sum", tree="count", timeout=20))
        ctx.barrier(tree="step", timeout=20)
    return {"seen": seen, "sums": sums, "node": ctx.node}


def collectives(ctx):
    """Every collective, with every built-in op and an allowed user function."""
    me = int(ctx.thread[1:])
    tree = ctx.args.get("tree", "count")
    out = {}
    for op_name in ("sum", "min", "max", "count"):
        out[op_name] = ctx.allreduce(me + 1, op_name, tree=tree, timeout=20)
    out["product"] = ctx.allreduce(me + 1, "programs:product", tree=tree, timeout=20)
    out["reduce"] = ctx.reduce(me + 1, "sum", tree=tree, timeout=20)
    out["broadcast"] = ctx.broadcast(f"from {ctx.thread}", tree=tree, timeout=20)
    out["gather"] = ctx.gather(me * me, tree=tree, timeout=20)
    ctx.barrier(tree=tree, timeout=20)
    return out


def product(values):
    result = 1
    for v in values:
        result *= v
    return result


def block_forever(ctx):
    """Wait on the element from the left neighbour in the ring, into which nobody ever moves."""
    me = int(ctx.thread[1:])
    n = len(ctx.pathmap.threads)
    ctx.path(f"row_{(me - 1) % n}_{me}").observe()


def not_a_member(ctx):
    return ctx.allreduce(1, "sum", tree=ctx.args["tree"], timeout=5)


def disagree(ctx):
    """Even threads allreduce with sum, odd ones with max, in the same round."""
    me = int(ctx.thread[1:])
    return ctx.allreduce(me, "sum" if me % 2 == 0 else "max", tree="count", timeout=20)


def sleepy(ctx):
    time.sleep(float(ctx.args.get("seconds", 60)))


def ring_forever(ctx):
    """The ring, paced, until `stop_after` seconds have passed (the threads agree when to stop)."""
    me = int(ctx.thread[1:])
    n = len(ctx.pathmap.threads)
    out = ctx.path(f"row_{me}_{(me + 1) % n}")
    inn = ctx.path(f"row_{(me - 1) % n}_{me}")
    deadline = time.monotonic() + float(ctx.args.get("stop_after", 5))
    pause = float(ctx.args.get("pause", 0.001))
    steps = 0
    while ctx.allreduce(int(time.monotonic() < deadline), "min", tree="count", timeout=30):
        out.move((steps, b"x" * 16))
        inn.observe(timeout=30)
        ctx.barrier(tree="step", timeout=30)
        steps += 1
        ctx.report(step=steps)
        time.sleep(pause)
    return steps


class Count(Wrapper):
    """A user wrapper type (`type: programs:Count`): counts the operations that pass it, by code."""

    def __init__(self, stage_id, params, node):
        super().__init__(stage_id, params, node)
        self.seen = {}

    def __call__(self, code, args):
        self.seen[code] = self.seen.get(code, 0) + 1
        return self.next(code, args)


class NumpyIndices(Wrapper):
    """A user wrapper type (`type: programs:NumpyIndices`): hands back the index a move got, and
    the one an observe read, as numpy integers, as code built on numpy may."""

    def __call__(self, code, args):
        result = self.next(code, args)
        if code == op.MOVE:
            return np.int64(result)
        if code == op.OBSERVE:
            return np.int64(result[0]), result[1]
        return result


def numpy_moves(ctx):
    """`rounds` times (1 by default): move `(numpy.int64(i),)` three times into elements `s` and
    `w`, and observe `w`'s back; what each returned in the last round, as plain ints."""
    s, w = ctx.path("s"), ctx.path("w")
    for _ in range(int(ctx.args.get("rounds", 1))):
        moved = [int(s.move((np.int64(i),))) for i in range(3)] + [int(w.move((np.int64(i),))) for i in range(3)]
        seen = [[int(v) for v in w.observe(index)] for index in moved[3:]]
    return {"moved": moved, "seen": seen}


def double_items(result):
    """A convert function: a (start, items) batch with every item's first field doubled (other
    results, such as a move's index, pass unchanged)."""
    if not isinstance(result, tuple) or len(result) != 2 or not isinstance(result[1], list):
        return result
    start, items = result
    return start, [[2 * item[0], *item[1:]] for item in items]


def hold_back(ctx):
    """`rounds` allreduces over `tree`; then every member enters one more, but thread `late` only
    after `hold` seconds: a round open for that long, waiting for one member."""
    tree = ctx.args.get("tree", "count")
    for _ in range(int(ctx.args.get("rounds", 5))):
        ctx.allreduce(1, "sum", tree=tree, timeout=30)
    if ctx.thread == ctx.args["late"]:
        time.sleep(float(ctx.args.get("hold", 5)))
    return ctx.allreduce(1, "sum", tree=tree, timeout=60)


def outlier(ctx):
    """`rounds` allreduces over `count`: thread `often` arrives `small` seconds late at every
    round, thread `once` `big` seconds late at round `at` only."""
    args = ctx.args
    for r in range(int(args.get("rounds", 8))):
        if ctx.thread == args["often"]:
            time.sleep(float(args["small"]))
        if ctx.thread == args["once"] and r == int(args["at"]):
            time.sleep(float(args["big"]))
        ctx.allreduce(1, "sum", tree="count", timeout=30)


def uneven(ctx):
    """The ring, paced, for `stop_after` seconds; thread `busy` reads each tuple `extra` times
    before it takes it (observes by index, which consume nothing: step k's tuple has index k)."""
    me = int(ctx.thread[1:])
    n = len(ctx.pathmap.threads)
    out = ctx.path(f"row_{me}_{(me + 1) % n}")
    inn = ctx.path(f"row_{(me - 1) % n}_{me}")
    deadline = time.monotonic() + float(ctx.args.get("stop_after", 5))
    extra = int(ctx.args.get("extra", 2)) if ctx.thread == ctx.args.get("busy") else 0
    steps = 0
    while ctx.allreduce(int(time.monotonic() < deadline), "min", tree="count", timeout=30):
        out.move((steps, b"x" * 16))
        for _ in range(extra):
            inn.observe(steps, timeout=30)
        inn.observe(timeout=30)
        steps += 1
        time.sleep(float(ctx.args.get("pause", 0.005)))
    return steps


def fails_in_round(ctx):
    """Every thread joins an allreduce each round; `thread` raises ZeroDivisionError in round `round`,
    so that the others wait for it there (and would for ever, were they not stopped)."""
    for step in range(int(ctx.args.get("rounds", 10))):
        if ctx.thread == ctx.args.get("thread", "T1") and step == int(ctx.args.get("round", 3)):
            return step / 0
        ctx.allreduce(step, "sum", tree="count", timeout=600)
        ctx.report(step=step + 1)
    return "done"


def straggler(ctx):
    """Rounds of an allreduce; in round 2 `thread` holds the others up for `seconds`, computing in a loop
    (`how: compute`) or sleeping (`how: sleep`)."""
    for step in range(4):
        if ctx.thread == ctx.args.get("thread", "T2") and step == 2:
            until = time.monotonic() + float(ctx.args.get("seconds", 8))
            if ctx.args.get("how") == "sleep":
                time.sleep(until - time.monotonic())
            else:
                x = 0
                while time.monotonic() < until:
                    x += 1
        ctx.allreduce(step, "sum", tree="count", timeout=60)
    return step


def holds_gil(ctx):
    """`thread` calls C for `seconds`, a second after it starts, without releasing the GIL (ctypes.PyDLL:
    the GIL stays held), so that nothing else of its process runs Python meanwhile; the others wait for
    it in an allreduce."""
    import ctypes

    if ctx.thread == ctx.args.get("thread", "T2"):
        time.sleep(1.0)   # the launcher's start has its answer from every node first
        ctypes.PyDLL(None).sleep(int(ctx.args.get("seconds", 8)))
    return ctx.allreduce(1, "sum", tree="count", timeout=60)
