"""The PastSet test harness: raw wire peers, calls run in the background, and patient waiting."""

from __future__ import annotations

import threading
import time

import msgpack
import zmq

TRACE = "=HHIIIIQQ"  # the 36-byte trace record


class RawPeer:
    """A bare DEALER socket: sends any frames and reads replies as [rid, status, ...] lists."""

    def __init__(self, ctx: zmq.Context, endpoint: str):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send(self, *frames: bytes) -> None:
        self.sock.send_multipart(list(frames))

    def request(self, *fields) -> None:
        self.send(msgpack.packb(list(fields), use_bin_type=True))

    def reply(self, timeout: float = 10.0) -> list:
        """The next reply, skipping empty frames (the server's liveness probes)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"the server sent no reply within {timeout}s"
            if self.sock.poll(max(1, int(left * 1000))):
                frame = self.sock.recv()
                if frame:
                    return msgpack.unpackb(frame, raw=False)

    def close(self) -> None:
        self.sock.close(linger=0)


class Background:
    """Runs one call in a daemon thread and keeps what it returned or raised."""

    def __init__(self, fn, *args, **kwargs):
        self.result = self.error = None
        self._thread = threading.Thread(target=self._run, args=(fn, args, kwargs), daemon=True)
        self._thread.start()

    def _run(self, fn, args, kwargs):
        try:
            self.result = fn(*args, **kwargs)
        except BaseException as exc:  # kept for the test to inspect
            self.error = exc

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def wait(self, timeout: float = 30.0):
        """What the call returned (re-raising what it raised); fails if it does not end in `timeout` s."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the call did not return within {timeout}s"
        if self.error is not None:
            raise self.error
        return self.result


def settle(seconds: float = 0.2) -> None:
    """Give a background call time to reach its blocking point (no result depends on it)."""
    time.sleep(seconds)


def eventually(predicate, timeout: float = 15.0) -> bool:
    """Poll `predicate` until it holds or `timeout` seconds pass; returns whether it held."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
