"""Trace records written into a live run's trace elements by someone other than their collectors: anyone
who may write an element may write them. Each forged record is left out by the scope stage that would
have read it (on the node or in the monitor) and counted, the monitor says so once, the node keeps
serving, and the well-behaved records around it are still read.

The run is the 2-node wind tunnel with a collector at every path's source, its application not started:
the trace elements hold only what a test writes (one genuine record per thread, then the forged ones).
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from runs import REPO
from server_attacks import Bystander, memory_kb

import pastset
from eventspace import ignored, trace
from eventspace.catalogue import Catalogue
from eventspace.classes import RANGE
from eventspace.cli import main
from eventspace.scope import EventScope
from monitors.archive import Archive
from monitors.classes import ClassesMon
from monitors.getevent import GetEventMon
from monitors.heartbeat import ALIVE, QUIET, Heartbeat
from paths import Instrument, Pathmap, Selector, launch

STALL_S = 1.0          # "not stalled": ten times the 100 ms a bystander may wait
FAR = 0xFFFFFFF0       # a collector id no run has
U32 = 0xFFFFFFFF


@pytest.fixture
def idle(tmp_path):
    """(run, catalogue, {node: client}) of the idle 2-node wind tunnel; each thread's source
    collector has one genuine record."""
    pm = Pathmap.load(REPO / "pathmaps" / "windtunnel-2node.yaml")
    pm = dataclasses.replace(pm, instrument=Instrument(keep=50, collectors=(Selector(at=("source",)),)))
    with launch(pm.validate(), run_dir=tmp_path) as run:
        catalogue = Catalogue(run.pathmap)
        clients = {node: pastset.connect(endpoint) for node, endpoint in run.endpoints.items()}
        try:
            now = time.monotonic_ns()
            for entry in first_per_thread(catalogue):
                write(clients, entry, (trace.OP_CODES["move"], 0, entry.id, entry.element_id, 1, 8, now - 1000, now))
            yield run, catalogue, clients
        finally:
            for client in clients.values():
                client.close()


def first_per_thread(catalogue):
    """The first source collector of each thread."""
    return list({e.thread: e for e in reversed(catalogue.entries) if e.role == "source"}.values())[::-1]


def write(clients, entry, record) -> None:
    clients[entry.trace_node].enter(entry.trace, trace.FORMAT).move(record)


def test_a_class_record_naming_every_member_id_does_not_stall_the_node(idle):
    """Attack: one CLASS record with members 0..2**32-1 (stalled node A's loop 10.7 s and held 2.3 GB)."""
    run, catalogue, clients = idle
    victim = first_per_thread(catalogue)[0]
    node = victim.trace_node
    with ClassesMon(run) as mon, Bystander(run.endpoints[node]) as bystander:
        before = memory_kb(run.pids[node])
        now = time.monotonic_ns()
        write(clients, victim, (RANGE, trace.CLASS, victim.id, 0, 0, U32, now, now))
        report = mon.read()
        assert not report.missing, f"node {node} did not answer the classes pull: its join is stuck"
        grown = (memory_kb(run.pids[node])["VmHWM"] - before["VmRSS"]) / 1024
        seen = bystander.finish()
    print(f"classes pull with the forged record: node {node} peak +{grown:.0f} MiB, "
          f"bystander's worst move {seen['worst_s'] * 1000:.1f} ms; {mon.scope.ignored}")
    assert victim.thread in {m for c in report.classes for m in c.members}
    assert mon.scope.ignored == {ignored.STAGE_FLAGS: 1}
    assert grown < 64
    assert seen["worst_s"] < STALL_S and not seen["errors"], seen


SCOPES = {
    "heartbeat": ["reduce:max_t_end@thread"],
    "histogram": ["histogram:duration@thread"],
    "count": ["reduce:count@node"],
    "filter": ["filter:op == move", "sort:t_end"],
    "classes": ["classes:ops@thread"],
}


@pytest.mark.parametrize("placement", ["near", "monitor"])
@pytest.mark.parametrize("stages", list(SCOPES))
def test_a_record_of_no_collector_is_left_out_by_every_stage(idle, stages, placement):
    """Attack: one record with collector 0xFFFFFFF0 (the heartbeat and a histogram scope exited with IndexError)."""
    run, catalogue, clients = idle
    victim = first_per_thread(catalogue)[0]
    now = time.monotonic_ns()
    write(clients, victim, (trace.OP_CODES["move"], 0, FAR, 0, 0, 0, now, now))
    mode = "stream" if stages == "classes" else "latest"
    with EventScope(run, "all", mode=mode, tree="per-node", placement=placement, stages=SCOPES[stages]) as scope:
        pulled = scope.pull()
    assert not pulled.missing, f"a join did not answer: {pulled.missing}"
    assert len(pulled.records) and int(pulled.records["collector"].max()) <= len(catalogue.entries)
    assert pulled.ignored == {ignored.UNKNOWN_COLLECTOR: 1}


def test_the_heartbeat_judges_the_genuine_records_beside_a_forged_one(idle):
    """The forged record is the newest of its trace element: its thread has none to show (quiet), the
    others are alive."""
    run, catalogue, clients = idle
    victim = first_per_thread(catalogue)[0]
    now = time.monotonic_ns()
    write(clients, victim, (trace.OP_CODES["move"], 0, FAR, 0, 0, 0, now, now))
    with Heartbeat(run, placement="monitor") as hb:
        report = hb.read()
    assert report.by_status(QUIET) == [victim.thread]
    assert report.by_status(ALIVE) == [t.name for t in run.pathmap.threads if t.name != victim.thread]


def test_a_trace_element_made_again_with_another_template_is_left_out(idle):
    """Attack: delete trace/N and enter it again as 8-byte records: its batch was no longer whole trace records."""
    run, catalogue, clients = idle
    victim = first_per_thread(catalogue)[0]
    clients[victim.trace_node].delete(victim.trace)
    clients[victim.trace_node].enter(victim.trace, "=Q").move((7,))
    for mode in ("latest", "stream"):
        with EventScope(run, "all", mode=mode, placement="monitor") as scope:
            pulled = scope.pull()
            if mode == "latest":   # the node's batch of newest records could not be cut: it is read
                pulled = scope.pull()   # element by element from the next pull on
        assert not pulled.missing
        assert pulled.ignored == {ignored.NOT_RECORDS: 1}, mode
        threads = {catalogue[int(c)].thread for c in pulled.records["collector"]}
        assert threads == {t.name for t in run.pathmap.threads} - {victim.thread}, mode


def test_the_heartbeat_command_says_once_that_it_ignores_forged_records(idle, capsys):
    """Forged records keep coming while `eventspace monitor heartbeat` runs: one line on stderr says so."""
    run, catalogue, clients = idle
    victim = first_per_thread(catalogue)[0]
    stop = threading.Event()

    def forge():
        with pastset.connect(run.endpoints[victim.trace_node]) as client:
            ring = client.enter(victim.trace, trace.FORMAT)
            while not stop.wait(0.05):
                now = time.monotonic_ns()
                ring.move((trace.OP_CODES["move"], 0, FAR, 0, 0, 0, now, now))

    forger = threading.Thread(target=forge, daemon=True)
    forger.start()
    try:
        capsys.readouterr()
        code = main(["monitor", "heartbeat", "--run", run.run_file.path, "--placement", "monitor", "--duration", "2",
                     "--interval", "0.2", "--json"])
    finally:
        stop.set()
        forger.join(10)
    out, err = capsys.readouterr()
    told = [line for line in err.splitlines() if "ignored" in line]
    assert code == 0, err
    assert told == [f"scope heartbeat: 1 record ignored: {ignored.UNKNOWN_COLLECTOR}"], err
    assert len(out.splitlines()) >= 3


def test_a_near_join_leaves_out_times_its_node_never_read(idle):
    """Forged times that pass every range: a start at 0 (before the node started) and an end an hour
    from now. A join on the node reads the clock its collectors time with, so it knows better."""
    run, catalogue, clients = idle
    victim, other = first_per_thread(catalogue)[:2]
    now = time.monotonic_ns()
    write(clients, victim, (trace.OP_CODES["move"], 0, victim.id, victim.element_id, 2, 8, 0, now))
    write(clients, other, (trace.OP_CODES["move"], 0, other.id, other.element_id, 2, 8, now, now + 3600 * 10**9))
    with EventScope(run, "all", mode="stream", tree="per-node", placement="near",
                    stages=["reduce:max_t_end@thread"]) as scope:
        pulled = scope.pull()
    assert not pulled.missing
    assert int(pulled.records["t_end"].max()) <= time.monotonic_ns(), "the end an hour from now came through"
    assert pulled.ignored == {ignored.NOT_ON_CLOCK: 2}


def test_getevent_leaves_out_a_time_its_clock_correction_would_take_below_zero(tmp_path):
    """Fuzzer's find: a forged start of 1 ns on a node whose clock is ahead of the monitor's became,
    less the node's offset, a time past 2**63 that the archive refused: getevent died (ValueError)."""
    pm = Pathmap.load(REPO / "pathmaps" / "windtunnel-2node.yaml")
    pm = dataclasses.replace(pm, instrument=Instrument(keep=50, collectors=(Selector(at=("source",)),)),
                             nodes=tuple(dataclasses.replace(n, clock_offset_ns=10**12) if n.name == "A" else n
                                         for n in pm.nodes))
    with launch(pm.validate(), run_dir=tmp_path) as run:
        catalogue = Catalogue(run.pathmap)
        victim = next(e for e in first_per_thread(catalogue) if e.trace_node == "A")
        with pastset.connect(run.endpoints["A"]) as client, \
                GetEventMon(run, "all", out=tmp_path / "events.sqlite") as mon:
            node_now = client.call("eventspace.clock")
            client.enter(victim.trace, trace.FORMAT).move((trace.OP_CODES["move"], 0, victim.id, 0, 0, 0, 1, node_now))
            mon.read()
            assert mon.scope.ignored == {ignored.BAD_TIMES: 1}
            assert mon.read() is not None
        with Archive.open(tmp_path / "events.sqlite") as archive:
            assert len(archive) == 0


def test_a_stream_scope_accounts_for_what_it_left_out(idle):
    """The records a scope leaves out are in the rings' counts: its account still adds up."""
    run, catalogue, clients = idle
    victim = first_per_thread(catalogue)[0]
    with EventScope(run, "all", mode="stream") as scope:
        now = time.monotonic_ns()
        write(clients, victim, (trace.OP_CODES["move"], 0, FAR, 0, 0, 0, now, now))
        scope.pull()
        account = scope.account()
    assert account.ignored == 1 and account.reconciles, account
    assert "1 left out: not a collector's" in account.line()
