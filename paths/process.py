"""Processes that may be gone: who wrote a file (pid, host, start time), and whether a node still listens."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class Owner:
    """The process that wrote a run file (the launcher) or a monitor entry: pid, host, and the
    process's start time (clock ticks since boot, from /proc; None elsewhere), which tells a
    reused pid apart."""

    pid: int
    host: str
    since: int | None = None

    @classmethod
    def here(cls) -> Owner:
        return cls(os.getpid(), socket.gethostname(), process_start(os.getpid()))

    def alive(self) -> bool | None:
        """True if the process still runs, False if it is gone, None if it runs on another host."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return False  # another user's process holds the pid now: run files are per user
        if not os.path.isdir("/proc"):
            return True
        since = process_start(self.pid)  # None: a zombie, gone but not yet reaped
        return since is not None and (self.since is None or since == self.since)

    def as_dict(self) -> dict:
        return {"pid": self.pid, "host": self.host, "since": self.since}

    @classmethod
    def from_dict(cls, data) -> Owner | None:
        if not isinstance(data, dict):
            return None
        since = data.get("since")
        return cls(int(data["pid"]), str(data["host"]), None if since is None else int(since))


def process_start(pid: int) -> int | None:
    """A live process's start time in clock ticks since boot; None for a zombie or without /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == b"Z" else int(fields[19])


def exited(endpoint: str, pid: int | None) -> bool:
    """Whether a node on this host (a loopback endpoint) has no process any more."""
    host = endpoint.partition("://")[2].rpartition(":")[0].strip("[]")
    if pid is None or not (host == "localhost" or host == "::1" or host.startswith("127.")):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # another user's process: the socket tells
    return False


def refused(endpoint: str, timeout: float) -> bool:
    """Whether nothing listens at a tcp:// or ipc:// endpoint: a stopped (paused) process still
    accepts connections (the kernel does), a process that exited refuses them."""
    scheme, _, address = endpoint.partition("://")
    try:
        if scheme == "tcp":
            host, _, port = address.rpartition(":")
            probe = socket.create_connection((host.strip("[]"), int(port)), timeout)
        elif scheme == "ipc":
            probe = socket.socket(socket.AF_UNIX)
            probe.settimeout(timeout)
            probe.connect(address)
        else:
            return False
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    except (OSError, ValueError):
        return False  # unreachable or slow: not known to be gone
    probe.close()
    return False
