"""Where collecting's cost goes inside the running wind tunnel, sampled with perf (issue 37).

Run: `python benchmarks/windtunnel_profile.py [--size small] [--steps 10] [--pairs 40] [--period-us 100]`
(needs Linux `perf`, and the right to sample the node processes: root, or perf_event_paranoid <= 1).

One launch of the paper's layout (pathmaps/windtunnel-paper.yaml: 1,841 collectors on 140 threads),
its collectors switched on and off at run time between the runs of each A B B A pair, as
`windtunnel_bench.py --compare switch` does. Each run is sampled by `perf record -e cpu-clock` on
every node process (every thread of them: the application threads, where the collectors run, and
the node's server threads), one sample per `--period-us` of CPU, so that a sample count is CPU time.
Each sample is put in the part of the collection its function belongs to (PARTS: functions of the
compiled collector and of pastset's ring), or in "everything else" (the application's own code,
the interpreter, the node, the kernel). Per record, collectors on minus off, summed over the pairs:

  - each part's CPU: the collection's own cost, where it is paid, by function;
  - everything else's CPU: what collecting costs the code around it (caches and branch predictors
    shared with the collector, threads woken in another order), which no microbenchmark sees;
  - their sum, beside the application threads' own CPU clocks (the runs' `cpu`, on minus off) and
    the step time: the three should agree when the parts account for the slowdown.

A switched-off collector still runs `collect_vectorcall` to forward the operation: that part is on
both sides here, as in the switch comparison.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from windtunnel_bench import PAPER, per_step, records_written, switch_sampling, warm_up

from experiments.workload import switch_collectors_of
from paths import Pathmap, launch

# A function of the compiled collector (eventspace/collector_c) or of pastset's ring
# (pastset/ring_c), and the part of a record's cost it is.
PARTS = {
    "collect_vectorcall": "collector stage: switch, mark, clock reads, fields, prefetch",
    "emit": "record write (the appender's call)",
    "record_as": "record write (the appender's call)",
    "appender_vectorcall": "record write (the appender's call)",
    "channel_append": "record write (the appender's call)",
    "typed_size": "typed tuple's size",
    "typedsize_vectorcall": "typed tuple's size",
    "plain_size.isra.0": "typed tuple's size",
    "ring_append": "ring append: slot, cursors, keep",
    "write_packed": "ring append: slot, cursors, keep",
    "write_copy": "ring append: slot, cursors, keep",
    "contract_append": "ring append: slot, cursors, keep",
    "has_waiters.isra.0": "waiters check",
    "py_clock_ns": "clock",
    "tsc_anchor": "clock",
}
COLLECTOR_OBJECTS = ("_collector.", "_ring.")
ELSE = "everything else (application, interpreter, node, kernel)"


class Sampler:
    """`perf record` on the given processes while a run lasts; `parts()` counts its samples by part."""

    def __init__(self, pids, period_ns: int, out: Path):
        self.out = out
        self.process = subprocess.Popen(
            ["perf", "record", "-q", "-e", "cpu-clock", "-c", str(period_ns), "-o", str(out),
             "-p", ",".join(str(p) for p in pids)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # perf opens its events on every thread before it samples: wait until its file has a header.
        deadline = time.monotonic() + 10
        while (not out.exists() or out.stat().st_size == 0) and time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"perf record failed: {self.process.stderr.read().decode().strip()}")
            time.sleep(0.01)
        time.sleep(0.2)

    def stop(self) -> collections.Counter:
        self.process.send_signal(signal.SIGINT)
        if self.process.wait(timeout=60) not in (0, -signal.SIGINT):   # perf ends itself by the signal
            raise SystemExit(f"perf record failed: {self.process.stderr.read().decode().strip()}")
        script = subprocess.run(["perf", "script", "-i", str(self.out), "-F", "ip,sym,dso"],
                                capture_output=True, text=True, check=True).stdout
        counts = collections.Counter()
        for line in script.splitlines():
            fields = line.split()   # ip, symbol (absent when unknown), (object)
            if fields:
                counts[part_of(fields[1] if len(fields) > 2 else "", fields[-1])] += 1
        self.out.unlink()
        return counts


def part_of(sym: str, dso: str) -> str:
    if any(name in dso for name in COLLECTOR_OBJECTS):
        return PARTS.get(sym, "other collector code")
    return ELSE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--period-us", type=int, default=100, help="CPU time between two samples of a thread")
    parser.add_argument("--pathmap", default=str(PAPER))
    args = parser.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("windtunnel_profile: needs Linux perf (the linux-perf package)")
    pm = Pathmap.load(args.pathmap)
    period = args.period_us * 1000
    samples = {True: collections.Counter(), False: collections.Counter()}
    cpu = {True: [], False: []}
    step = {True: [], False: []}
    records = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as run_dir, launch(pm, run_dir=run_dir, start_timeout=300) as run:
        switch_sampling(run, pm, False)
        warm_up(run)
        pids = sorted(run.pids.values())
        for i in range(args.pairs + 1):     # the first pair warms the size up and is left out
            for state in ((True, False) if i % 2 == 0 else (False, True)):
                switch_collectors_of(run, pm, state)
                before = records_written(run, pm)
                sampler = Sampler(pids, period, Path(run_dir) / "perf.data")
                seconds, _, thread_cpu = per_step(run, args.size, args.steps, cpu=True)
                counts = sampler.stop()
                if i:
                    samples[state] += counts
                    cpu[state].append(thread_cpu)
                    step[state].append(seconds)
                    if state:
                        records += records_written(run, pm) - before
            print(f"pair {i}{' (warm-up, left out)' if not i else ''}: load {os.getloadavg()[0]:.1f}", flush=True)
        switch_collectors_of(run, pm, True)
    steps = args.pairs * args.steps
    per_record = lambda seconds: seconds / records * 1e6     # noqa: E731  µs per record
    print(f"\n{args.size}, {args.pairs} pairs of {args.steps} steps, {records / steps:,.0f} records a step, "
          f"one sample per {args.period_us} µs of CPU, {time.monotonic() - started:.0f} s")
    print(f"{'part':<62} {'on':>8} {'off':>8} {'µs/record':>10}")
    parts = sorted(set(samples[True]) | set(samples[False]), key=lambda p: (p == ELSE, -samples[True][p]))
    total = 0.0
    for part in parts:
        on, off = samples[True][part], samples[False][part]
        cost = per_record((on - off) * period / 1e9)
        total += cost
        print(f"{part:<62} {on:>8} {off:>8} {cost:>10.3f}")
    print(f"{'all sampled CPU of the node processes, on − off':<62} {sum(samples[True].values()):>8} "
          f"{sum(samples[False].values()):>8} {total:>10.3f}")
    thread_cpu = per_record((sum(cpu[True]) - sum(cpu[False])) * args.steps)
    step_time = per_record((sum(step[True]) - sum(step[False])) * args.steps)
    print(f"application threads' CPU clocks, on − off: {thread_cpu:.3f} µs a record "
          f"(median pair ratio {statistics.median(a / b for a, b in zip(cpu[True], cpu[False])):.3f})")
    print(f"step time (slowest thread), on − off: {step_time:.3f} µs a record "
          f"(median pair ratio {statistics.median(a / b for a, b in zip(step[True], step[False])):.3f})")


if __name__ == "__main__":
    main()
