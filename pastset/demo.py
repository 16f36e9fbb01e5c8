"""The PastSet demo: a node server process, two producer processes and one consumer over the wire."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from .transport import connect

STREAM = "demo/stream"
DELTA = 1_000  # producers block when the consumer falls this far behind (flow control)


def produce(endpoint: str, producer: str, count: int, payload: int) -> dict:
    """Move `count` tuples (sequence, producer, payload) into the demo stream."""
    with connect(endpoint) as client:
        stream = client.enter(STREAM, ["int", "str", "bytes"], delta=DELTA)
        body = bytes(payload)
        start = time.perf_counter()
        for seq in range(count):
            stream.move((seq, producer, body))
        seconds = time.perf_counter() - start
    return {"role": f"producer {producer}", "tuples": count, "bytes": count * payload, "seconds": seconds}


def consume(endpoint: str, count: int) -> dict:
    """Observe `count` tuples from the demo stream, checking each producer's order is kept."""
    with connect(endpoint) as client:
        stream = client.enter(STREAM, ["int", "str", "bytes"], delta=DELTA)
        next_seq: dict[str, int] = {}
        nbytes = 0
        start = time.perf_counter()
        for _ in range(count):
            seq, producer, body = stream.observe(timeout=30)
            if seq != next_seq.get(producer, 0):
                raise RuntimeError(f"out of order: {producer} sent {seq}, expected {next_seq.get(producer, 0)}")
            next_seq[producer] = seq + 1
            nbytes += len(body)
        seconds = time.perf_counter() - start
    return {"role": "consumer", "tuples": count, "bytes": nbytes, "seconds": seconds,
            "in_order": True}


def run_demo(tuples: int, payload: int) -> int:
    """Start the processes, wait for them, print a rich table of what moved and how fast."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    server = subprocess.Popen(
        [sys.executable, "-m", "eventspace.cli", "serve", "--bind", "tcp://127.0.0.1:0", "--name", "demo"],
        stdout=subprocess.PIPE, text=True,
    )
    workers: list[subprocess.Popen] = []
    try:
        line = server.stdout.readline()
        if not line.startswith("serving on "):
            raise RuntimeError(f"the node server did not start (exit code {server.wait(5)})")
        endpoint = line.split()[-1]
        console.print(f"node server [bold]demo[/] (pid {server.pid}) serving on {endpoint}")
        me = [sys.executable, "-m", "pastset.demo"]
        workers = [
            subprocess.Popen(me + ["consume", endpoint, str(2 * tuples)], stdout=subprocess.PIPE, text=True),
            *(subprocess.Popen(me + ["produce", endpoint, name, str(tuples), str(payload)],
                               stdout=subprocess.PIPE, text=True) for name in ("A", "B")),
        ]
        with console.status(f"moving {2 * tuples:,} tuples of {payload} bytes through {endpoint} ..."):
            outputs = [w.communicate(timeout=300)[0] for w in workers]
        failed = [w for w in workers if w.returncode != 0]
        if failed:
            raise RuntimeError(f"{len(failed)} demo process(es) failed; see the messages above")
        results = [json.loads(out.strip().splitlines()[-1]) for out in outputs]

        table = Table(title="PastSet demo: what moved, and how fast")
        for column in ("process", "tuples", "bytes", "seconds", "tuples/s", "µs/tuple"):
            table.add_column(column, justify="left" if column == "process" else "right")
        for r, w in zip(results, workers):
            table.add_row(f"{r['role']} (pid {w.pid})", f"{r['tuples']:,}", f"{r['bytes']:,}",
                          f"{r['seconds']:.2f}", f"{r['tuples'] / r['seconds']:,.0f}",
                          f"{r['seconds'] / r['tuples'] * 1e6:.1f}")
        console.print(table)
        with connect(endpoint) as client:
            info = client.element(STREAM).info()
        console.print(f"element {info.name}: {info.last:,} tuples moved, {info.held} held "
                      f"(delta {info.delta}); every producer's order kept at the consumer")
        return 0
    finally:
        for proc in (*workers, server):
            if proc.poll() is None:
                proc.terminate()
        for proc in (*workers, server):
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _main(argv: list[str]) -> None:
    role, endpoint, *rest = argv
    if role == "produce":
        result = produce(endpoint, rest[0], int(rest[1]), int(rest[2]))
    elif role == "consume":
        result = consume(endpoint, int(rest[0]))
    else:
        raise SystemExit(f"unknown demo role {role!r}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
