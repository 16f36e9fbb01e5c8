"""The wind tunnel on PATHS: each application thread steps its slice and trades border rows through its paths."""

from __future__ import annotations

import threading
import time

from paths import PathsError

from .lattice import SIZES, Slice, row_digests
from .picture import column_blocks

# The eight matrices' border rows travel in three elements per direction, so that a thread uses
# twelve elements (as the EventSpace paper's wind tunnel did): up{g}_{i} carries group g of
# thread i's top row to thread i-1, down{g}_{i} its bottom row to thread i+1.
GROUPS = ((0, 3), (3, 6), (6, 8))
TREE = "count"
PICTURE_WIDTH = 64

# numpy releases the GIL for every short call; with many threads per process that hands the GIL
# round all of them. One lock per process around each compute phase keeps steps steady.
_COMPUTE = threading.Lock()


class ConservationError(PathsError):
    """The particle count changed: the simulation (or an exchange) is wrong."""


def size_n(size) -> int:
    """N (rows) for a size name or a number."""
    if isinstance(size, int) or (isinstance(size, str) and size.isdigit()):
        return int(size)
    try:
        return SIZES[size]
    except KeyError:
        raise PathsError(f"unknown size {size!r}; use {', '.join(SIZES)} or a number of rows") from None


def thread(ctx) -> dict:
    """One application thread: `steps` steps of its slice (args: size, steps, seed, check_every,
    `until` (a time.time() after which the threads agree, at a check, to stop early), and the
    test hook `stall`: {thread, at_step, seconds}). Returns its rows' digests, particle counts,
    the column blocks of matrix 0 for the picture, its exchange count, the steps it made, and the
    seconds its step loop took (`seconds`) and ran on a core (`cpu`: not waiting for one, nor for data)."""
    names = [t.name for t in ctx.pathmap.threads]
    count, index = len(names), names.index(ctx.thread)
    n = size_n(ctx.args.get("size", "small"))
    steps = int(ctx.args.get("steps", 10))
    seed = int(ctx.args.get("seed", 1))
    check_every = int(ctx.args.get("check_every", 10))
    stall = ctx.args.get("stall") or {}
    until = ctx.args.get("until")
    with _COMPUTE:
        band = Slice(n, index, count, seed)
    above, below = (index - 1) % count, (index + 1) % count
    send_up = [ctx.path(f"up{g}_{index}") for g in range(len(GROUPS))]
    send_down = [ctx.path(f"down{g}_{index}") for g in range(len(GROUPS))]
    from_below = [ctx.path(f"up{g}_{below}") for g in range(len(GROUPS))]
    from_above = [ctx.path(f"down{g}_{above}") for g in range(len(GROUPS))]
    row = 2 * n
    cuts = [(a * row, b * row) for a, b in GROUPS]
    with _COMPUTE:
        mine = band.particles()
    initial = ctx.allreduce(mine, "sum", tree=TREE)
    started, cpu = time.perf_counter(), time.thread_time()
    exchanges = 0
    ctx.report(step=0)
    for step in range(steps):
        if stall and stall.get("thread") == ctx.thread and step == int(stall.get("at_step", 0)):
            time.sleep(float(stall.get("seconds", 10)))
        with _COMPUTE:
            band.collide(step)
            top, bottom = band.border_rows()
        for (a, b), up, down in zip(cuts, send_up, send_down):
            up.move((step, top[a:b]))
            down.move((step, bottom[a:b]))
        parts_above, parts_below = [], []
        for element in from_above:
            got, data = element.observe()
            parts_above.append(_checked(data, got, step, element))
        for element in from_below:
            got, data = element.observe()
            parts_below.append(_checked(data, got, step, element))
        exchanges += 4 * len(GROUPS)
        with _COMPUTE:
            band.stream(step, b"".join(parts_above), b"".join(parts_below))
        if (step + 1) % check_every == 0 or step + 1 == steps:
            with _COMPUTE:
                mine = band.particles()
            total = ctx.allreduce(mine, "sum", tree=TREE)
            if total != initial:
                raise ConservationError(f"step {step}: {total} particles, but the run began with {initial}")
            if until is not None and ctx.allreduce(int(time.time() >= until), "max", tree=TREE):
                ctx.report(step=step + 1)
                steps = step + 1
                break
        ctx.report(step=step + 1)
    seconds, cpu = time.perf_counter() - started, time.thread_time() - cpu
    with _COMPUTE:
        state = band.state
        particles, cells, obstacle = column_blocks(state[0], PICTURE_WIDTH)
        digests = row_digests(state)
        mine = band.particles()
    return {"index": index, "rows": list(band.rows), "digests": digests, "particles": mine,
            "initial": initial, "exchanges": exchanges, "seconds": seconds, "cpu": cpu, "steps": steps,
            "blocks": [particles.tolist(), cells.tolist(), obstacle.tolist()]}


def _checked(data, got, step, element):
    if got != step:
        raise PathsError(f"element {element.name}: got the row of step {got} at step {step}")
    return data
