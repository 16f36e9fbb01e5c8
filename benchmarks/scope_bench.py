"""Event scope observe rate per view size and tree configuration, against a bare pyzmq + numpy puller.

Run: `python benchmarks/scope_bench.py [--rounds 7] [--quick] [--profile] [--pathmap P]`.

Launches the pathmap (default pathmaps/windtunnel-paper.yaml: 8 nodes, 140 threads, 1841
collectors) on this machine, runs a few wind-tunnel steps of a tiny size so that every trace
element holds records, and then, with the application idle, pulls `latest` scopes over views
of the paper's sizes: one collector, one thread (its 12 paths and its contribute point), one
node, and every collector. Each view is pulled by trees flat, kary:8, per-node and per-cluster, placed in
the monitor or near the data (in the node servers), concurrently; the largest view also one
child after another. Beside each view, in the same rounds, a bare peer pulls the same trace
elements with plain pyzmq DEALER sockets: one pastset LATEST_RECORDS request per node, sent to
every node before any reply is read, and one `np.frombuffer` over the replies. It is the floor
the scope machinery adds to.

Targets (best configuration per view): >= 4000, 3000, 1500, 500 pulls/s for 1, ~14, ~266 and
all trace elements; the scope at most ~1/3 slower than the bare peer for all elements. For all
elements, against flat in the monitor pulled in the same rounds (the median of per-round ratios):
every tree shape pulled concurrently >= 0.5x its observe rate, per-node and per-cluster near
>= 0.8x. Beside every rate, the monitor's own CPU per pull (this process, every thread). One more
row times a bare round trip to one node (a pastset ping): a tree whose near joins ask their
children only once asked adds one of those per level, in series, to what flat pays; the table's
title tells how long this machine's idle CPUs poll before they halt, which sets what it costs.
`--profile` samples the monitor and two node servers with py-spy while the all-elements view is
pulled, and prints where the time goes.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import msgpack
import numpy as np
import zmq
from timing import Figure, interleave, report

from eventspace import trace
from eventspace.catalogue import Catalogue
from eventspace.scope import EventScope
from eventspace.view import View
from pastset import protocol as p
from paths import Pathmap, launch

ROOT = Path(__file__).resolve().parent.parent
PAPER = ROOT / "pathmaps" / "windtunnel-paper.yaml"
TREES = ("flat", "kary:8", "per-node", "per-cluster")
PLACEMENTS = ("monitor", "near")
FLAT = "flat monitor"
VS_FLAT = {"per-node near": 0.8, "per-cluster near": 0.8}   # rate over flat's; every other shape 0.5


class Metered:
    """A case's pull, and the CPU this process spent in it (user and system, every thread)."""

    def __init__(self, fn):
        self.fn = fn
        self.cpu = 0.0
        self.calls = 0

    def __call__(self):
        started = time.process_time()
        self.fn()
        self.cpu += time.process_time() - started
        self.calls += 1

    @property
    def per_call(self) -> float:
        return self.cpu / max(self.calls, 1)


def views(pm: Pathmap) -> dict[str, tuple[str, float, int]]:
    """label -> (view text, target pulls/s, pulls per round) for the paper's four view sizes."""
    thread, node = pm.threads[0].name, pm.nodes[0].name
    return {
        "1 collector": ("collector:1", 4000, 400),
        f"thread {thread}": (f"thread:{thread}", 3000, 300),
        f"node {node}": (f"node:{node}", 1500, 100),
        "all": ("all", 500, 60),
    }


def reply(sock: zmq.Socket) -> bytes:
    """The next reply on a DEALER connected to a node server, skipping the empty frames (liveness
    probes) a serving node sends a peer it holds unacknowledged replies for, as every pastset client
    does (pastset/endpoint.py): read as a reply, one fails to decode ("incomplete input")."""
    frame = sock.recv()
    while not frame:
        frame = sock.recv()
    return frame


class Bare:
    """The floor: LATEST_RECORDS of the view's trace elements (the node's one vectorised read), one
    request per node, pipelined, with none of the scope's machinery."""

    def __init__(self, endpoints: dict[str, str], names_by_node: dict[str, list[str]]):
        ctx = zmq.Context.instance()
        self._requests = []
        for node, names in names_by_node.items():
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoints[node])
            self._requests.append((sock, p.pack([1, p.LATEST_RECORDS, names, 1])))
        self.sockets = [s for s, _ in self._requests]

    def pull(self) -> np.ndarray:
        for sock, frame in self._requests:
            sock.send(frame)
        parts = []
        for sock, _ in self._requests:
            answer = msgpack.unpackb(reply(sock), raw=False)
            if answer[1] != p.OK:
                raise RuntimeError(f"bare pull failed: {answer[2:]}")
            parts.append(answer[2])
        return np.frombuffer(b"".join(parts), dtype=trace.DTYPE)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close(linger=0)


class RoundTrip:
    """One pastset PING to one node and its reply over a plain pyzmq DEALER: the price of one hop
    there and back on this machine, which a tree with joins near the data pays once more than
    flat for each level it adds (its joins ask their children only once asked themselves)."""

    def __init__(self, endpoint: str):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self._frame = p.pack([1, p.PING])
        self.sock.send(self._frame)
        assert msgpack.unpackb(reply(self.sock))[1] == p.OK, f"{endpoint} did not answer a ping"

    def pull(self) -> None:
        self.sock.send(self._frame)
        reply(self.sock)

    def close(self) -> None:
        self.sock.close(linger=0)


def configurations(largest: bool) -> list[tuple[str, str, str]]:
    configs = [(tree, placement, "concurrent") for tree in TREES for placement in PLACEMENTS]
    if largest:
        configs += [(tree, placement, "sequential") for tree in TREES for placement in PLACEMENTS]
    return configs


def build(run, pm: Pathmap, quick: bool) -> tuple[dict, list, dict]:
    """(cases for `interleave`, [things to close], {view label: (target Hz, [scope figure names], bare name)})."""
    catalogue = Catalogue(pm)
    cases, closing, plan = {}, [], {}
    ping = RoundTrip(run.endpoints[pm.nodes[0].name])
    closing.append(ping)
    cases[f"one round trip (ping node {pm.nodes[0].name})"] = (Metered(ping.pull), 100 if quick else 400, None)
    for label, (text, target, calls) in views(pm).items():
        entries = View.parse(text).select(catalogue)
        calls = max(3, calls // 4) if quick else calls
        by_node: dict[str, list[str]] = {}
        for e in entries:
            by_node.setdefault(e.trace_node, []).append(e.trace)
        bare = Bare(run.endpoints, by_node)
        closing.append(bare)
        assert len(bare.pull()) == len(entries), f"{label}: the bare peer did not read every trace element"
        bare_name = f"{label} ({len(entries)}): bare pyzmq + numpy"
        cases[bare_name] = (Metered(bare.pull), calls, None)
        names = []
        for tree, placement, concurrency in configurations(label == "all"):
            scope = EventScope(run, text, mode="latest", tree=tree, placement=placement,
                               concurrency=concurrency, timeout=10.0)
            closing.append(scope)
            pulled = scope.pull()
            assert not pulled.missing and len(pulled.records) == len(entries), \
                f"{label} {tree} {placement}: {len(pulled.records)} records, missing {pulled.missing}"
            name = f"{label} ({len(entries)}): {tree} {placement}" + (" seq" if concurrency == "sequential" else "")
            cases[name] = (Metered(scope.pull), calls, bare_name)
            names.append(name)
        plan[label] = (target, names, bare_name)
    return cases, closing, plan


def best_rows(measured: dict[str, Figure], plan: dict) -> tuple[list[Figure], dict]:
    """Per view, the fastest scope configuration again, with the view's targets on it; for all
    elements, every configuration pulled concurrently again against flat in the monitor."""
    rows, targets = [], {}
    for label, (target, names, bare_name) in plan.items():
        if label == "all":
            flat = next(n for n in names if n.endswith(f": {FLAT}"))
            for name in names:
                config = name.split(": ", 1)[1]
                if name == flat or config.endswith(" seq"):
                    continue
                least = VS_FLAT.get(config, 0.5)
                row = Figure(f"VS FLAT {name}", measured[name].rounds, peer=flat)
                rows.append(row)
                # The ratio column is time over flat's: a rate of at least `least` times flat's.
                targets[row.name] = (f"rate ≥ {least}× flat (ratio ≤ {1 / least:.2f})",
                                     lambda f, ratio, least=least: ratio is not None and ratio <= 1 / least)
        best = min((measured[n] for n in names), key=lambda f: f.median)
        row = Figure(f"BEST {best.name}", best.rounds, peer=bare_name)
        rows.append(row)
        text = f"≥ {target} Hz"
        if label == "all":
            targets[row.name] = (f"{text}; ≤ 1.33× bare",
                                 lambda f, ratio, target=target: 1 / f.median >= target and ratio <= 1.34)
        else:
            targets[row.name] = (text, lambda f, ratio, target=target: 1 / f.median >= target)
    return rows, targets


def print_cpu(measured: dict[str, Figure], cpu: dict[str, float]) -> None:
    """Each configuration's rate beside the monitor's CPU per pull (what the monitor pays to observe)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="The monitor's own CPU per pull (user + system, this process)")
    for column in ("figure", "rate /s", "monitor CPU µs/pull", "monitor CPU share"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for name, figure in measured.items():
        table.add_row(name, f"{1 / figure.median:,.0f}", f"{cpu[name] * 1e6:,.0f}", f"{cpu[name] / figure.median:.0%}")
    Console(width=180).print(table)


def profile(run, pm: Pathmap, seconds: float) -> None:
    """Sample the monitor and node servers with py-spy while the all-elements view is pulled."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("--profile needs py-spy (pip install py-spy)")
        return
    import os

    nodes = [pm.nodes[0].name, pm.nodes[-1].name]
    for tree, placement in (("flat", "monitor"), ("per-node", "near")):
        with EventScope(run, "all", tree=tree, placement=placement, timeout=10.0) as scope, \
                tempfile.TemporaryDirectory() as tmp:
            targets = {"monitor": os.getpid(), **{f"node {n}": run.pids[n] for n in nodes}}
            spies = {who: subprocess.Popen([py_spy, "record", "-r", "250", "--gil", "--nonblocking", "-f", "raw", "-d", str(int(seconds)),
                                            "-o", f"{tmp}/{i}.txt", "--pid", str(pid)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for i, (who, pid) in enumerate(targets.items())}
            pulls, end = 0, time.monotonic() + seconds + 1
            time.sleep(0.5)  # let py-spy attach
            while time.monotonic() < end:
                scope.pull()
                pulls += 1
            for spy in spies.values():
                spy.wait(timeout=30)
            stats = scope.stats()
            print(f"\n== all elements, {tree} tree placed {placement}: {stats.observe_rate:.0f} pulls/s while sampled")
            for i, who in enumerate(targets):
                _print_profile(who, Path(f"{tmp}/{i}.txt"))


def _print_profile(who: str, path: Path, top: int = 12) -> None:
    from rich.console import Console
    from rich.table import Table

    if not path.exists():
        print(f"{who}: py-spy wrote nothing (no permission to attach?)")
        return
    own = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        total += int(count)
        own[_function(frames[-1])] += int(count)
    table = Table(title=f"{who}: self time by function ({total} samples holding the GIL)")
    table.add_column("share", justify="right")
    table.add_column("function (file)")
    for frame, count in own.most_common(top):
        table.add_row(f"{count / max(total, 1):.1%}", frame)
    Console(width=160).print(table)


def _function(frame: str) -> str:
    """`fn (path/file.py:123)` -> `fn (file.py)`."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(where.split('/')[-2:])})" if where else name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="fewer pulls and rounds")
    parser.add_argument("--pathmap", default=str(PAPER))
    parser.add_argument("--profile", action="store_true", help="also sample monitor and nodes with py-spy")
    args = parser.parse_args()
    rounds = 3 if args.quick else args.rounds
    pm = Pathmap.load(args.pathmap)
    size = len(pm.threads) + len(pm.threads) % 2
    with tempfile.TemporaryDirectory() as run_dir, launch(pm, run_dir=run_dir) as run:
        run.run("windtunnel", {"size": max(size, 4), "steps": 3}, timeout=600)  # every trace element holds records
        cases, closing, plan = build(run, pm, args.quick)
        try:
            measured = interleave(cases, rounds)
            best, targets = best_rows(measured, plan)
            cpu = {name: fn.per_call for name, (fn, _, _) in cases.items()}
            report(f"Event scope observe rate, latest mode, {pm.name} idle", [*measured.values(), *best], targets,
                   "scope_bench.json", unit="ms", rate=True,
                   extra={"settings": {"rounds": rounds, "pathmap": pm.name, "quick": args.quick},
                          "monitor_cpu_s_per_pull": cpu})
            print_cpu(measured, cpu)
            if args.profile:
                profile(run, pm, 3.0 if args.quick else 6.0)
        finally:
            for thing in closing:
                thing.close()


if __name__ == "__main__":
    main()
