"""A master hands numbers to workers through one element and collects their squares through another;
every round ends with an allreduce that checks that no item was lost. See the README, "Writing your
own program": `eventspace run squares:main --pathmap squares.yaml` in this directory."""

STOP = -1  # the item number that ends a worker's round


def master(ctx, items: int, workers: int) -> int:
    work, results = ctx.path("work"), ctx.path("results")
    for i in range(items):
        work.move((i, i))                        # blocks while 16 are queued (delta: 16)
    for _ in range(workers):
        work.move((STOP, 0))                     # one end-of-round mark per worker
    return sum(results.observe()[1] for _ in range(items))


def worker(ctx) -> int:
    work, results = ctx.path("work"), ctx.path("results")
    handled = 0
    while True:
        item, value = work.observe()             # consuming: each item reaches one worker
        if item == STOP:
            return handled
        results.move((item, value * value))
        handled += 1


def main(ctx):
    rounds, items = int(ctx.args.get("rounds", 5)), int(ctx.args.get("items", 20))
    workers = len(ctx.pathmap.threads) - 1
    squares = handled = 0
    for step in range(1, rounds + 1):
        if ctx.thread == "T0":
            squares += master(ctx, items, workers)
            mine = 0
        else:
            mine = worker(ctx)
            handled += mine
        total = ctx.allreduce(mine, "sum")       # over the pathmap's tree `done`: every thread gets it
        if total != items:
            raise RuntimeError(f"round {step}: the workers handled {total} items, not {items}")
        ctx.report(step=step, steps=rounds)      # the progress bar, and the dashboard's steps/s
    return {"handled": handled, "squares": squares}
