"""The PastSet test harness: raw wire peers, calls run in the background, and how many calls wait
on an element (what a test awaits with `polling.until` before it wakes them)."""

from __future__ import annotations

import threading
import time

import msgpack
import zmq

import pastset

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


def blocked_on(space, name: str) -> int:
    """How many calls wait on element `name` of `space`: threads blocked in it and requests its node
    server parked, for an in-process TupleServer; requests parked, for a client of a node server that
    hosts `parked` (tests/conftest.py's SERVER_SCRIPT does). 0 while there is no element `name`."""
    try:
        if isinstance(space, pastset.TupleServer):
            element = space.element(name)
            return element._sleepers + element.parked   # the one place a test counts the threads blocked
        return space.call("parked", name)
    except pastset.UnknownElement:
        return 0
