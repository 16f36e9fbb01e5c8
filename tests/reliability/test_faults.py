"""Faults during a live wind-tunnel run: a node killed, a monitor killed, a consumer that stops pulling,
and the network between two hosts cut (in network namespaces, where the test may make them)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from polling import until
from runs import REPO, gone, node_children, pathmap_for, ring_app

from eventspace.hosted import LIST
from eventspace.scope import EventScope
from monitors.heartbeat import GONE, Heartbeat
from paths import Instrument, NodeDied, Pathmap, Selector, launch

WINDTUNNEL = REPO / "pathmaps" / "windtunnel-4node.yaml"
KEEP = 20   # trace elements of the shared run keep this few records, so that they discard soon


def steps(run) -> int:
    """The slowest thread's step: how far the whole application has come."""
    return min((p.get("step", 0) for p in run.progress().values()), default=0)


def steps_per_second(run, seconds: float) -> float:
    s0, t0 = steps(run), time.monotonic()
    time.sleep(seconds)   # the window the rate is measured over
    return (steps(run) - s0) / (time.monotonic() - t0)


def wind_tunnel_args(seconds: float) -> dict:
    return {"size": 64, "steps": 1_000_000, "until": time.time() + seconds}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A wind-tunnel run on four node servers, going for a minute, with collectors everywhere and
    trace elements that keep only KEEP records. The tests below share it, in order; the last
    one kills a node of it."""
    pm = Pathmap.load(WINDTUNNEL)
    pm = dataclasses.replace(pm, instrument=dataclasses.replace(pm.instrument, keep=KEEP)).validate()
    with launch(pm, run_dir=tmp_path_factory.mktemp("runs")) as run:
        run.start("windtunnel", wind_tunnel_args(120))
        until(lambda: steps(run) >= 20, 30, "the wind tunnel reaching step 20")
        yield run
    assert all(gone(pid) for pid in run.pids.values())


# -- a monitor killed while its scope joins sit in the node servers ---------------------------------------------

MONITOR = textwrap.dedent("""\
    import sys
    from eventspace.scope import EventScope
    # Each node keeps a join that sends only its threads' newest events (the heartbeat's tree).
    scope = EventScope(sys.argv[1], "all", tree="per-node", placement="near", lease=1.0,
                       stages=["reduce:max_t_end@thread"])
    scope.pull()
    print("placed", flush=True)
    while True:   # pull as fast as it can: the perturbation the application feels
        scope.pull()
""")


@pytest.mark.slow
def test_a_killed_monitors_near_joins_go_after_their_lease_and_the_app_keeps_going(live):
    nodes = [n.name for n in live.pathmap.nodes]

    def joins():
        return {n: live.client(n).call(LIST, timeout=5) for n in nodes}

    assert not any(joins().values())
    before = steps_per_second(live, 1.0)
    monitor = subprocess.Popen([sys.executable, "-c", MONITOR, live.run_file.path], cwd=REPO,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert monitor.stdout.readline().strip() == "placed"
        assert any(joins().values()), "the monitor placed no joins on the node servers"
        during = steps_per_second(live, 1.0)
        monitor.send_signal(signal.SIGKILL)
        monitor.wait(10)
        killed = time.monotonic()
        until(lambda: not any(joins().values()), 10, "the dead monitor's joins dropped")
        dropped_after = time.monotonic() - killed
    finally:
        if monitor.poll() is None:
            monitor.kill()
        monitor.wait(10)
        monitor.stdout.close()
    after = steps_per_second(live, 1.0)
    print(f"steps/s: {before:.0f} before the monitor, {during:.0f} with it, {after:.0f} after it died; "
          f"its joins went {dropped_after:.1f}s after it died")
    assert dropped_after < 5
    assert after > 0, "the application stopped advancing after the monitor died"


# -- a consumer that pulls far slower than events arrive --------------------------------------------------------

@pytest.mark.slow
def test_a_stream_scope_that_stops_pulling_never_holds_up_the_app_and_then_reports_discards(live):
    baseline = steps_per_second(live, 1.0)
    with EventScope(live, "all", mode="stream", timeout=2.0) as scope:   # as getevent streams
        scope.pull()
        first = {e.trace: live.client(e.trace_node).element(e.trace).first() for e in scope.entries[:8]}
        paused = steps_per_second(live, 1.5)     # the scope does not pull meanwhile
        pulled = scope.pull()
        later = {e.trace: live.client(e.trace_node).element(e.trace).first() for e in scope.entries[:8]}
    print(f"steps/s: {baseline:.0f} before, {paused:.0f} while the scope did not pull; "
          f"{pulled.discarded:,} records discarded before they were read, {len(pulled.records):,} read")
    assert paused >= baseline / 3, "the application slowed down while its consumer did not pull"
    assert any(later[t] > first[t] for t in first), "no trace element discarded anything"
    assert pulled.discarded > 0 and len(pulled.records) > 0 and not pulled.missing


# -- a node server killed in the middle of the run (last: it ends the shared run) --------------------------------

@pytest.mark.slow
def test_a_node_killed_mid_run_stops_the_app_names_the_node_and_leaves_nothing_running(live):
    pids = live.pids
    with Heartbeat(live, timeout=0.5) as heartbeat:
        heartbeat.read()
        assert not heartbeat.read().gone
        root = heartbeat.scope.installed()[-1][0]     # the node that answers the monitor's pulls
        victim = "C" if root != "C" else "D"
        victims = {t.name for t in live.pathmap.threads if t.node == victim}
        live.kill(victim)
        killed = time.monotonic()
        with pytest.raises(NodeDied, match=rf"node {victim}\b"):
            live.wait(timeout=30)
        assert time.monotonic() - killed < 5, "the application took too long to stop"
        reports = [heartbeat.read(), heartbeat.read()]
    for report in reports:
        assert report.gone == {victim}
        assert {b.thread for b in report.threads if b.status == GONE} == victims
        others = [b for b in report.threads if b.thread not in victims]
        assert len(others) == 12 and all(b.status != GONE for b in others)
    live.stop()
    assert all(gone(pid) for pid in pids.values()), "a node server process outlived its run"
    assert node_children() == []


# -- the network between two hosts cut ------------------------------------------------------------------------------

SUBNET = "10.231.{}.{}"

CHECKER = textwrap.dedent("""\
    import json, sys, time
    import pastset
    from eventspace.scope import EventScope
    from paths import Pathmap

    def say(**fields):
        print(json.dumps(fields), flush=True)

    pm = Pathmap.load(sys.argv[1])
    far = {n.name: f"tcp://{n.host}:{n.port}" for n in pm.nodes}["A"]
    client = pastset.connect(far, timeout=30)      # the nodes start beside this process
    scope = EventScope(pm, "all", timeout=1.0)
    deadline = time.monotonic() + 30
    while scope.pull().missing and time.monotonic() < deadline:
        time.sleep(0.1)
    say(name=client.ping(), missing=sorted(scope.pull().missing))
    sys.stdin.readline()                    # the link is down now
    started = time.monotonic()
    try:
        client.call("eventspace.clock", timeout=1.0)
        outcome = "answered"
    except pastset.ServerGone:
        outcome = "ServerGone"
    except Exception as exc:
        outcome = type(exc).__name__
    took = time.monotonic() - started
    started = time.monotonic()
    pulled = scope.pull()
    say(call=outcome, took=took, missing=sorted(pulled.missing), pull_took=time.monotonic() - started)
    sys.stdin.readline()                    # the link is up again
    deadline = time.monotonic() + 10
    while scope.pull().missing and time.monotonic() < deadline:
        time.sleep(0.2)
    say(missing=sorted(scope.pull().missing), clock=isinstance(pastset.connect(far).call("eventspace.clock"), int))
    scope.close()
    client.close()
""")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


@pytest.fixture
def two_hosts():
    """Two network namespaces joined by a veth pair: (namespace, interface, address) per host.
    Skips where the test cannot make namespaces; removes them (and so the veth pair) always."""
    if not shutil.which("ip"):
        pytest.skip("no `ip` command (iproute2 is not installed): cannot make network namespaces")
    tag = f"{os.getpid() % 100_000}"
    spaces = [f"es-{tag}-a", f"es-{tag}-b"]
    made = []
    try:
        for ns in spaces:
            try:
                _ip("netns", "add", ns)
            except (subprocess.CalledProcessError, OSError) as exc:
                reason = getattr(exc, "stderr", "") or str(exc)
                pytest.skip(f"cannot make network namespaces here (needs root and CAP_SYS_ADMIN): {reason.strip()}")
            made.append(ns)
        links = [f"esa{tag}", f"esb{tag}"]
        _ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
        hosts = []
        subnet = int(tag) % 250
        for i, (ns, link) in enumerate(zip(spaces, links)):
            address = SUBNET.format(subnet, i + 1)
            _ip("link", "set", link, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", link)
            _ip("-n", ns, "link", "set", link, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            hosts.append((ns, link, address))
        yield hosts
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10, check=False)


def _in(ns: str, *command: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", ns, *command], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, **kwargs)


def _line(proc: subprocess.Popen, timeout: float = 30) -> dict:
    import select

    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    assert line, f"no answer from {proc.args[3:6]} within {timeout}s (exit code {proc.poll()})"
    return json.loads(line)


@pytest.mark.slow
def test_a_cut_link_between_hosts_is_server_gone_within_the_timeout_and_a_missing_node(two_hosts, tmp_path):
    (ns_a, link_a, addr_a), (ns_b, _, addr_b) = two_hosts
    cluster = (f"clusters: {{c1: {{nodes: {{A: {{host: {addr_a}, port: 17017}}, "
               f"B: {{host: {addr_b}, port: 17017}}}}}}}}")
    pm = pathmap_for(ring_app(2), cluster, name="netns")
    pm = dataclasses.replace(pm, instrument=Instrument(keep=50, collectors=(Selector(at=("source", "sink")),)))
    path = tmp_path / "netns.yaml"
    pm.validate().dump(path)
    started = []
    try:
        for ns, node in ((ns_a, "A"), (ns_b, "B")):     # all three start at once
            started.append(_in(ns, sys.executable, "-m", "paths", "--pathmap", str(path), "--node", node,
                               "--launched", "--insecure", stderr=subprocess.DEVNULL))
        checker = _in(ns_b, sys.executable, "-c", CHECKER, str(path))
        started.append(checker)
        assert [_line(proc)["node"] for proc in started[:2]] == ["A", "B"]
        assert _line(checker, 60) == {"name": "A", "missing": []}
        _ip("-n", ns_a, "link", "set", link_a, "down")
        checker.stdin.write("cut\n")
        checker.stdin.flush()
        cut = _line(checker)
        assert cut["call"] == "ServerGone" and cut["took"] < 1.0 + 1.0, cut   # its timeout, and the grace
        assert cut["missing"] == ["A"] and cut["pull_took"] < 3, cut
        _ip("-n", ns_a, "link", "set", link_a, "up")
        checker.stdin.write("up\n")
        checker.stdin.flush()
        assert _line(checker) == {"missing": [], "clock": True}, "the scope did not find node A again"
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.stdin.close()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            proc.stdout.close()
