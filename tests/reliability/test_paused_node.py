"""A node that is paused (SIGSTOP: a GC pause, swapping, a busy host) is waited for; one that died is not.

Faults, one per test:
- a server paused for 3 s under a blocked call: the call completes once it resumes;
- a server paused past the client's grace: NotAnswering, saying for how long;
- a server killed: ServerGone at once, not after the grace;
- a pull over a paused node and a killed one: the killed one is gone, the paused one not answering;
- a wind-tunnel node paused for 5 s mid-run: the run ends with the reference grid;
- a node paused past the run's grace (`--grace 2`): the run ends naming it and how long it was silent;
- a node killed while another is paused: the run ends at once naming it and its exit code;
- a bad `liveness: {grace: ...}` or `--grace`: one error naming where;
- the heartbeat during a pause: the node's threads are `not answering`, after a kill `gone`;
- a node holding a scope's near joins paused for longer than their lease: the scope finds them after.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from polling import until
from runs import REPO, gone, windtunnel_with_source_collectors

import pastset
from apps.windtunnel.lattice import digests_sha256, grid_sha256, reference_run
from eventspace.cli import main
from eventspace.scope import EventScope
from monitors.heartbeat import GONE, NOT_ANSWERING, Heartbeat
from monitors.render import heartbeat_summary
from pastset.fanout import Fanout
from paths import Liveness, NodeDied, NodeNotAnswering, Pathmap, PathmapError, RunError, RunFile, launch

TWO_NODES = REPO / "pathmaps" / "windtunnel-2node.yaml"
N, SEED = 48, 3


class Paused:
    """SIGSTOP a process now; SIGCONT it on `resume()` (and always on exit, so nothing stays stopped)."""

    def __init__(self, pid: int):
        self.pid = pid
        os.kill(pid, signal.SIGSTOP)
        self.resumed = False
        # The signal is only queued: wait until the process is stopped.
        until(lambda: _state(pid) == "T", 10, f"process {pid} stopped")

    def resume(self) -> None:
        if not self.resumed:
            self.resumed = True
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.resume()


def _state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def in_background(fn):
    """Run fn() in a thread; returns a function that waits (at most 60 s) and gives (result, error)."""
    out: dict = {}

    def body():
        try:
            out["result"] = fn()
        except BaseException as exc:  # kept for the test
            out["error"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()

    def wait():
        thread.join(60)
        assert not thread.is_alive(), "the call did not return within 60 s"
        return out.get("result"), out.get("error")

    return wait


# -- the PastSet client and the fan-out ---------------------------------------------------------------------------


def test_a_call_blocked_on_a_server_paused_for_3s_completes_once_it_resumes(spawn_server):
    """SIGSTOP a server for 3 s while a call waits on it (gone_after 1 s): the call still returns."""
    server = spawn_server()
    with pastset.connect(server.endpoint, gone_after=1.0) as client:
        element = client.enter("e", ["int"])
        element.move((7,))
        with Paused(server.proc.pid) as pause:
            waiting = in_background(lambda: element.observe(0))
            time.sleep(3.0)   # the pause under test: longer than gone_after, while the call waits
            pause.resume()
        result, error = waiting()
    assert error is None, f"a pause of 3 s failed the call: {error!r}"
    assert result == (7,)


def test_a_server_paused_past_the_grace_is_not_answering_and_the_error_says_for_how_long(spawn_server):
    """SIGSTOP a server for longer than the client's grace: NotAnswering (a ServerGone), naming the grace."""
    server = spawn_server()
    with pastset.connect(server.endpoint, gone_after=0.5, grace=2.0) as client:
        element = client.enter("e", ["int"])
        with Paused(server.proc.pid):
            started = time.monotonic()
            with pytest.raises(pastset.NotAnswering, match=r"did not answer for 2 s") as silent:
                element.last()
            waited = time.monotonic() - started
    assert isinstance(silent.value, pastset.ServerGone)
    assert server.endpoint in str(silent.value) and "connection is open" in str(silent.value)
    assert waited >= 2.0, f"gave up after {waited:.1f} s, before the grace"


def test_a_killed_server_is_gone_at_once_not_after_the_grace(spawn_server):
    """kill -9 a server while a call waits on it (grace 60 s): ServerGone, not NotAnswering, well before the grace."""
    server = spawn_server()
    with pastset.connect(server.endpoint, gone_after=1.0, grace=60.0) as client:
        element = client.enter("e", ["int"])
        waiting = in_background(lambda: element.observe(0))
        until(lambda: client.call("parked", "e") == 1, what="the observe parked on the server")
        killed = time.monotonic()
        server.kill()
        _, error = waiting()
        took = time.monotonic() - killed
    assert isinstance(error, pastset.ServerGone) and not isinstance(error, pastset.NotAnswering), repr(error)
    assert "closed" in str(error), str(error)
    assert took < 15, f"a dead server took {took:.1f} s to be reported"


@pytest.mark.slow   # 6-7 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_a_pull_tells_a_paused_node_from_a_dead_one(spawn_server):
    """A fan-out over a paused server and a killed one: both missing; the killed one gone, the paused one not."""
    paused, killed, healthy = spawn_server(), spawn_server(), spawn_server()
    fanout = Fanout({"P": paused.endpoint, "K": killed.endpoint, "H": healthy.endpoint})
    try:
        def ping_all(timeout):
            pings = fanout.round(timeout)
            for node in "PKH":
                pings.ping(node)
            return pings.wait()

        assert not ping_all(5.0)
        killed.kill()
        with Paused(paused.proc.pid):
            for _ in range(2):   # and again, over the fresh socket a dead node gets
                missing = ping_all(3.0)   # time enough for H on a busy machine
                assert missing == {"P", "K"}
                assert fanout.gone(missing) == {"K"}
        missing = ping_all(5.0)
        assert missing == {"K"} and fanout.gone(missing) == {"K"}
    finally:
        fanout.close()


# -- a run --------------------------------------------------------------------------------------------------------


def _grid(results: dict) -> str:
    ordered = sorted(results.values(), key=lambda r: r["index"])
    return digests_sha256(b"".join(r["digests"] for r in ordered))


@pytest.mark.slow
@pytest.mark.timeout(420)   # its own waits: 60 s to reach step 20, 300 s for the run
def test_a_node_paused_for_5s_mid_run_and_resumed_ends_with_the_reference_grid(tmp_path):
    """SIGSTOP node B of a wind-tunnel run for 5 s, then SIGCONT: the run completes, grid as the reference."""
    steps = 1500
    reference = grid_sha256(reference_run(N, steps, SEED))
    with launch(Pathmap.load(TWO_NODES), run_dir=tmp_path) as run:
        pid = run.pids["B"]
        paused_at: list[int] = []

        def pause_mid_run():
            until(lambda: min((p.get("step", 0) for p in run.progress().values()), default=0) >= 20, 60,
                  "the wind tunnel reaching step 20")
            with Paused(pid):
                paused_at.append(max(p.get("step", 0) for p in run.progress().values()))
                time.sleep(5.0)   # the pause under test

        run.start("windtunnel", {"size": N, "steps": steps, "seed": SEED})
        pausing = in_background(pause_mid_run)
        results = run.wait(timeout=300, poll=0.2, on_poll=lambda r: r.progress())
        _, error = pausing()
    assert error is None, repr(error)
    assert paused_at and paused_at[0] < steps, "the pause did not fall inside the run"
    assert _grid(results) == reference


@pytest.mark.slow
def test_a_node_paused_past_the_grace_ends_the_run_naming_it(tmp_path, capsys):
    """`eventspace run windtunnel --grace 2` with node B stopped for good: exit 2, one line naming B and 2 s."""
    run_file = tmp_path / "windtunnel-2node.json"
    stopped: list[Paused] = []

    def running(endpoint: str) -> bool:
        with pastset.connect(endpoint, timeout=5) as client:
            return bool(client.call("paths.info")["running"])

    def pause_b():   # once the program runs on every node: the launcher's start has its answers
        until(lambda: all(running(e) for e in RunFile.read(run_file).check_live().endpoints.values()), 60,
              "the program running on every node", ignoring=RunError)
        stopped.append(Paused(json.loads(run_file.read_text())["pids"]["B"]))

    pausing = in_background(pause_b)
    try:
        started = time.monotonic()
        code = main(["run", "windtunnel", "--pathmap", str(TWO_NODES), "--size", str(N), "--steps", "1000000",
                     "--run-dir", str(tmp_path), "--grace", "2", "--json"])
        took = time.monotonic() - started
        _, error = pausing()
    finally:
        for pause in stopped:
            pause.resume()
    assert error is None, repr(error)
    # The run's announcement ("run NAME: run file ..."), then one line for the failure.
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("run windtunnel-2node:")]
    assert code == 2 and len(err) == 1, err
    assert "node B" in err[0] and "did not answer for 2 s" in err[0], err[0]
    assert took < 60, f"the run took {took:.0f} s to give up on a node with a grace of 2 s"
    assert all(gone(p.pid) for p in stopped), "the paused node outlived its run"


@pytest.mark.slow
def test_a_node_killed_while_another_is_paused_ends_the_run_at_once_naming_it_and_its_exit_code(tmp_path):
    """Node B stopped (grace 60 s), then node A killed: NodeDied for A with its exit code, long before B's grace."""
    pm = dataclasses.replace(Pathmap.load(TWO_NODES), liveness=Liveness(grace=60.0)).validate()
    with launch(pm, run_dir=tmp_path) as run:
        run.start("windtunnel", {"size": N, "steps": 1_000_000, "seed": SEED, "until": time.time() + 120})
        until(lambda: min((p.get("step", 0) for p in run.progress().values()), default=0) > 0, 60,
              "every thread of the wind tunnel past its first step")
        with Paused(run.pids["B"]):
            time.sleep(0.5)   # what is under test: B has been silent a while when A dies
            run.kill("A")
            killed = time.monotonic()
            with pytest.raises(NodeDied, match=r"node A died \(exit code -9\)") as died:
                run.wait(timeout=90)
            took = time.monotonic() - killed
    assert not isinstance(died.value, NodeNotAnswering)
    assert took < 15, f"a killed node took {took:.1f} s to end the run"


def test_the_grace_is_read_from_the_pathmap_and_a_bad_one_is_reported_with_its_line(tmp_path):
    """`liveness: {grace: -1}` in a pathmap: PathmapError naming file:line and the key; a good one is kept."""
    text = TWO_NODES.read_text()
    good = Pathmap.loads(text + "\nliveness: {grace: 7.5}\n")
    assert good.liveness.grace == 7.5 and Pathmap.loads(good.dumps()).liveness.grace == 7.5
    assert Pathmap.loads(text).liveness.grace == 30.0
    bad = tmp_path / "bad.yaml"
    for value in ("-1", "0", "soon"):
        bad.write_text(text + f"\nliveness:\n  grace: {value}\n")
        with pytest.raises(PathmapError) as problem:
            Pathmap.load(bad)
        line = text.count("\n") + 3
        assert f"bad.yaml:{line}" in str(problem.value) and "liveness.grace" in str(problem.value), str(problem.value)


@pytest.mark.parametrize("command", [["run", "windtunnel", "--pathmap", str(TWO_NODES), "--steps", "1"],
                                     ["node", "--pathmap", str(TWO_NODES), "--node", "A"]])
def test_a_bad_grace_on_the_command_line_is_one_line(command, tmp_path, capsys):
    """`--grace -3`: exit 2, one line saying the grace must be a positive number of seconds."""
    code = main([*command, "--grace", "-3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "grace" in err[0] and "positive" in err[0], err


# -- monitors -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_heartbeat_shows_a_paused_node_as_not_answering_and_a_killed_one_as_gone(tmp_path):
    """Heartbeat over a run whose node is SIGSTOPped, resumed, then killed: not answering, alive, gone."""
    with windtunnel_with_source_collectors(tmp_path) as run:
        with Heartbeat(run, timeout=0.5) as heartbeat:
            heartbeat.read()
            root = heartbeat.scope.installed()[-1][0]   # the node that answers the monitor's pulls
            victim = "B" if root != "B" else "A"
            victims = {t.name for t in run.pathmap.threads if t.node == victim}
            with Paused(run.pids[victim]):
                paused = until(heartbeat.read, 30, "a beat with a node not answering",
                               holds=lambda beat: beat.not_answering)
            resumed = until(heartbeat.read, 30, "a beat with every node answering again",
                            holds=lambda beat: not beat.not_answering)
            run.kill(victim)
            killed = until(heartbeat.read, 30, "a beat with a node gone", holds=lambda beat: beat.gone)
    assert paused.not_answering == {victim} and not paused.gone, (paused.not_answering, paused.gone)
    assert {b.thread for b in paused.threads if b.status == NOT_ANSWERING} == victims
    assert f"nodes not answering: {victim}" in _text(heartbeat_summary(paused, "now"))
    assert not resumed.gone and not {b.thread for b in resumed.threads if b.status in (GONE, NOT_ANSWERING)}
    assert killed.gone == {victim} and not killed.not_answering, (killed.gone, killed.not_answering)
    assert {b.thread for b in killed.threads if b.status == GONE} == victims
    assert f"nodes gone: {victim}" in _text(heartbeat_summary(killed, "now"))


@pytest.mark.slow
def test_a_scopes_near_joins_outlive_a_pause_of_their_node_longer_than_their_lease(tmp_path):
    """A scope whose join is placed in a node server (lease 1 s); that node stopped for 3 s: after it
    resumes, pulls miss nothing (the join was kept, and the other node was read meanwhile)."""
    with windtunnel_with_source_collectors(tmp_path) as run:
        # Each node keeps a join that sends only its threads' newest events (the heartbeat's tree).
        with EventScope(run, "all", tree="per-node", placement="near", lease=1.0, timeout=0.5,
                        stages=["reduce:max_t_end@thread"]) as scope:
            # Every thread has events before its node stops (a loaded machine starts them late).
            until(lambda: len(seen_threads(scope, scope.pull())) == len(run.pathmap.threads), 30,
                  "an event of every thread")
            victim = scope.installed()[-1][0]   # a node that holds a join
            with Paused(run.pids[victim]):
                time.sleep(3.0)   # the pause under test: longer than the lease
                during = scope.pull()
            after = until(scope.pull, 10, f"a pull that misses nothing: node {victim}'s joins kept while it was stopped",
                          holds=lambda pulled: not pulled.missing)
            threads = seen_threads(scope, after)
    assert during.missing == {victim} and not during.gone
    assert not after.missing, f"node {victim}'s joins were dropped while it was stopped"
    assert {t.name for t in run.pathmap.threads if t.node == victim} <= threads


@pytest.mark.slow
def test_a_heartbeat_started_while_a_node_is_paused_attaches_and_names_it_not_answering(tmp_path):
    """A user who starts the heartbeat on a run where a node is stuck (paused here) gets beats that
    name that node's threads `not answering`, and the others' states: the monitor neither refuses
    the run as stale nor fails placing its tree (it did both: CI saw a 64-node run refused so).
    `space switch` and `space ls` serve the nodes that answer and name the one that does not."""
    with windtunnel_with_source_collectors(tmp_path) as run:
        victim = "B"
        victims = {t.name for t in run.pathmap.threads if t.node == victim}
        with Paused(run.pids[victim]):
            watched = subprocess.run([sys.executable, "-m", "eventspace.cli", "monitor", "heartbeat", "--run",
                                      run.run_file.path, "--interval", "0.5", "--duration", "2", "--json"],
                                     capture_output=True, text=True, timeout=120)
            # Switching the run's collectors switches every node that answers and names the one
            # that does not (it switched the nodes before it, then failed on it, and stopped).
            switched = subprocess.run([sys.executable, "-m", "eventspace.cli", "space", "switch", "off", "--run",
                                       run.run_file.path], capture_output=True, text=True, timeout=120)
            listed = subprocess.run([sys.executable, "-m", "eventspace.cli", "space", "ls", run.run_file.path],
                                    capture_output=True, text=True, timeout=120)
    assert switched.returncode == 1, switched.stderr[-2000:]
    assert "on 1 nodes (A)" in switched.stdout and f"node {victim} did not answer" in switched.stderr
    assert switched.stderr.count("\n") == 1, switched.stderr
    assert listed.returncode == 0 and f"node {victim} does not answer" in listed.stdout, listed.stderr[-2000:]
    rows = [line.split("│") for line in listed.stdout.splitlines() if line.count("│") > 3]
    switches = {(row[5].strip().split(" ")[0], row[-2].strip()) for row in rows[1:]}
    assert switches == {("A", "off"), (victim, "?")}, switches
    assert watched.returncode == 0, watched.stderr[-2000:]
    *beats, last = [json.loads(line) for line in watched.stdout.splitlines()]
    assert beats and last["beats"] == len(beats) and not last["ended"], watched.stdout[-2000:]
    for beat in beats:
        states = {b["thread"]: b["status"] for b in beat["threads"]}
        assert {t for t, status in states.items() if status == NOT_ANSWERING} == victims, states
        assert set(states) == {t.name for t in run.pathmap.threads}


def seen_threads(scope, pulled) -> set[str]:
    return {scope.catalogue[int(c)].thread for c in pulled.records["collector"]}


def _text(renderable) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    console.print(renderable)
    return console.export_text()
