"""The heartbeat monitor on a live wind-tunnel run with one thread made to stall, and on runs whose nodes die."""

import dataclasses
import time

import pytest

from monitors.heartbeat import ALIVE, GONE, IDLE, STALLED, UNSEEN, WAITING, Blocked, Heartbeat, Judge
from paths import Instrument, Pathmap, Selector, launch
from polling import until
from runs import ENV, PROGRAMS, REPO, THREE_NODES, TWO_NODES, not_answering, pathmap_for, ring_app

INTERVAL = 0.25


@pytest.mark.slow   # 7-12 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_a_stalled_thread_is_flagged_within_three_intervals_and_no_healthy_one_ever(tmp_path):
    pm = Pathmap.load(REPO / "pathmaps" / "windtunnel-4node.yaml")
    with launch(pm, run_dir=tmp_path) as run:
        run.start("windtunnel", {"size": 64, "steps": 100_000, "until": time.time() + 5,
                                 "stall": {"thread": "T6", "at_step": 60, "seconds": 2.0}})
        reports = []
        with Heartbeat(run) as heartbeat:
            while len(reports) < 28:
                started = time.monotonic()
                reports.append(heartbeat.read())
                time.sleep(max(0.0, INTERVAL - (time.monotonic() - started)))   # the monitor's pace, under test
        run.wait(timeout=60)
    statuses = [{b.thread: b.status for b in r.threads} for r in reports]
    assert all(set(s) == {f"T{i}" for i in range(16)} for s in statuses)
    flagged_at = [i for i, s in enumerate(statuses) if s["T6"] == STALLED]
    assert flagged_at, "T6 was never flagged"
    last_alive = max(i for i, s in enumerate(statuses[:flagged_at[0]]) if s["T6"] == ALIVE)
    assert flagged_at[0] - last_alive <= 3
    # While T6 is stalled, the others wait on it, and say in which operation.
    during = reports[flagged_at[0]]
    waiting = [b for b in during.threads if b.status == WAITING]
    assert len(waiting) >= 2 and all(b.waiting_in for b in waiting)
    # No other thread is ever flagged, and after the run everyone is idle, not stalled.
    assert all(status != STALLED for s in statuses for t, status in s.items() if t != "T6")
    assert any(s["T6"] == ALIVE for s in statuses[flagged_at[-1]:]), "T6 never recovered"
    assert set(statuses[-1].values()) == {IDLE}


def test_a_pathmap_without_collectors_cannot_be_watched(tmp_path):
    pm = Pathmap.load(REPO / "pathmaps" / "windtunnel-2node.yaml")
    with launch(pm, run_dir=tmp_path) as run:
        with pytest.raises(ValueError, match="no collectors: instrument it"):
            Heartbeat(run)


def three_node_ring():
    """Six threads on nodes A, B, C (two each), every source collected."""
    pm = pathmap_for(ring_app(6), THREE_NODES, rule="block", name="hb-dies")
    return dataclasses.replace(pm, instrument=Instrument(keep=50, collectors=(Selector(at=("source",)),))).validate()


@pytest.mark.parametrize("placement", ["near", "monitor"])
def test_dead_nodes_are_named_exactly_and_their_threads_are_never_alive(tmp_path, placement):
    pm = three_node_ring()
    on = {n: [t.name for t in pm.threads if t.node == n] for n in "ABC"}
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        run.start("programs:ring_forever", {"stop_after": 120, "pause": 0.01})
        with Heartbeat(run, placement=placement, timeout=1.0) as heartbeat:
            # Under near placement each node's server runs the join over its own records; the root
            # runs in the monitor.
            assert placement == "monitor" or sorted(n for n, _ in heartbeat.scope.installed()) == ["A", "B", "C"]
            until(lambda: {b.status for b in heartbeat.read().threads} == {ALIVE}, 30, "every thread alive: the ring running")

            run.kill("B")   # a node below the root
            report = heartbeat.read()
            status = {b.thread: b.status for b in report.threads}
            assert report.gone == {"B"} and not report.unreached
            assert all(status[t] == GONE for t in on["B"])

            run.kill("A")   # another node holding a join: C is still asked
            report = heartbeat.read()
            status = {b.thread: b.status for b in report.threads}
            assert report.gone == {"A", "B"} and not report.unreached
            assert all(status[t] not in (GONE, UNSEEN) for t in on["C"]), status

            run.kill("C")   # every node
            for _ in range(2):
                report = heartbeat.read()
                assert report.gone == {"A", "B", "C"}
                assert {b.status for b in report.threads} == {GONE}


def test_threads_that_all_stopped_are_idle_though_a_node_went_while_the_beat_asked():
    """As a launcher stops a finished run's nodes one by one, a node may go between the pull and the
    question of who waits: the threads left are idle, not stalled (1,024 threads were flagged so)."""
    judge = Judge(["T0", "T1", "T2", "T3"], {"T0": "A", "T1": "A", "T2": "B", "T3": "B"})
    newest = {"T0": 10, "T1": 11, "T2": 12, "T3": 13}
    judge.judge(newest, 0.0, lambda missing: Blocked({}, set(), set()))
    for now in (1.0, 2.0):
        report = judge.judge(newest, now, lambda missing: Blocked({}, {"B"}, {"B"}))
        assert {b.thread: b.status for b in report.threads} == {"T0": IDLE, "T1": IDLE, "T2": GONE, "T3": GONE}
    # One thread stopped while the others wait on it is still flagged, as before.
    judge.judge({**newest, "T1": 12}, 3.0, lambda missing: Blocked({"T1": "observe x"}, set(), set()))
    for now in (4.0, 5.0):
        report = judge.judge({**newest, "T1": 12}, now, lambda missing: Blocked({"T1": "observe x"}, {"B"}, {"B"}))
    assert {b.thread: b.status for b in report.threads} == {"T0": STALLED, "T1": WAITING, "T2": GONE, "T3": GONE}


def test_a_beat_is_dated_by_its_time_when_its_threads_said_where_they_are():
    """A beat whose threads said where they are (their ThreadState) is dated by its time, the live
    beat's now and a replayed one's `at`: `at` once held the last thread's place (a dict), which
    `--json` printed as the beat's time and the table's clock could not show."""
    from paths.stack import StackFrame, ThreadState

    state = ThreadState("T0", "A", 10, (StackFrame("heat.py", 88, "exchange", "heat"),))
    judge = Judge(["T0"], {"T0": "A"})
    judge.judge({"T0": 10}, 0.0, lambda missing: Blocked({}, set(), set()))
    before = time.time()
    live = judge.judge({"T0": 10}, 1.0, lambda missing: Blocked({}, set(), set(), set(), {"T0": state}))
    assert type(live.at) is float and before <= live.at <= time.time()
    replayed = judge.judge({"T0": 10}, 2.0, lambda missing: Blocked({}, set(), set(), set(), {"T0": state}), at=123.5)
    assert replayed.at == 123.5
    assert live.threads[0].where == "heat.py:88 in exchange"


def test_a_shown_stack_ends_at_the_program_not_in_a_pure_python_collector():
    """A stack shown by the heartbeat or `eventspace stack` holds no frame of the collectors' own
    Python code (the pure collector, EVENTSPACE_PURE=1, or where the C extension is not built): the
    compiled collector has none, and the innermost frame shown is the program's call, as `where`
    says, with the library it called (mpi4py's Python code, the standard library) left as it is."""
    import eventspace.collector
    import eventspace.mpi.collector
    from paths.stack import StackFrame, from_the_program, where

    runner = StackFrame("/usr/lib/python3.11/runpy.py", 88, "_run_code", "runpy")
    program = StackFrame("/home/u/heat.py", 44, "<module>", "__main__")
    pure = [StackFrame(eventspace.mpi.collector.__file__, 279, "timed", ""),
            StackFrame(eventspace.collector.__file__, 120, "collect", "")]
    library = StackFrame("/usr/lib/python3.11/threading.py", 320, "wait", "threading")
    shown = from_the_program((runner, program, *pure))
    assert shown == (program,) and where(shown) == "heat.py:44 in <module>"
    assert from_the_program((runner, program, library)) == (program, library)


@pytest.mark.parametrize("how, status", [("compute", "computing"), ("sleep", "stalled")])
def test_a_straggler_computing_is_told_from_a_stalled_one_and_says_where(tmp_path, how, status):
    """A thread that holds the others up computing uses the CPU: `computing`, not `stalled`; one asleep
    uses none: `stalled`. Either way its row says where in the program it is, and the others wait."""
    from monitors.heartbeat import COMPUTING

    pm = pathmap_for(ring_app(4), TWO_NODES, name=f"straggler-{how}")
    pm = dataclasses.replace(pm, instrument=Instrument(collectors=(Selector(trees=("count",)),))).validate()
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        with Heartbeat(run.run_file) as hb:
            run.start("programs:straggler", {"thread": "T2", "how": how, "seconds": 30})
            deadline = time.monotonic() + 25
            seen = []
            while True:   # a beat every 0.3 s, as the command's --interval would, until T2 is judged
                beat = {b.thread: b for b in hb.read().threads}
                seen.append(beat["T2"].status)
                if beat["T2"].status == status and all(beat[t].status == WAITING for t in ("T0", "T1", "T3")):
                    break
                assert time.monotonic() < deadline, ({t: b.status for t, b in beat.items()}, seen)
                time.sleep(0.3)
    assert (COMPUTING in seen) == (how == "compute"), seen   # never called computing while asleep
    line = next(i for i, text in enumerate((PROGRAMS / "programs.py").read_text().splitlines(), 1)
                if ("time.sleep(until" if how == "sleep" else "x += 1") in text)
    assert beat["T2"].where.startswith("programs.py:") and beat["T2"].where.endswith("in straggler"), beat["T2"]
    assert abs(int(beat["T2"].where.split(":")[1].split()[0]) - line) <= 1, (beat["T2"].where, line)


@pytest.mark.slow   # 7-12 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_eventspace_stack_names_a_node_whose_gil_a_c_call_holds_and_prints_the_rest(tmp_path):
    import json
    import subprocess
    import sys

    pm = pathmap_for(ring_app(4), TWO_NODES, name="gil")
    pm = dataclasses.replace(pm, instrument=Instrument(collectors=(Selector(trees=("count",)),))).validate()
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        run.start("programs:holds_gil", {"thread": "T2", "seconds": 8})   # T2 is on node B
        until(lambda: not_answering(run.endpoints["B"]), 30, "node B silent: T2 in its C call, holding the GIL")
        started = time.monotonic()
        shown = subprocess.run([sys.executable, "-m", "eventspace.cli", "stack", "--run", run.run_file.path, "--json",
                                "--timeout", "1"], capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
        run.wait(timeout=60)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["not_answering"] == ["B"] and report["gone"] == [], json.dumps(report)
    shown_threads = {t for g in report["groups"] for t in g["threads"]}
    assert shown_threads == {"T0", "T1"}   # node A's threads, waiting in the allreduce
    assert all(g["where"].startswith("programs.py:") for g in report["groups"])
    assert took < 30, took   # named after its timeout, not waited for
