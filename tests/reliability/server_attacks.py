"""Shared by the attacks on a node server process: its memory, raw wire peers, and a bystander client
in a process of its own that times its moves while the attack runs; and by the attacks of a server
on its clients: a hostile server."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import threading
import time

import msgpack
import zmq

from pastset import protocol as p
from runs import REPO, memory_kb  # noqa: F401 - the attacks use it from here


def pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


class Peer:
    """A bare DEALER socket: pipelines any requests, and reads replies without decoding big ones."""

    def __init__(self, ctx: zmq.Context, endpoint: str, rcvhwm: int | None = None):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if rcvhwm is not None:     # a peer that does not read: its replies stay queued on the server
            self.sock.setsockopt(zmq.RCVHWM, rcvhwm)
            self.sock.setsockopt(zmq.RCVBUF, 4096)
        self.sock.connect(endpoint)

    def request(self, *fields) -> None:
        self.sock.send(pack(list(fields)))

    def reply(self, timeout: float = 60.0) -> tuple[list, int]:
        """(the reply's [rid, status, result or error name, message], its size in bytes); a result of
        over a megabyte is replaced by None, so that a gigabyte reply costs this process no more."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"the server sent no reply within {timeout}s"
            if not self.sock.poll(max(1, int(left * 1000))):
                continue
            frame = self.sock.recv(copy=False)
            size = len(frame)
            if not size:
                continue  # the server's liveness probe
            if size <= 1 << 20:
                return msgpack.unpackb(frame.bytes, raw=False), size
            head = msgpack.Unpacker(raw=False)
            head.feed(frame.buffer[:64])
            head.read_array_header()
            return [head.unpack(), head.unpack(), None], size

    def ask(self, *fields, timeout: float = 60.0) -> tuple[list, int, float]:
        """Send one request and wait for its reply: (reply, bytes, seconds)."""
        started = time.perf_counter()
        self.request(*fields)
        reply, size = self.reply(timeout)
        return reply, size, time.perf_counter() - started

    def close(self) -> None:
        self.sock.close(linger=0)


def fill(ctx: zmq.Context, endpoint: str, names: list[str]) -> None:
    """Small elements of these names, pipelined over connections of 5,000 each (one may create only
    its share, pastset.Limits().max_elements_per_client)."""
    for start in range(0, len(names), 5_000):
        peer = Peer(ctx, endpoint)
        mine = names[start:start + 5_000]
        for i, name in enumerate(mine):
            peer.request(i, p.ENTER, name, ["int"], None, None)
        for _ in mine:
            reply, _ = peer.reply()
            assert reply[1] == p.OK, reply
        peer.close()


class HostileServer:
    """A ZeroMQ ROUTER in a thread of this process that passes for a node server: it answers pings as
    one does ([name, max_frame]), and every other request with `answer(rid, op)`: the frame to send
    back, or None to send nothing (a server that answers only pings)."""

    def __init__(self, answer):
        self._answer = answer
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"tcp://127.0.0.1:{self._sock.bind_to_random_port('tcp://127.0.0.1')}"
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            if not self._sock.poll(50):
                continue
            peer, frame = self._sock.recv_multipart()[:2]
            try:
                rid, op = msgpack.unpackb(frame, raw=False)[:2]
            except Exception:  # noqa: BLE001 - not a request: nothing to answer
                continue
            reply = pack([rid, p.OK, ["hostile", 16 << 20]]) if op == p.PING else self._answer(rid, op)
            if reply is not None:
                self._sock.send_multipart([peer, reply], copy=False)

    def close(self) -> None:
        self._stop = True
        self._thread.join(10)
        self._ctx.destroy(linger=0)


# A well-behaved client: moves small tuples into its own element in a loop (one every millisecond),
# timing each, until its stdin closes; then prints what it saw as one JSON line.
BYSTANDER = """\
import json, sys, threading, time, uuid
import pastset
client = pastset.connect(sys.argv[1])
element = client.enter(f"bystander-{uuid.uuid4().hex}", ["int", "bytes"], keep=8)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
worst, moves, errors, slow = 0.0, 0, [], []
print("ready", flush=True)
while not stop.is_set():
    started = time.perf_counter()
    try:
        element.move((moves, b"x" * 36))
    except pastset.PastSetError as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
        client.close()
        client = pastset.connect(sys.argv[1], timeout=30)
        element = client.enter(element.name, ["int", "bytes"], keep=8)
    took = time.perf_counter() - started
    worst = max(worst, took)
    if took > 0.1:
        slow.append(took)
    moves += 1
    time.sleep(0.001)
print(json.dumps({"worst_s": worst, "moves": moves, "over_100ms": len(slow), "errors": errors[:5]}), flush=True)
client.close()
"""


class Bystander:
    """A bystander client process (see BYSTANDER); `finish()` stops it and returns what it saw:
    {"worst_s": its slowest move, "moves": how many, "over_100ms": how many took longer than 100 ms,
    "errors": the first few it got}."""

    def __init__(self, endpoint: str):
        self.proc = subprocess.Popen([sys.executable, "-c", BYSTANDER, endpoint], cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline().strip() if ready else ""
        if line != "ready":
            self.proc.kill()
            self.proc.wait(10)
            raise RuntimeError(f"the bystander client did not start (printed {line!r})")

    def finish(self) -> dict:
        try:
            out, _ = self.proc.communicate("", timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise AssertionError("the bystander client did not stop within 60 s") from None
        return json.loads(out.strip().splitlines()[-1])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
