"""The emulated clusters of `experiment clusters`: real network namespaces, a real delay relay."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from eventspace.cli import main
from experiments.network import PREFIX, Clusters, running, cleanup, unavailable
from polling import until

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(unavailable() is not None, reason=f"no network namespaces: {unavailable()}")]

ECHO = textwrap.dedent("""
    import socket
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 7000)); s.listen()
    while True:
        c, _ = s.accept()
        while d := c.recv(1 << 16):
            c.sendall(d)
        c.close()
""")

PROBE = textwrap.dedent("""
    import socket, sys, time
    s = socket.create_connection((sys.argv[1], 7000), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    best = 9.0
    for _ in range(10):
        t = time.perf_counter(); s.sendall(b"x"); s.recv(8); best = min(best, time.perf_counter() - t)
    data = b"y" * (1 << 20)
    t = time.perf_counter(); s.sendall(data); got = 0
    while got < len(data):
        got += len(s.recv(1 << 20))
    print(best * 1e3, time.perf_counter() - t)
""")


def leftovers() -> list[str]:
    namespaces = [line for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
                  .splitlines() if line.startswith(PREFIX)]
    links = [line for line in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
             .splitlines() if f": {PREFIX}" in line]
    return namespaces + links


def listening(net: Clusters, where: str, port: int) -> bool:
    """Whether something listens on TCP `port` in host `where`'s namespace."""
    return bool(subprocess.run([*net.command(where), "ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                               text=True).stdout.strip())


def probe(net: Clusters, where: str | None, address: str) -> tuple[float, float]:
    """(least round trip ms, seconds to echo 1 MiB) from host `where` (None: this namespace) to `address`."""
    prefix = net.command(where) if where else []
    out = subprocess.run([*prefix, sys.executable, "-c", PROBE, address], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    return float(out[0]), float(out[1])


def test_the_link_between_clusters_delays_each_way_by_its_own_delay_and_tbf_caps_its_rate():
    with Clusters(hosts=2, delay_ms=5, back_ms=15) as net:
        echo = [subprocess.Popen([*net.command(ns), sys.executable, "-c", ECHO]) for ns in ("evs-c1h2", "evs-c2h1")]
        until(lambda: all(listening(net, ns, 7000) for ns in ("evs-c1h2", "evs-c2h1")), 30, "both echo servers listening")
        inside, _ = probe(net, "evs-c1h1", "10.77.1.2")
        across, fast = probe(net, "evs-c1h1", "10.77.2.1")
        back, _ = probe(net, "evs-c2h2", "10.77.1.2")
        monitor, _ = probe(net, None, "10.77.2.1")
        net.set_rate("20mbit")
        _, capped = probe(net, None, "10.77.2.1")
        assert all(e.poll() is None for e in echo)
    assert inside < 2.0                       # a veth and a bridge: no relay inside a cluster
    assert 20.0 <= across < 40.0 and 20.0 <= back < 40.0 and 20.0 <= monitor < 40.0   # 5 ms there, 15 ms back
    # 1 MiB each way at 20 Mbit/s takes at least 0.4 s; uncapped it takes a fraction of that.
    assert capped >= 0.4 > fast
    assert leftovers() == [] and all(e.wait(5) is not None for e in echo)


def test_cleanup_removes_what_a_killed_experiment_left_namespaces_relay_and_processes(capsys):
    crashed = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import subprocess, sys, time
        from experiments.network import Clusters
        net = Clusters(hosts=1).__enter__()
        subprocess.Popen([*net.command("evs-c2h1"), "sleep", "600"])
        deadline = time.monotonic() + 30
        # `ip netns exec` enters the namespace after Popen returns: built once the sleeper is in it
        while not subprocess.run(["ip", "netns", "pids", "evs-c2h1"], capture_output=True, text=True).stdout.strip():
            if time.monotonic() > deadline:
                print("the sleeper never entered evs-c2h1", flush=True)
                sys.exit(1)
            time.sleep(0.01)
        print("built", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        assert crashed.stdout.readline() == b"built\n"
        sleeper = int(subprocess.run(["ip", "netns", "pids", "evs-c2h1"], capture_output=True, text=True).stdout)
        crashed.send_signal(signal.SIGKILL)
        crashed.wait(10)
        assert leftovers()
        assert main(["experiment", "clusters", "--cleanup"]) == 0
        out = capsys.readouterr().out
        assert "removed namespace evs-c2h1" in out and f"removed process {sleeper}" in out
        assert leftovers() == []
        assert not running(sleeper)
        assert main(["experiment", "clusters", "--cleanup"]) == 0
        assert "nothing of the clusters experiment was left" in capsys.readouterr().out
    finally:
        crashed.kill()
        cleanup()
