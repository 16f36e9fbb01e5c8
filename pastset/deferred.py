"""Deferred answers: a hosted call that waits on other servers without holding up the loop it runs on."""

from __future__ import annotations


class Deferred:
    """The answer of a hosted call that is still on its way, because it waits on replies from
    other servers (a fan-out's `Exchange`).

    An inline hosted callable (`TupleServer.host(..., inline=True)`) may return one instead of
    a value: the endpoint's loop then goes on answering other requests, polls the deferred's
    `sockets()` beside its own, calls `readable(sock)` when one has input and `tick()` by
    `wake_at()` (a `time.monotonic()` time), and sends the reply once it is `done`: `result()`.
    No thread is handed the call, and no loop waits on another: two servers whose calls ask each
    other both keep answering. Called in-process (`TupleServer.call`), it is waited for (`wait`).

    `then(fn)` adds a step the result goes through (in order, once, on the first `result()`).
    """

    def __init__(self):
        self.done = False
        self._value = None
        self._steps: list = []
        self._error: BaseException | None = None
        self._finished = False

    def then(self, fn) -> Deferred:
        self._steps.append(fn)
        return self

    def result(self):
        """The value (through the `then` steps), or the exception a step raised; only once done."""
        if not self.done:
            raise RuntimeError("a deferred answer was read before it was done")
        if not self._finished:
            self._finished = True
            try:
                for step in self._steps:
                    self._value = step(self._value)
            except BaseException as exc:
                self._error = exc
        if self._error is not None:
            raise self._error
        return self._value

    def _settle(self, value) -> None:
        self._value = value
        self.done = True

    def fail(self, exc: BaseException) -> None:
        """End it with `exc` (what `result()` then raises): the loop carrying it calls this when
        stepping it raised, so that a bug answers one request with an error, not stops the loop."""
        self._error, self._finished, self.done = exc, True, True

    # What the loop that carries it calls (see the class):

    def sockets(self) -> list:
        raise NotImplementedError

    def wake_at(self) -> float:
        raise NotImplementedError

    def readable(self, sock) -> None:
        raise NotImplementedError

    def tick(self) -> None:
        raise NotImplementedError

    def wait(self):
        """Carry it here, blocking, until done; the result."""
        raise NotImplementedError


def waited(value):
    """`value`, or if it is a Deferred its result, waited for here: what a caller that is not a
    loop carrying it (a worker thread, an in-process call) does with a hosted callable's answer."""
    return value.wait() if isinstance(value, Deferred) else value
