"""Event collector overhead: the paper's nested collectors, a plain A/B, and an OpenTelemetry span beside it.

Run: `python benchmarks/collector_bench.py [--rounds 15] [--quick] [--profile]`.

Everything runs in this process on in-process node servers (no sockets): one thread, one path,
one binary element with `keep`, so that the move a collector wraps is cheap and the collector's
own cost shows.

(a) The paper's method. A path with collectors nested around the one measured: a `source`
    collector in front of the path (outer), a `stage` collector in front of the element stage
    (measured, middle) and a `sink` collector in front of the element (inner). Each operation
    leaves one record in each trace element, and their timestamps tell the overhead:
      - outside its window: outer duration - middle duration (what the measured collector
        adds around the interval it reports itself);
      - full: (outer - inner) with the measured collector minus (outer - inner) without it,
        on a path with the outer and inner collectors only, run in the same rounds.
(b) A/B: the same local move through the path without and with one collector; per-op time and
    the difference, round by round. Then again over 2000 paths (one element each) used in turn,
    as in an application with many paths: each collector, trace element, lock and ring is cold in
    the caches when its turn comes, which is what a collector costs inside a real run.
(c) When opentelemetry-sdk is installed (`pip install -e '.[otel]'`): one SDK span around the
    same move, with a TracerProvider that has no span processor and with a SimpleSpanProcessor
    into an InMemorySpanExporter; the span's cost is the difference to the plain move.

Targets (issue 17): a collector costs <= 0.25 µs on a local trace element (<= 1.0 µs over 2000
paths in turn; <= 0.4 µs in front of a shared stage, whose appends take the trace element's lock);
an OpenTelemetry span (no processor) costs >= 80x a collector. The collectors run compiled unless
EVENTSPACE_PURE=1 (the pure-Python reference); the table's title says which. `--profile` samples the collecting loop with py-spy (when installed) and
prints where the time goes, by line.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from timing import Figure, difference, interleave, report

from eventspace import trace
from eventspace.catalogue import Catalogue
from paths import (
    AppMap,
    ClusterMap,
    Context,
    Instrument,
    NodeServer,
    Placement,
    Selector,
    generate,
)
from paths.inputs import AppElement

APP = """\
threads: 1
elements:
  - {name: samples, template: '=HHIIIIQQ', keep: 200, users: [T0]}
"""
ONE_NODE = "clusters: {c1: {nodes: {A: {host: 127.0.0.1}}}}"
RECORD = (1, 0, 7, 3, 42, 64, 1_000_000, 1_000_500)
ELEMENT_STAGE = "samples/element"

SOURCE = Selector(at=("source",))
SINK = Selector(at=("sink",))
STAGE = Selector(stages=(ELEMENT_STAGE,))


def node(*collectors: Selector, keep: int = 200) -> NodeServer:
    """An in-process node server running the one-thread, one-element pathmap with `collectors`."""
    pm = generate(AppMap.loads(APP), ClusterMap.loads(ONE_NODE), Placement(), "flat", name="collector-bench")
    pm = dataclasses.replace(pm, instrument=Instrument(keep=keep, collectors=collectors)).validate()
    return NodeServer(pm, "A")


def mover(server: NodeServer):
    """T0's `move` of one record on its path to `samples`, bound to the record."""
    move = Context(server, "T0", {}).path("samples").move
    return lambda: move(RECORD)


# -- (b) and (c): A/B cases ----------------------------------------------------------------------


def ab_cases(calls: int) -> tuple[dict, list[str]]:
    plain, collected, shared = node(), node(SOURCE), node(STAGE)
    assert not plain.collectors and len(collected.collectors) == 1 and len(shared.collectors) == 1
    st = struct.Struct(trace.FORMAT)
    ring = bytearray(200 * st.size)
    lock = threading.Lock()
    pack_into = st.pack_into

    def floor():
        with lock:
            pack_into(ring, 0, *RECORD)

    append = plain.server.enter("bench/append", trace.FORMAT, keep=200).appender()
    clock = time.monotonic_ns
    cases = {
        "bare lock + pack_into": (floor, calls, None),
        "trace append alone": (lambda: append(*RECORD), calls, "bare lock + pack_into"),
        "two clock reads": (lambda: (clock(), clock()), calls, "bare lock + pack_into"),
        "move, no collector": (mover(plain), calls, None),
        "move, one collector": (mover(collected), calls, "move, no collector"),
        # In front of the element stage, which every thread of the element shares: a locked append.
        "move, one collector in front of a shared stage": (mover(shared), calls, "move, no collector"),
    }
    skipped = []
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
    except ImportError:
        skipped.append("OpenTelemetry span: opentelemetry-sdk is not installed (pip install -e '.[otel]')")
        return cases, skipped
    move = mover(plain)
    bare = TracerProvider().get_tracer("collector-bench")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    kept = provider.get_tracer("collector-bench")
    span_calls = max(200, calls // 20)
    finished = 0

    def span_bare():
        with bare.start_as_current_span("move"):
            move()

    def span_kept():
        nonlocal finished
        with kept.start_as_current_span("move"):
            move()
        finished += 1
        if finished == 10_000:  # keep memory flat
            exporter.clear()
            finished = 0

    cases["move in an OTel span (no processor)"] = (span_bare, span_calls, "move, no collector")
    cases["move in an OTel span (in-memory export)"] = (span_kept, span_calls, "move, no collector")
    return cases, skipped


def cold_cases(paths: int, calls: int) -> dict:
    """(b) again over `paths` paths used in turn, as an application with many paths does: each
    collector's closure, trace element, lock and ring is out of the caches when its turn comes."""
    app = AppMap(("T0",), tuple(AppElement(f"e{i}", trace.FORMAT, ("T0",), keep=200) for i in range(paths)), ())
    pm = generate(app, ClusterMap.loads(ONE_NODE), Placement(), "flat", name="collector-bench-cold")
    cases = {}
    for name, collectors, peer in ((f"move, no collector, {paths} paths in turn", (), None),
                                   (f"move, one collector, {paths} paths in turn", (SOURCE,),
                                    f"move, no collector, {paths} paths in turn")):
        server = NodeServer(dataclasses.replace(pm, instrument=Instrument(collectors=collectors)).validate(), "A")
        ctx = Context(server, "T0", {})
        moves = [ctx.path(f"e{i}").move for i in range(paths)]

        def every(moves=moves):
            for move in moves:
                move(RECORD)

        cases[name] = (every, max(1, calls // paths), peer)
    return cases


# -- (a): the paper's method, from the collectors' own timestamps --------------------------------


class Nested:
    """A path with outer (source) and inner (sink) collectors, and the measured (stage) collector
    between them when `measured`; reads each operation's records back from the trace elements."""

    def __init__(self, measured: bool, batch: int):
        selectors = (SOURCE, SINK, STAGE) if measured else (SOURCE, SINK)
        self.server = node(*selectors, keep=batch)
        self.batch = batch
        self.move = mover(self.server)
        by_role = {e.role: e for e in Catalogue(self.server.pathmap)}
        self.trace = {role: self.server.server.element(e.trace) for role, e in by_role.items()}
        self._check_nesting()

    def _check_nesting(self):
        self.run()
        outer, inner = self.durations["source"], self.durations["sink"]
        assert (outer >= inner).all(), "the source collector must enclose the sink collector"
        if "stage" in self.durations:
            middle = self.durations["stage"]
            assert (outer >= middle).all() and (middle >= inner).all(), "collectors are not nested as planned"

    def run(self) -> None:
        """`batch` moves, then every collector's durations (ns) of exactly those moves."""
        move = self.move
        for _ in range(self.batch):
            move()
        self.durations = {}
        for role, element in self.trace.items():
            records = trace.decode(element.latest(self.batch)[1])
            assert len(records) == self.batch
            self.durations[role] = records["t_end"].astype("int64") - records["t_start"].astype("int64")


class Paper:
    """(a), one round at a time: the measured collector's cost from the collectors' timestamps."""

    def __init__(self, batch: int):
        self.with_measured, self.without = Nested(True, batch), Nested(False, batch)
        self.outside, self.gap_with, self.gap_without = [], [], []

    def round(self) -> None:
        self.with_measured.run()
        self.without.run()
        d, w = self.with_measured.durations, self.without.durations
        self.outside.append(float(np.median(d["source"] - d["stage"])) / 1e9)
        self.gap_with.append(float(np.median(d["source"] - d["sink"])) / 1e9)
        self.gap_without.append(float(np.median(w["source"] - w["sink"])) / 1e9)

    def figures(self, peer: str) -> list[Figure]:
        with_fig = Figure("nested: outer - inner, measured collector between", self.gap_with)
        without_fig = Figure("nested: outer - inner, nothing between", self.gap_without)
        return [
            difference("paper: full cost of the measured collector", with_fig, without_fig, peer=peer),
            Figure("paper: outside the measured collector's window", self.outside, peer=peer),
            with_fig, without_fig,
        ]


# -- profiling -------------------------------------------------------------------------------------


def spin(seconds: float) -> None:
    """Move through the collected path for `seconds` (what --profile samples)."""
    move = mover(node(SOURCE))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(10_000):
            move()


def profile(seconds: float = 5.0) -> None:
    """Sample `spin` with py-spy and print self time by line (the hot lines of the collector)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("--profile needs py-spy (pip install py-spy)")
        return
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        subprocess.run([py_spy, "record", "-r", "1000", "--nonblocking", "-f", "raw", "-o", out.name, "--",
                        sys.executable, __file__, "--spin", str(seconds)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples = collections.Counter()
        total = 0
        for line in Path(out.name).read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            if not any("spin" in f for f in frames):
                continue  # start-up and imports
            total += int(count)
            samples[frames[-1]] += int(count)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"where a collected move spends its time (py-spy, {total} samples, self time by line)")
    table.add_column("share", justify="right")
    table.add_column("line")
    for frame, count in samples.most_common(14):
        table.add_row(f"{count / total:.1%}", frame)
    Console(width=160).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="fewer calls per round and fewer rounds")
    parser.add_argument("--profile", action="store_true", help="also sample the collector with py-spy")
    parser.add_argument("--spin", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.spin:
        spin(args.spin)
        return
    rounds = 5 if args.quick else args.rounds
    calls, batch = (20_000, 2_000) if args.quick else (100_000, 10_000)
    paths = 500 if args.quick else 2_000

    cases, skipped = ab_cases(calls)
    cold = cold_cases(paths, calls)
    measured = {name: Figure(name, peer=peer) for name, (_, _, peer) in {**cases, **cold}.items()}
    paper = Paper(batch)
    for _ in range(rounds):  # the A/B cases, the cold ones and the paper's method in turn, round by round
        for name, figure in interleave(cases, 1, batch=200).items():
            measured[name].rounds += figure.rounds
        for name, figure in interleave(cold, 1, batch=1).items():
            measured[name].rounds += [seconds / paths for seconds in figure.rounds]
        paper.round()
    ab = difference("A/B: one collector's cost", measured["move, one collector"], measured["move, no collector"],
                    peer="bare lock + pack_into")
    shared = difference("A/B: one collector's cost, in front of a shared stage (locked)",
                        measured["move, one collector in front of a shared stage"],
                        measured["move, no collector"], peer=ab.name)
    cold_cost = difference(f"A/B over {paths} paths in turn: one collector's cost",
                           measured[f"move, one collector, {paths} paths in turn"],
                           measured[f"move, no collector, {paths} paths in turn"], peer=ab.name)
    figures = [*measured.values(), ab, shared, cold_cost, *paper.figures(peer=ab.name)]
    otel = [f for f in measured if "OTel" in f]
    for name in otel:
        figures.append(difference(f"{name.removeprefix('move in an ')}: its cost", measured[name],
                                  measured["move, no collector"], peer="A/B: one collector's cost"))

    def at_most(seconds):
        return (f"≤ {seconds * 1e6:g} µs", lambda f, ratio: f.median <= seconds)

    targets = {
        "A/B: one collector's cost": at_most(0.25e-6),
        "paper: full cost of the measured collector": at_most(0.25e-6),
        shared.name: at_most(0.4e-6),
        f"A/B over {paths} paths in turn: one collector's cost": at_most(1.0e-6),
    }
    for name in otel:
        if "no processor" in name:
            targets[f"{name.removeprefix('move in an ')}: its cost"] = ("≥ 80× the collector", lambda f, r: r >= 80)
    from eventspace import compiled

    implementation = "pure" if compiled.collector_module() is None else "compiled"
    report(f"Event collector overhead ({implementation} collector)", figures, targets, "collector_bench.json",
           extra={"settings": {"rounds": rounds, "calls": calls, "batch": batch, "paths": paths,
                               "implementation": implementation},
                  "skipped": skipped})
    for line in skipped:
        print(f"skipped: {line}")
    if args.profile:
        profile()


if __name__ == "__main__":
    main()
