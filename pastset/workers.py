"""The worker threads that run a server's hosted calls: daemon threads, so that no call holds its process up."""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable


class Workers:
    """Up to `most` daemon threads, named `NAME-1`, `NAME-2`, ..., started as calls need them, that
    run the callables given to `submit` in order.

    Daemon threads, unlike a ThreadPoolExecutor's (which the interpreter joins at exit): a hosted
    call that waits forever (an observe without a timeout) must not keep its process alive once the
    server has been told to stop. Such a call is abandoned when the process ends. `close()` drops
    the calls not yet started and lets the idle threads end.
    """

    def __init__(self, most: int, name: str):
        self._most = most
        self._name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        # The mutex must be held whenever the thread counts change.
        self._mutex = threading.Lock()
        self._threads = 0
        self._idle = 0

    def submit(self, job: Callable[[], None]) -> None:
        """Run `job()` on a worker thread: an idle one, a new one, or the first that is free."""
        with self._mutex:
            if self._idle:
                self._idle -= 1
            elif self._threads < self._most:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True).start()
        self._jobs.put(job)

    def close(self) -> None:
        """Drop the calls not started yet; each thread ends once it has finished the call it runs."""
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        with self._mutex:
            threads = self._threads
        for _ in range(threads):
            self._jobs.put(None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except BaseException:  # a job's own failure: the thread goes on serving the others
                traceback.print_exc()
            with self._mutex:
                self._idle += 1
