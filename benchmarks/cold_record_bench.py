"""What one trace record costs with the caches cold, as inside a running application (issue 37).

Run: `python benchmarks/cold_record_bench.py [--paths 1841] [--rounds 100] [--against PATH.so]`.

One thread moves one tuple along each of `--paths` paths in turn (the wind tunnel's template,
[int, bytes] with a 1,120-byte row; a `source` collector on every path), and between two rounds
writes 64 MiB, so that every collector's objects, its trace element and its ring are out of the
caches when its turn comes, as they are between two steps of the wind tunnel (whose step touches
1,841 collectors and megabytes of lattice). The same node runs every round with its collectors
switched on and switched off (so that only the recording differs), and a node without
collectors; each round is timed on the thread's own CPU clock (time.thread_time: a round
preempted by another program on the machine does not count the wait). Per record:

  - recording: collectors on minus off, round by round (what `windtunnel_bench.py --compare
    switch` measures per record);
  - forwarding: collectors off minus no collectors (what a switched-off collector costs; the
    relaunch comparison holds it, the switch comparison does not). Coarser: two nodes, whose
    objects lie apart in memory (the same build against itself moves it by about ±0.15 µs).

`--against PATH` adds the same figures for another build of the compiled collector (a
`_collector*.so`, e.g. main's, built with the same compiler flags), in the same rounds.
The collectors run compiled unless EVENTSPACE_PURE=1.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.machinery
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from timing import Figure, difference, report

from eventspace import compiled
from eventspace.space import NodeSpace
from paths import AppMap, ClusterMap, Context, Instrument, NodeServer, Placement, Selector, generate
from paths.inputs import AppElement

ONE_NODE = "clusters: {c1: {nodes: {A: {host: 127.0.0.1}}}}"
ROW = bytes(1120)   # a small wind tunnel's border-row group
EVICT = 64 << 20    # more than the machine's caches (2 x 1 MiB L2, 32 MiB L3)


def layout(paths: int, collected: bool):
    app = AppMap(("T0",), tuple(AppElement(f"e{i}", ["int", "bytes"], ("T0",), keep=2) for i in range(paths)), ())
    pm = generate(app, ClusterMap.loads(ONE_NODE), Placement(), "flat", name="record-bench")
    return dataclasses.replace(pm, instrument=Instrument(
        collectors=(Selector(at=("source",)),) if collected else ())).validate()


def built(path: str):
    """The compiled collector module in the shared object at `path`."""
    loader = importlib.machinery.ExtensionFileLoader("eventspace._collector", path)
    spec = importlib.util.spec_from_file_location("eventspace._collector", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def moves(pm, module=None):
    """(the node, T0's move along each path), the node's collectors from `module` if given."""
    kept = compiled._built
    if module is not None:
        compiled._built = module
    try:
        node = NodeServer(pm, "A")
    finally:
        compiled._built = kept
    ctx = Context(node, "T0", {})
    return node, [ctx.path(f"e{i}").move for i in range(len(pm.paths))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", type=int, default=1841)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--against", help="another build of the compiled collector (a _collector*.so)")
    args = parser.parse_args()
    builds = {"this build": None} | ({f"against {Path(args.against).name}": built(args.against)}
                                     if args.against else {})
    collected = layout(args.paths, True)
    nodes = {label: moves(collected, module) for label, module in builds.items()}
    plain_node, plain = moves(layout(args.paths, False), None)
    cases = [(label, on) for label in builds for on in (True, False)] + [("no collectors", None)]
    times = {case: [] for case in cases}
    evict = np.zeros(EVICT, np.uint8)
    for r in range(args.rounds):
        for case in (cases if r % 2 == 0 else cases[::-1]):
            label, on = case
            if on is None:
                node, calls = plain_node, plain
            else:
                node, calls = nodes[label]
                NodeSpace.of(node).set(on)
            evict += 1
            started = time.thread_time()
            for move in calls:
                move((r, ROW))
            times[case].append((time.thread_time() - started) / len(calls))
    for node, _ in [*nodes.values(), (plain_node, None)]:
        node.close()
    implementation = "pure" if compiled.collector_module() is None else "compiled"
    figures, none = [], Figure("move, no collectors", times[("no collectors", None)])
    for label in builds:
        on, off = Figure(f"{label}: on", times[(label, True)]), Figure(f"{label}: off", times[(label, False)])
        recording = difference(f"{label}: recording (on - off)", on, off)
        forwarding = difference(f"{label}: forwarding (off - no collectors)", off, none)
        figures += [off, on, recording, forwarding]
        for figure in (recording, forwarding):
            q = statistics.quantiles(figure.rounds, n=4)
            print(f"{figure.name}: median {figure.median * 1e6:.3f} µs a record, quartiles "
                  f"{q[0] * 1e6:.3f}–{q[2] * 1e6:.3f}")
    report(f"One record with the caches cold, {args.paths} paths in turn, {implementation} collector",
           [none, *figures], {}, "cold_record_bench.json", unit="µs",
           extra={"settings": {"paths": args.paths, "rounds": args.rounds, "against": args.against,
                               "implementation": implementation}})


if __name__ == "__main__":
    main()
