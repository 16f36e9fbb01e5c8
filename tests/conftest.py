"""Shared fixtures: PastSet node servers, in this process and in real separate processes."""

from __future__ import annotations

import contextlib
import os
import re
import select
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import pastset
from eventspace.mpi.library import SHARED_MEMORY_FILES, mapped_shared_memory

REPO = Path(__file__).resolve().parents[1]

# A node server in its own process: prints its endpoint, serves until its stdin closes (so it
# also ends when the test run dies), then closes its endpoint. It hosts `parked`: how many requests
# wait on an element (what tests/pastset/harness.py's `blocked_on` asks before a test wakes them).
SERVER_SCRIPT = """\
import sys
import pastset
srv = pastset.TupleServer("test-node")
srv.host("parked", lambda name: srv.element(name).parked, inline=True)
print(srv.serve("tcp://127.0.0.1:0"), flush=True)
sys.stdin.read()
srv.close()
"""


class ServerProcess:
    """A node server running in a child process (`script`: one that serves as SERVER_SCRIPT does);
    `stop()` ends it and reaps it."""

    def __init__(self, start_timeout: float = 20.0, script: str = SERVER_SCRIPT):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script], cwd=REPO,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        ready, _, _ = select.select([self.proc.stdout], [], [], start_timeout)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.startswith("tcp://"):
            self.kill()
            raise RuntimeError(f"node server process did not start (printed {line!r})")
        self.endpoint = line

    def kill(self) -> None:
        """End the process at once (SIGKILL), as a crashed node would."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._close_pipes()

    def stop(self) -> None:
        """Ask the process to stop (close its stdin); kill it if it does not within 5 s."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (subprocess.TimeoutExpired, OSError):
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


@pytest.fixture(scope="session", autouse=True)
def session_run_dir(tmp_path_factory):
    """Run files of this test session go to a directory of its own ($EVENTSPACE_RUN_DIR, inherited
    by every process a test starts), never to the user's, and never to another session's."""
    directory = tmp_path_factory.mktemp("runs")
    before = os.environ.get("EVENTSPACE_RUN_DIR")
    os.environ["EVENTSPACE_RUN_DIR"] = str(directory)
    yield directory
    if before is None:
        del os.environ["EVENTSPACE_RUN_DIR"]
    else:
        os.environ["EVENTSPACE_RUN_DIR"] = before


SHARED_MEMORY = Path("/dev/shm")


def _mpi_shared_memory() -> set[str]:
    try:
        return {p.name for p in SHARED_MEMORY.iterdir() if p.name.startswith(SHARED_MEMORY_FILES)}
    except OSError:
        return set()


def _mapped_shared_memory() -> set[str]:
    """The names of the MPI library's /dev/shm files some process maps now."""
    mapped = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            mapped.update(path.rsplit("/", 1)[1] for path in mapped_shared_memory(maps.read_text()))
    return mapped


@pytest.fixture(scope="session", autouse=True)
def no_mpi_shared_memory_left():
    """The MPI libraries' shared-memory files that this session's jobs leave in /dev/shm, removed at its
    end: a rank killed outright (SIGKILL, as some tests do to their jobs) cannot remove its own, and they
    added up to gigabytes of memory on a machine that runs the tests often. Only files no process maps
    any more and that are some seconds old: a job just starting maps its files as it makes them."""
    before = _mpi_shared_memory()
    yield
    left = _mpi_shared_memory() - before
    if not left:
        return
    mapped = _mapped_shared_memory()
    for name in left - mapped:
        path = SHARED_MEMORY / name
        with contextlib.suppress(OSError):
            status = path.stat()
            if max(status.st_mtime, status.st_ctime) < time.time() - 5:
                path.unlink()


@pytest.fixture(scope="session")
def server_process():
    """One node server process shared by the whole session (tests use unique element names)."""
    server = ServerProcess()
    yield server
    server.stop()
    assert server.proc.returncode == 0, "the node server process did not stop cleanly"


@pytest.fixture
def endpoint(server_process) -> str:
    return server_process.endpoint


@pytest.fixture
def spawn_server():
    """Start extra node server processes (e.g. to kill them; `script`: one that serves as
    SERVER_SCRIPT does); all are reaped at teardown."""
    started: list[ServerProcess] = []

    def spawn(script: str = SERVER_SCRIPT) -> ServerProcess:
        server = ServerProcess(script=script)
        started.append(server)
        return server

    yield spawn
    for server in started:
        server.stop()


@pytest.fixture
def closing():
    """`closing(thing)` -> thing, whose close() is called at teardown (the last made first)."""
    with contextlib.ExitStack() as stack:
        yield lambda thing: stack.enter_context(contextlib.closing(thing))


@pytest.fixture
def client(endpoint):
    """A client of the session's node server process."""
    c = pastset.connect(endpoint)
    yield c
    c.close()


@pytest.fixture(params=["local", "remote"])
def space(request):
    """The same PastSet API in-process (a TupleServer) and remote (a client of another process)."""
    if request.param == "local":
        yield pastset.TupleServer("local")
    else:
        yield request.getfixturevalue("client")


@pytest.fixture
def served():
    """(server, client): a TupleServer in this process, also served to a client over ZeroMQ."""
    server = pastset.TupleServer("served")
    c = pastset.connect(server.serve("tcp://127.0.0.1:0"))
    yield server, c
    c.close()
    server.close()


@pytest.fixture
def names(request):
    """Unique element names for this test: `names("x")` -> "<test>-<random>/x"."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:60] + "-" + uuid.uuid4().hex[:8]

    def name(suffix: str = "e") -> str:
        return f"{stem}/{suffix}"

    return name
