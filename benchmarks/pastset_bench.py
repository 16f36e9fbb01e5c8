"""PastSet speed against its peers: local ops vs a bare lock+pack, remote ops vs a raw pyzmq echo and Redis Streams.

Run: `python benchmarks/pastset_bench.py [--rounds 7] [--quick]`. Every case runs once per
round, interleaved with its peer, so that the ratios hold on a noisy machine. Redis Streams
figures appear when `redis-server` is on PATH and redis-py is installed (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import interleave, report  # noqa: E402

import zmq  # noqa: E402

from pastset import TupleServer, connect  # noqa: E402

TRACE = "=HHIIIIQQ"  # the 36-byte trace record
RECORD = (1, 0, 7, 3, 42, 64, 1_000_000, 1_000_500)
VIEW_SIZES = (1, 14, 266, 1948)


def echo_server() -> None:
    """A raw pyzmq ROUTER that echoes every message: the transport's floor."""
    sock = zmq.Context().socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    print(port, flush=True)
    while True:
        sock.send_multipart(sock.recv_multipart())


def start(cmd: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().split()[-1]


def local_cases(calls: int) -> dict:
    server = TupleServer("bench")
    binary = server.enter("binary", TRACE, keep=200)
    typed = server.enter("typed", ["int", "bytes"])
    st = struct.Struct(TRACE)
    ring = bytearray(200 * st.size)
    lock = threading.Lock()
    pack_into = st.pack_into

    class Floor:
        """What any thread-safe ring append must do at least: take a lock and pack a record."""

        def move(self, values):
            with lock:
                pack_into(ring, 0, *values)

    floor = Floor().move
    payload = (1, b"x" * 36)

    def typed_pair():
        typed.move(payload)
        typed.observe()

    return {
        "bare lock + pack_into": (lambda: floor(RECORD), calls, None),
        "local binary move": (lambda: binary.move(RECORD), calls, "bare lock + pack_into"),
        "local typed move + observe": (typed_pair, calls // 2, "bare lock + pack_into"),
        "local latest (binary)": (lambda: binary.latest(1), calls, "bare lock + pack_into"),
    }


def remote_cases(endpoint: str, echo_port: str, calls: int) -> tuple[dict, object]:
    client = connect(endpoint)
    binary = client.enter("binary", TRACE, keep=200)
    history = client.enter("history", TRACE, keep=200)  # nobody moves here while we read
    for _ in range(200):
        binary.move(RECORD)
        history.move(RECORD)
    views = {}
    for n in VIEW_SIZES:
        handles = [client.enter(f"view{n}/{i}", TRACE, keep=200) for i in range(n)]
        for h in handles:
            h.move(RECORD)
        views[n] = handles
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.connect(f"tcp://127.0.0.1:{echo_port}")
    request = b"\x00" * 50  # about the size of a move request for one trace record

    def echo():
        sock.send(request)
        sock.recv()

    cases = {
        "raw pyzmq echo": (echo, calls, None),
        "remote ping": (client.ping, calls, "raw pyzmq echo"),
        "remote binary move": (lambda: binary.move(RECORD), calls, "raw pyzmq echo"),
        "remote observe(index)": (lambda: history.observe(150), calls, "raw pyzmq echo"),
        "remote latest": (lambda: binary.latest(1), calls, "raw pyzmq echo"),
    }
    for n, handles in views.items():
        cases[f"remote latest_many {n}"] = (
            lambda handles=handles: client.latest_many(handles), max(10, calls // (1 + n // 50)),
            f"redis pipelined latest-of-{n}")
    return cases, client


def redis_cases(calls: int) -> tuple[dict, subprocess.Popen | None]:
    try:
        import redis
    except ImportError:
        return {}, None
    if not shutil.which("redis-server"):
        return {}, None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    for _ in range(50):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.1)
    record = struct.pack(TRACE, *RECORD)
    for _ in range(200):
        r.xadd("binary", {"r": record}, maxlen=200, approximate=False)
    cases = {
        "redis XADD": (lambda: r.xadd("binary", {"r": record}, maxlen=200, approximate=False),
                       calls, "remote binary move"),
        "redis XREVRANGE count=1": (lambda: r.xrevrange("binary", count=1), calls, "remote latest"),
    }
    for n in VIEW_SIZES:
        for i in range(n):
            r.xadd(f"view{n}/{i}", {"r": record})

        def pipelined(n=n):
            pipe = r.pipeline(transaction=False)
            for i in range(n):
                pipe.xrevrange(f"view{n}/{i}", count=1)
            pipe.execute()

        cases[f"redis pipelined latest-of-{n}"] = (pipelined, max(10, calls // (1 + n // 50)), None)
    return cases, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="fewer calls per round")
    parser.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo:
        echo_server()
        return
    local_calls, remote_calls = (20_000, 100) if args.quick else (200_000, 400)
    node, endpoint = start([sys.executable, "-m", "eventspace.cli", "serve", "--bind", "tcp://127.0.0.1:0"])
    echo, echo_port = start([sys.executable, __file__, "--echo"])
    redis_proc = None
    try:
        local = interleave(local_cases(local_calls), args.rounds)
        remote, client = remote_cases(endpoint, echo_port, remote_calls)
        redis, redis_proc = redis_cases(remote_calls)
        measured = interleave({**remote, **redis}, args.rounds)
        client.close()
        if not redis:
            for name in list(measured):
                measured[name].peer = None if "redis" in (measured[name].peer or "") else measured[name].peer
        targets = {
            "local binary move": "≤ 1 µs",
            "remote binary move": "≤ 1.3× echo; ≤ redis XADD",
            "remote ping": "≤ 1.3× echo",
            "remote observe(index)": "≤ 1.2× echo (server in its own process)",
            "remote latest": "≤ 1.3× echo",
            "redis XADD": "≥ 1 (PastSet faster)",
            "redis XREVRANGE count=1": "≥ 1 (PastSet faster)",
        }
        targets.update({f"remote latest_many {n}": "≤ 1 × redis pipelined" for n in VIEW_SIZES})
        report("PastSet node server", [*local.values(), *measured.values()], targets, "pastset_bench.json")
        if not redis:
            print("Redis Streams peer skipped: needs redis-server on PATH and redis-py")
    finally:
        for proc in (node, echo, redis_proc):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=5)


if __name__ == "__main__":
    main()
