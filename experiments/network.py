"""Two emulated clusters on this machine: network namespaces as hosts, one bridge per cluster, and
a slow link between the clusters (`experiment clusters`).

Layout (cluster c = 1, 2; host i = 1..n):

    namespace evs-cChI   address 10.77.c.i on bridge evs-brC (veth evs-cChI <-> eth0 inside)
    namespace evs-gw1    10.77.1.253 on bridge evs-br1; cluster 2's host addresses on its lo
    namespace evs-gw2    10.77.2.253 on bridge evs-br2; cluster 1's host addresses on its lo
    this namespace       10.77.1.254 on evs-br1 (the monitor sits in cluster 1, like a front end)

Every route from one cluster to the other leads to that cluster's gateway namespace, where the
other cluster's addresses are local: the delay relay (`experiments.relay`) accepts the connection
there and opens it onward from the other gateway after the link's delay. The kernel here has no
`netem`, so the delay is the relay's; links inside a cluster are plain veths and a bridge (tens of
microseconds; where `tc netem` exists, `Clusters(inner_delay_ms=...)` adds it). A rate limit is a
`tbf` qdisc on both gateways' legs, so it holds in both directions.

Everything is named `evs-*`: `cleanup()` removes what a crashed run left (processes in the
namespaces, the relay, namespaces, bridges).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "evs-"
SUBNET = "10.77"
GATEWAY, MONITOR = 253, 254
RELAY_PID = Path("/run") / f"{PREFIX}relay.pid"


class NetworkError(RuntimeError):
    """The emulated clusters cannot be built here (not root, no `ip`, a command failed)."""


def unavailable() -> str | None:
    """Why the emulated clusters cannot be built on this machine, or None if they can."""
    if os.geteuid() != 0:
        return "building network namespaces needs root (run as root, or skip the clusters experiment)"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "the `ip` and `tc` commands (iproute2) are not installed"
    try:
        _ip("netns", "add", f"{PREFIX}probe")
        _ip("netns", "del", f"{PREFIX}probe")
    except NetworkError as exc:
        return f"cannot make a network namespace: {exc}"
    return None


def _run(*command: str, check: bool = True) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if check and done.returncode:
        raise NetworkError(f"`{' '.join(command)}` failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _ip(*args: str, ns: str | None = None, check: bool = True) -> str:
    return _run(*(("ip", "netns", "exec", ns) if ns else ()), "ip", *args, check=check)


def host_name(cluster: int, host: int) -> str:
    return f"{PREFIX}c{cluster}h{host}"


def address(cluster: int, host: int) -> str:
    return f"{SUBNET}.{cluster}.{host}"


@dataclass
class Clusters:
    """Two clusters of `hosts` namespaces each, joined by a link of `delay_ms` one way (`back_ms`
    the other way, default the same) through the relay; `rate` (e.g. "20mbit") caps the link with
    tbf. A context manager: built on entry, removed on exit."""

    hosts: int = 4
    delay_ms: float = 5.0
    back_ms: float | None = None
    rate: str | None = None
    ports: tuple[int, ...] = (7000,)
    inner_delay_ms: float = 0.0
    _relay: subprocess.Popen | None = field(default=None, repr=False)

    def __enter__(self) -> Clusters:
        problem = unavailable()
        if problem:
            raise NetworkError(problem)
        cleanup()
        try:
            self._build()
        except BaseException:
            cleanup()
            raise
        return self

    def __exit__(self, *exc) -> None:
        cleanup()
        self._relay = None

    def namespaces(self) -> dict[str, str]:
        """Host namespace -> its address, cluster 1's hosts first."""
        return {host_name(c, h): address(c, h) for c in (1, 2) for h in range(1, self.hosts + 1)}

    def command(self, namespace: str) -> list[str]:
        """The prefix that runs a command on host `namespace`."""
        return ["ip", "netns", "exec", namespace]

    def _build(self) -> None:
        for c in (1, 2):
            bridge = f"{PREFIX}br{c}"
            _ip("link", "add", bridge, "type", "bridge")
            _ip("link", "set", bridge, "up")
            other = 3 - c
            for h in range(1, self.hosts + 1):
                self._plug(host_name(c, h), bridge, f"{address(c, h)}/24",
                           via=f"{SUBNET}.{c}.{GATEWAY}", to=f"{SUBNET}.{other}.0/24")
            gateway = f"{PREFIX}gw{c}"
            self._plug(gateway, bridge, f"{SUBNET}.{c}.{GATEWAY}/24")
            for h in [*range(1, self.hosts + 1), MONITOR]:
                _ip("addr", "add", f"{address(other, h)}/32", "dev", "lo", ns=gateway)
        # This namespace is cluster 1's front end: on its bridge, the other cluster through the gateway.
        _ip("addr", "add", f"{SUBNET}.1.{MONITOR}/24", "dev", f"{PREFIX}br1")
        _ip("route", "add", f"{SUBNET}.2.0/24", "via", f"{SUBNET}.1.{GATEWAY}")
        if self.inner_delay_ms:
            for namespace in self.namespaces():
                _run("ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", "eth0", "root", "netem",
                     "delay", f"{self.inner_delay_ms}ms")
        self.set_rate(self.rate)
        self._start_relay()

    def _plug(self, namespace: str, bridge: str, cidr: str, via: str | None = None, to: str | None = None) -> None:
        outside = namespace if len(namespace) <= 15 else namespace[:15]
        _ip("netns", "add", namespace)
        _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("link", "set", outside, "master", bridge, "up")
        _ip("link", "set", "lo", "up", ns=namespace)
        _ip("addr", "add", cidr, "dev", "eth0", ns=namespace)
        _ip("link", "set", "eth0", "up", ns=namespace)
        if via:
            _ip("route", "add", to, "via", via, ns=namespace)

    def set_rate(self, rate: str | None) -> None:
        """Cap the link between the clusters at `rate` (tc syntax, e.g. "20mbit") both ways, or lift the cap."""
        for c in (1, 2):
            gateway = f"{PREFIX}gw{c}"
            _run("ip", "netns", "exec", gateway, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
            if rate:
                _run("ip", "netns", "exec", gateway, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
                     "rate", rate, "burst", "32kbit", "latency", "100ms")
        self.rate = rate

    def _start_relay(self) -> None:
        back = self.delay_ms if self.back_ms is None else self.back_ms
        self._relay = subprocess.Popen(
            [sys.executable, "-m", "experiments.relay", f"{PREFIX}gw1", f"{PREFIX}gw2",
             "--delay-ms", str(self.delay_ms), "--back-ms", str(back), *(f"--port={p}" for p in self.ports)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[1])
        RELAY_PID.write_text(str(self._relay.pid))
        line = self._relay.stdout.readline()
        if not line.startswith(b"relaying"):
            error = self._relay.stderr.read().decode(errors="replace")
            raise NetworkError(f"the delay relay did not start: {error.strip() or line!r}")


def cleanup() -> list[str]:
    """Remove every `evs-*` thing: processes in the namespaces, the relay, namespaces, bridges,
    this namespace's route to cluster 2. Returns what it removed (for `--cleanup` to print)."""
    removed = []
    namespaces = [line.split()[0] for line in _run("ip", "netns", "list", check=False).splitlines()
                  if line.startswith(PREFIX)]
    pids = {int(p) for ns in namespaces for p in _run("ip", "netns", "pids", ns, check=False).split()}
    if RELAY_PID.exists():
        try:
            pids.add(int(RELAY_PID.read_text()))
        except ValueError:
            pass
        RELAY_PID.unlink(missing_ok=True)
    removed += [f"process {pid}" for pid in sorted(pids) if running(pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            break
        deadline = time.monotonic() + 3
        while alive and time.monotonic() < deadline:
            alive = [pid for pid in alive if running(pid)]
            time.sleep(0.05)
        pids = set(alive)
    for ns in namespaces:
        _ip("netns", "del", ns, check=False)
        removed.append(f"namespace {ns}")
    for line in _run("ip", "-o", "link", "show", check=False).splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(PREFIX):
            _ip("link", "del", name, check=False)
            removed.append(f"link {name}")
    return removed


def running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, waiting for its parent to reap it, does not)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
