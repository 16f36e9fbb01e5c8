"""Load on one node server: many concurrent clients of mixed operations, then a count check.

Run: `python benchmarks/load_bench.py [--clients 32] [--ops 5000] [--workers threads|processes|both]`.

Each client has its own `pastset.connect` client and runs `ops` operations in a fixed mix: half
are moves of (client, seq, payload) into eight shared elements (in turn, so that every element
has many producers), a quarter observe by index the tuple the client moved last (its value is
checked), and a quarter are one batch `latest_many` over the eight elements (indices must never
go back). All clients start together. Afterwards every element is read back: each tuple a client
moved is there exactly once, at the index its move returned, no tuple is there that nobody moved,
and each client's tuples are in the order it moved them (nothing lost, nothing duplicated,
per-element order kept). Reported: throughput (operations per second over the wall time of the
load) and latency percentiles per operation, beside one client alone on the same server (the peer).

Why threads by default: the node server answers every request on one loop thread, and this
machine has two cores; one client process with 32 threads (each with its own sockets) already
keeps the core the server does not use busy, while 32 client processes would mostly cost their
start-up (an interpreter and imports each) and context switches on the same two cores.
`--workers processes` (or `both`) measures that alternative.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import RESULTS, load, machine

from pastset import PastSetError, connect

SHARED = 8                       # elements every client moves into, in turn
TEMPLATE = ["int", "int", "bytes"]
PAYLOAD = bytes(range(32))


@dataclass
class ClientResult:
    """What one client did: per shared element, (seq, index) of each of its moves in move order;
    seconds per operation; and the first thing that went wrong, if anything did."""

    client: int
    moved: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    error: str | None = None


@dataclass
class LoadResult:
    """One load: clients x ops, wall seconds, throughput, latency percentiles (µs), and the check."""

    workers: str
    clients: int
    ops_per_client: int
    ops: int
    wall_s: float
    ops_per_s: float
    p50_us: float
    p99_us: float
    max_us: float
    tuples: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def elements_of(stem: str) -> list[str]:
    return [f"{stem}/shared{k}" for k in range(SHARED)]


def client_run(endpoint: str, stem: str, client: int, ops: int, start=None) -> ClientResult:
    """One client's operations; `start()` is awaited after connecting, so that all clients begin together."""
    result = ClientResult(client, {k: [] for k in range(SHARED)})
    c = connect(endpoint, timeout=30)
    try:
        elements = [c.enter(name, TEMPLATE) for name in elements_of(stem)]
        if start is not None:
            start()
        seen = [0] * SHARED          # the newest index latest_many reported, per element
        seq = 0
        last = None                  # (element, seq, index) of this client's newest move
        perf = time.perf_counter
        latencies = result.latencies
        for j in range(ops):
            kind = j % 4
            t0 = perf()
            if kind < 2:
                k = (client + seq) % SHARED
                index = elements[k].move((client, seq, PAYLOAD))
                latencies.append(perf() - t0)
                result.moved[k].append((seq, index))
                last = (k, seq, index)
                seq += 1
            elif kind == 2:
                k, s, index = last
                got = elements[k].observe(index)
                latencies.append(perf() - t0)
                if got != (client, s, PAYLOAD):
                    raise AssertionError(f"observe({index}) of shared{k} gave {got!r:.60}, not ({client}, {s}, ...)")
            else:
                batch = c.latest_many(elements)
                latencies.append(perf() - t0)
                for k, (at, items) in enumerate(batch):
                    if at < seen[k] or len(items) > 1 or (items and len(items[0]) != 3):
                        raise AssertionError(f"latest_many: shared{k} gave index {at} ({items!r:.60}) "
                                             f"after index {seen[k]}")
                    seen[k] = at
    except (PastSetError, AssertionError) as exc:
        result.error = f"client {client}: {type(exc).__name__}: {exc}"
    finally:
        c.close()
    return result


def check(endpoint: str, stem: str, results: list[ClientResult]) -> tuple[int, list[str]]:
    """(tuples read back, problems): every move is there exactly once, at its index, in its client's order."""
    problems = [r.error for r in results if r.error]
    total = 0
    with connect(endpoint, timeout=30) as c:
        for k, name in enumerate(elements_of(stem)):
            element = c.element(name)
            start, items = element.read_range(0, element.last())
            total += len(items)
            expected = sum(len(r.moved[k]) for r in results)
            if start != 0 or len(items) != expected:
                problems.append(f"{name}: {len(items)} tuples from index {start}, {expected} were moved")
            for r in results:
                for seq, index in r.moved[k]:
                    if index >= len(items) or tuple(items[index][:2]) != (r.client, seq):
                        problems.append(f"{name}[{index}] is not client {r.client}'s tuple {seq}")
                        break
            order: dict[int, int] = {}
            for client, seq, _ in items:
                if seq <= order.get(client, -1):
                    problems.append(f"{name}: client {client}'s tuple {seq} comes after its tuple {order[client]}")
                    break
                order[client] = seq
    return total, problems


def _thread_clients(endpoint: str, stem: str, clients: int, ops: int) -> tuple[list[ClientResult], float]:
    barrier = threading.Barrier(clients + 1)
    results: list[ClientResult | None] = [None] * clients

    def work(i):
        results[i] = client_run(endpoint, stem, i, ops, start=lambda: barrier.wait(60))

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait(60)
    started = time.perf_counter()
    for t in threads:
        t.join()
    return [r for r in results if r is not None], time.perf_counter() - started


def _process_client(endpoint, stem, i, ops, barrier, out):
    out.put(asdict(client_run(endpoint, stem, i, ops, start=lambda: barrier.wait(120))))


def _process_clients(endpoint: str, stem: str, clients: int, ops: int) -> tuple[list[ClientResult], float]:
    ctx = multiprocessing.get_context("spawn")   # no inherited zmq state
    barrier = ctx.Barrier(clients + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=_process_client, args=(endpoint, stem, i, ops, barrier, out), daemon=True)
             for i in range(clients)]
    for proc in procs:
        proc.start()
    barrier.wait(120)
    started = time.perf_counter()
    raw = [out.get(timeout=600) for _ in procs]
    wall = time.perf_counter() - started
    for proc in procs:
        proc.join(10)
    results = []
    for r in raw:
        r["moved"] = {int(k): [tuple(m) for m in v] for k, v in r["moved"].items()}
        results.append(ClientResult(**r))
    return sorted(results, key=lambda r: r.client), wall


def run_load(endpoint: str, clients: int, ops: int, workers: str = "threads") -> LoadResult:
    """`clients` concurrent clients of `ops` operations each on the node server at `endpoint`, checked."""
    stem = f"load-{uuid.uuid4().hex[:8]}"
    runner = _thread_clients if workers == "threads" else _process_clients
    results, wall = runner(endpoint, stem, clients, ops)
    if len(results) != clients:
        raise RuntimeError(f"only {len(results)} of {clients} clients reported")
    tuples, problems = check(endpoint, stem, results)
    latencies = sorted(t for r in results for t in r.latencies)
    done = len(latencies)
    pct = statistics.quantiles(latencies, n=100) if done > 1 else [0.0] * 99
    return LoadResult(workers, clients, ops, done, wall, done / wall if wall else 0.0,
                      pct[49] * 1e6, pct[98] * 1e6, (latencies[-1] if latencies else 0.0) * 1e6,
                      tuples, problems)


def report(results: list[LoadResult], out: str = "load_bench.json") -> None:
    from rich.console import Console
    from rich.table import Table

    peer = next((r for r in results if r.clients == 1), None)
    table = Table(title=f"one node server under load ({machine()['cores']} cores, load {load()[0]:.2f})")
    for column in ("workers", "clients × ops", "ops/s", "vs 1 client", "p50 µs", "p99 µs", "max ms",
                   "tuples", "count check"):
        table.add_column(column, justify="left" if column in ("workers", "count check") else "right")
    for r in results:
        ratio = f"{r.ops_per_s / peer.ops_per_s:.2f}" if peer and peer is not r and peer.ops_per_s else ""
        table.add_row(r.workers, f"{r.clients} × {r.ops_per_client:,}", f"{r.ops_per_s:,.0f}", ratio,
                      f"{r.p50_us:,.0f}", f"{r.p99_us:,.0f}", f"{r.max_us / 1000:,.1f}", f"{r.tuples:,}",
                      "ok" if r.ok else f"NO: {r.problems[0]}")
    Console(width=160).print(table)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / out
    path.write_text(json.dumps({"title": "load_bench", "machine": machine(),
                                "results": [{**asdict(r), "problems": r.problems[:20]} for r in results]},
                               indent=2))
    print(f"results written to {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--ops", type=int, default=5_000, help="operations per client (default %(default)s)")
    parser.add_argument("--workers", choices=("threads", "processes", "both"), default="threads")
    args = parser.parse_args()
    node = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "serve", "--bind", "tcp://127.0.0.1:0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    try:
        endpoint = node.stdout.readline().split()[-1]
        results = [run_load(endpoint, 1, args.ops, "threads")]       # the peer: one client alone
        for workers in (("threads", "processes") if args.workers == "both" else (args.workers,)):
            results.append(run_load(endpoint, args.clients, args.ops, workers))
        report(results)
        return 0 if all(r.ok for r in results) else 1
    finally:
        node.terminate()
        node.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
