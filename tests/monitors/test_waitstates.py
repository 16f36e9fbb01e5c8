"""Wait states (Scalasca's patterns) found in MPI records: each pattern's definition, the clock bound,
and the same report whatever batches the records come in."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from eventspace import trace
from eventspace.mpi import encoding as e
from monitors.render import waitstates_tables
from monitors.waitstates import ClockBounds, WaitStates
from mpitrace import MS, MpiTrace


def analysed(run: MpiTrace, clock=None, batches=None, within=None):
    states = WaitStates(run.catalogue, clock, within=within)
    records = run.records()
    cuts = [0, *(batches or []), len(records)]
    for lo, hi in zip(cuts, cuts[1:]):
        states.add(records[lo:hi])
    states.finish()
    return states.report()


def waited(report, key: str) -> float:
    """A pattern's certain waiting, ms."""
    return report.pattern(key).waiting_ns / MS


def test_a_receive_posted_before_its_send_waits_until_the_send_begins_late_sender():
    run = MpiTrace(2)
    run.recv(0, 1, 0.0, 7.2)             # r0 waits in MPI_Recv from 0 ms ...
    run.send(1, 0, 7.0, 7.1)             # ... for r1, whose send begins at 7 ms
    run.recv(0, 1, 10.0, 10.5)           # the next message was sent before its receive began: no wait
    run.send(1, 0, 8.0, 8.1)
    report = analysed(run)
    assert waited(report, "late_sender") == 7.0 and report.pattern("late_sender").instances == 1
    assert report.pairs == [[0, 7 * MS], [0, 0]] and report.per_rank[0][0] == 7 * MS
    (top,) = report.top
    assert (top.pattern, top.rank, top.op, top.peer, top.comm, top.calls) == ("late_sender", 0, "MPI_Recv", 1, 0, 1)
    assert report.mpi_ns == round((7.2 + 0.1 + 0.5 + 0.1) * MS)
    assert report.pattern("late_sender").share == pytest.approx(7.0 / 7.9)


def test_a_send_waits_for_its_receive_only_while_it_is_still_in_its_call_late_receiver():
    run = MpiTrace(2)
    run.send(0, 1, 0.0, 4.1, op=e.SSEND)   # synchronous: returns once r1 has posted its receive at 4 ms
    run.recv(1, 0, 4.0, 4.1)
    run.send(0, 1, 5.0, 5.01)              # standard mode, delivered eagerly: it returned before the receive
    run.recv(1, 0, 9.0, 9.1)
    report = analysed(run)
    assert waited(report, "late_receiver") == 4.0 and report.pattern("late_receiver").instances == 1
    assert report.pairs == [[0, 4 * MS], [0, 0]]
    assert waited(report, "late_sender") == 0


def test_a_nonblocking_receive_waits_in_its_wait_until_the_send_began():
    run = MpiTrace(2)
    request = run.post(0, 1, 0.0, 0.1)
    run.send(1, 0, 6.0, 6.1)
    run.wait(0, [request], 2.0, 6.3, op=e.WAIT)          # in MPI_Wait from 2 ms, the send began at 6
    request = run.post(0, 1, 10.0, 10.1)
    run.send(1, 0, 11.0, 11.1)
    run.wait(0, [request], 12.0, 12.1, op=e.WAIT)        # the send began before the Wait: none
    request = run.post(0, 1, 20.0, 20.1)
    run.send(1, 0, 25.0, 25.1)
    run.wait(0, [request], 21.0, 25.3, op=e.TEST)        # a Test never waits, whatever it found
    report = analysed(run)
    assert waited(report, "late_sender") == 4.0 and report.pattern("late_sender").instances == 1
    assert [(t.op, t.peer) for t in report.top] == [("MPI_Wait", 1)]


def test_a_waitall_of_several_receives_waits_for_its_latest_sender_only():
    run = MpiTrace(3)
    first, second = run.post(0, 1, 0.0, 0.1), run.post(0, 2, 0.2, 0.3)
    run.send(1, 0, 6.0, 6.1)
    run.send(2, 0, 8.0, 8.1)
    run.wait(0, [first, second], 2.0, 8.3)
    report = analysed(run)
    assert waited(report, "late_sender") == 6.0 and report.pattern("late_sender").instances == 1
    assert report.pairs[0] == [0, 0, 6 * MS]
    assert report.top[0].op == "MPI_Waitall"


def test_receives_posted_first_get_the_first_messages_whatever_order_they_complete_in():
    # Two Irecvs on one channel: MPI gives the first message to the first posted. The second is
    # waited for first, so its request record comes first; matched by arrival it would take the
    # first message and find no wait.
    run = MpiTrace(2)
    first, second = run.post(0, 1, 0.0, 0.1), run.post(0, 1, 0.2, 0.3)
    run.send(1, 0, 1.0, 1.1)
    run.send(1, 0, 9.0, 9.1)
    run.wait(0, [second], 3.0, 9.3, op=e.WAIT)
    run.wait(0, [first], 9.5, 9.6, op=e.WAIT)
    for batches in (None, [2], [4], [5], [6], [7]):
        report = analysed(run, batches=batches)
        assert waited(report, "late_sender") == 6.0, batches


def test_a_sendrecv_waits_in_its_receive_half_and_its_time_counts_once():
    run = MpiTrace(2)
    run.sendrecv(0, 1, 1, 0.0, 5.1)
    run.sendrecv(1, 0, 0, 5.0, 5.2)
    report = analysed(run)
    assert waited(report, "late_sender") == 5.0 and waited(report, "late_receiver") == 0
    assert report.mpi_ns == round((5.1 + 0.2) * MS)


def test_an_allreduce_waits_for_its_last_member_wait_at_nxn():
    run = MpiTrace(4)
    for i in range(3):   # r2 enters 5 ms after the others, three times
        at = 20.0 * i
        run.collective(e.ALLREDUCE, {r: (at + (5.0 if r == 2 else 0.0), at + 5.1 + 0.01 * r) for r in range(4)})
    report = analysed(run)
    assert waited(report, "wait_nxn") == pytest.approx(3 * 3 * 5.0)
    assert report.pattern("wait_nxn").instances == 9
    assert [row[2] for row in report.pairs] == [15 * MS, 15 * MS, 0, 15 * MS]
    assert sum(map(sum, report.pairs)) == 45 * MS   # every N×N wait caused by r2
    # N×N Completion: after the first member (r0) left; no rank causes it
    assert waited(report, "nxn_completion") == pytest.approx(3 * (0.01 + 0.02 + 0.03))
    assert report.communicators[0]["waiting_ns"]["wait_nxn"] == 45 * MS


def test_a_barrier_waits_for_its_last_member():
    run = MpiTrace(3)
    run.collective(e.BARRIER, {0: (0.0, 4.0), 1: (1.0, 4.0), 2: (3.9, 4.0)})
    report = analysed(run)
    assert waited(report, "wait_barrier") == pytest.approx(3.9 + 2.9)
    assert report.pairs == [[0, 0, round(3.9 * MS)], [0, 0, round(2.9 * MS)], [0, 0, 0]]


def test_a_late_root_makes_a_broadcast_wait_and_an_early_root_waits_in_a_reduce():
    run = MpiTrace(3)
    run.collective(e.BCAST, {0: (4.0, 4.2), 1: (0.0, 4.3), 2: (1.0, 4.4)}, root=0)
    run.collective(e.REDUCE, {0: (10.0, 16.0), 1: (13.0, 13.1), 2: (15.0, 15.1)}, root=0)
    run.collective(e.BCAST, {0: (20.0, 20.1), 1: (21.0, 21.1), 2: (22.0, 22.1)}, root=0)   # root first: none
    report = analysed(run)
    assert waited(report, "late_broadcast") == pytest.approx(4.0 + 3.0)
    assert waited(report, "early_reduce") == pytest.approx(3.0)        # until r1, the first other member, came
    assert report.pairs == [[0, 3 * MS, 0], [4 * MS, 0, 0], [3 * MS, 0, 0]]


def test_a_nonblocking_collective_waits_only_in_its_completion_call_for_the_last_post():
    run = MpiTrace(3)
    # r2 posts last (6 ms): r0 waits in its Wait from 2 ms until then; r1 calls its Wait after it (none).
    run.icollective(e.IALLREDUCE, {0: (0.0, 0.1), 1: (1.0, 1.1), 2: (6.0, 6.1)},
                    {0: (2.0, 6.5), 1: (7.0, 7.1), 2: (6.2, 6.4)})
    run.collective(e.ALLREDUCE, {0: (8.0, 9.1), 1: (9.0, 9.2), 2: (8.5, 9.3)})   # round 1, blocking: r1 last
    for batches in (None, [1], [3], [5], [7], [2, 8]):
        report = analysed(run, batches=batches)
        assert waited(report, "wait_nxn") == pytest.approx(4.0 + 1.0 + 0.5), batches
        assert report.pairs == [[0, 1 * MS, 4 * MS], [0, 0, 0], [0, round(0.5 * MS), 0]], batches
        assert waited(report, "nxn_completion") == pytest.approx(0.1 + 0.1 + 0.1 + 0.2), batches
        assert report.pending["round_records"] == 0 and report.pending["completion_calls"] == 0
    assert [(t.rank, t.op, t.peer) for t in report.top if t.pattern == "wait_nxn"][:1] == [(0, "MPI_Iallreduce", 2)]
    # time in MPI: the posts and the Waits, not the time between them
    assert report.mpi_ns == round((0.1 + 0.1 + 0.1 + 4.5 + 0.1 + 0.2 + 1.1 + 0.2 + 0.8) * MS)


def test_rounds_are_lined_up_per_communicator_and_only_whole_ones_count():
    run = MpiTrace(4, comms=[(1, (2, 3))])
    run.collective(e.ALLREDUCE, {2: (0.0, 2.1), 3: (2.0, 2.2)}, comm=1)
    run.collective(e.ALLREDUCE, {0: (0.0, 9.1), 1: (9.0, 9.2), 2: (3.0, 9.3)})   # r3 never joins round 0 here
    report = analysed(run)
    assert report.communicators[1]["waiting_ns"]["wait_nxn"] == 2 * MS
    assert 0 not in report.communicators or report.communicators[0]["waiting_ns"]["wait_nxn"] == 0
    assert report.pending["round_records"] == 3


def test_a_wait_within_the_clock_bound_between_two_hosts_is_uncertain():
    run = MpiTrace(3, hosts=["a", "a", "b"])
    run.recv(0, 2, 0.0, 1.6)
    run.send(2, 0, 1.5, 1.51)     # 1.5 ms from r2, on host b: within the bound of 2 ms
    run.recv(0, 2, 10.0, 13.1)
    run.send(2, 0, 13.0, 13.01)   # 3 ms: beyond it
    run.recv(0, 1, 20.0, 20.6)
    run.send(1, 0, 20.5, 20.51)   # 0.5 ms from r1, on r0's host: one clock, certain
    clock = ClockBounds(("a", "a", "b"), {"a": 1 * MS, "b": 1 * MS})
    report = analysed(run, clock)
    sender = report.pattern("late_sender")
    assert (sender.waiting_ns, sender.instances) == (round(3.5 * MS), 2)
    assert (sender.uncertain_ns, sender.uncertain_instances) == (round(1.5 * MS), 1)
    assert report.clock == {"hosts": 2, "bound_ns": 2 * MS}
    unknown = analysed(run, ClockBounds(("a", "a", "b"), {"a": None, "b": None}))
    assert (unknown.pattern("late_sender").waiting_ns, unknown.pattern("late_sender").uncertain_ns) == \
        (round(0.5 * MS), round(4.5 * MS))
    assert unknown.clock == {"hosts": 2, "bound_ns": None}


def test_ends_outside_the_view_keep_nothing_waiting():
    run = MpiTrace(3)
    for i in range(5):
        run.send(0, 1, i, i + 0.1)
        run.recv(1, 0, i + 0.5, i + 0.6)
        run.send(0, 2, i, i + 0.1)
    inside = [x.id for x in run.catalogue if x.thread in ("r0", "r1")]
    report = analysed(run, within=inside)
    assert report.pending["sends"] == 0     # r0's sends to r2, whose receives cannot come, are not kept
    assert analysed(run).pending["sends"] == 5


def test_records_of_other_collectors_and_impossible_times_are_left_out():
    run = MpiTrace(2)
    run.recv(0, 1, 0.0, 7.2)
    run.send(1, 0, 7.0, 7.1)
    records = run.records()
    bad = records[:1].copy()
    bad["collector"] = 10_000
    late = records[:1].copy()
    late["t_end"] = 1 << 63
    states = WaitStates(run.catalogue)
    states.add(np.concatenate([bad, records, late]))
    states.finish()
    report = states.report()
    assert report.ignored == 2 and waited(report, "late_sender") == 7.0


def rich_run() -> MpiTrace:
    """Every pattern, nonblocking receives completed out of order, several communicators."""
    run = MpiTrace(4, comms=[(1, (1, 3))])
    run.collective(e.BARRIER, {r: (0.1 * r, 1.0) for r in range(4)})
    for step in range(6):
        at = 10.0 * step + 2
        a, b = run.post(0, 1, at, at + 0.1, tag=step % 2), run.post(0, 1, at + 0.2, at + 0.3, tag=step % 2)
        run.send(1, 0, at + 1.0 + step % 3, at + 1.1 + step % 3, tag=step % 2)
        run.send(1, 0, at + 3.5, at + 3.6, tag=step % 2)
        run.send(2, 3, at, at + 2.0 + step % 2, op=e.SSEND)
        run.recv(3, 2, at + 1.0 + step % 2, at + 2.1 + step % 2)
        run.wait(0, [b], at + 0.5, at + 4.2, op=e.WAIT)
        run.wait(0, [a], at + 4.3, at + 4.4, op=e.WAIT)
        c = run.post(2, 0, at + 0.4, at + 0.5, tag=7)
        run.send(0, 2, at + 4.5, at + 4.6, tag=7)
        run.wait(2, [c], at + 2.5, at + 4.7, op=e.WAITALL)
        run.sendrecv(1, 3, 3, at + 5.0, at + 5.5, tag=9, comm=1)
        run.sendrecv(3, 1, 1, at + 5.4 - step * 0.1, at + 5.6, tag=9, comm=1)
        run.collective(e.ALLREDUCE, {r: (at + 6.0 + (1.0 if r == step % 4 else 0.0), at + 7.1 + 0.01 * r)
                                     for r in range(4)})
        run.collective(e.BCAST, {r: (at + 7.5 + (0.5 if r == 0 else 0.0), at + 8.1) for r in range(4)}, root=0)
        run.collective(e.REDUCE, {1: (at + 8.2, at + 9.0), 3: (at + 8.5 + 0.1 * step, at + 9.1)}, root=1, comm=1)
    return run


def test_a_rich_run_shows_every_pattern():
    report = analysed(rich_run())
    for key in ("late_sender", "late_receiver", "wait_nxn", "nxn_completion", "wait_barrier", "late_broadcast",
                "early_reduce"):
        assert report.pattern(key).waiting_ns > 0, key
    assert report.pending == {"sends": 0, "receives": 0, "completion_calls": 0, "round_records": 0}
    assert report.complete


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(rich_run().rows)), max_size=12))
def test_the_report_is_the_same_whatever_batches_the_records_come_in(cuts):
    run = rich_run()
    assert analysed(run, batches=sorted(cuts)).as_dict() == analysed(run).as_dict()


def test_the_tables_name_the_patterns_the_clock_and_the_top_waits():
    report = analysed(rich_run())
    console = Console(width=200, record=True)
    console.print(waitstates_tables(report))
    text = console.export_text()
    assert "Late Sender" in text and "Wait at N×N" in text and "one clock" in text
    assert "who waits for whom" in text and "MPI_Wait" in text


def test_an_archive_that_is_not_an_mpi_runs_is_told_so_in_one_line(tmp_path, capsys):
    from eventspace.archive import Archive
    from eventspace.cli import main

    path = tmp_path / "not-mpi.sqlite"
    Archive(path, MpiTrace(2).catalogue).close()   # no hosts kept: not written by an MPI run
    assert main(["archive", "waits", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"eventspace archive: {path} is not the archive of an MPI run (`eventspace mpirun --archive`): "
                   "it keeps no ranks' hosts\n")


def mpi_archive(path, run: MpiTrace, hosts=None):
    """An archive of `run`'s records as an MPI run writes it (with its ranks' hosts)."""
    import json

    from eventspace.archive import Archive

    with Archive(path, run.catalogue) as archive:
        archive.append(run.records())
        ranks = len(run.catalogue.threads)
        archive.set_meta("hosts", json.dumps({f"r{r}": (hosts or ["h0"] * ranks)[r] for r in range(ranks)}))
    return path


def test_archive_waits_prints_what_the_analysis_finds_and_refuses_a_bad_top(tmp_path, capsys):
    import json

    from eventspace.cli import main

    path = mpi_archive(tmp_path / "rich.sqlite", rich_run())
    assert main(["archive", "waits", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == analysed(rich_run()).as_dict()
    assert main(["archive", "waits", str(path), "--top", "-1"]) == 2
    assert capsys.readouterr().err == ("eventspace archive: top -1: give how many of the largest waits to list, "
                                       "0 or more\n")


def test_an_archive_whose_hosts_are_damaged_is_told_so_in_one_line(tmp_path, capsys):
    from eventspace.archive import Archive
    from eventspace.cli import main

    path = mpi_archive(tmp_path / "damaged.sqlite", rich_run())
    with Archive(path, rich_run().catalogue) as archive:
        archive.set_meta("hosts", "[1, 2]")
    assert main(["archive", "waits", str(path)]) == 2
    assert capsys.readouterr().err == (f"eventspace archive: {path}: its meta `hosts` is not a JSON object of rank "
                                       "to host name; the archive is damaged (an MPI run writes it)\n")


def test_an_archive_of_ranks_on_two_hosts_reports_their_waits_as_uncertain(tmp_path, capsys):
    import json

    from eventspace.cli import main

    run = MpiTrace(2)
    run.recv(0, 1, 0.0, 7.2)
    run.send(1, 0, 7.0, 7.1)
    path = mpi_archive(tmp_path / "two.sqlite", run, hosts=["a", "b"])
    assert main(["archive", "waits", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["clock"] == {"hosts": 2, "bound_ns": None}
    (sender,) = [p for p in report["patterns"] if p["key"] == "late_sender"]
    assert (sender["waiting_ns"], sender["uncertain_ns"]) == (0, 7 * MS)
    assert main(["archive", "waits", str(path)]) == 0
    assert "whose clock offsets are not known" in capsys.readouterr().out


def test_the_monitor_refuses_a_run_without_mpi_collectors_in_one_line(tmp_path):
    import dataclasses
    import subprocess
    import sys

    from paths import Instrument, Selector, launch
    from runs import ENV, THREE_NODES, pathmap_for, ring_app

    pm = pathmap_for(ring_app(3), THREE_NODES, name="nompi")
    pm = dataclasses.replace(pm, instrument=Instrument(keep=200, collectors=(Selector(at=("source",)),))).validate()
    with launch(pm, env=ENV) as run:
        run.start("programs:ring_forever", {"stop_after": 60, "pause": 0.01})
        shown = subprocess.run([sys.executable, "-m", "eventspace.cli", "monitor", "waits", "--run", run.name],
                               cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 2
    assert shown.stderr.splitlines()[-1] == ("eventspace monitor: run nompi has no MPI collectors: wait states are "
                                             "found in MPI programs' records (`eventspace mpirun`)")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0x0100, 0x0152), st.sampled_from([0, e.REQUEST, e.FREED | e.REQUEST, e.EMPTY, 1]),
                          st.integers(0, 12), st.sampled_from([0, 1, 2, 3, 9, 2**21, e.PEER_ANY, e.PEER_NONE]),
                          st.one_of(st.integers(0, 3), st.integers(0, 2**32 - 1)), st.integers(0, 50),
                          st.one_of(st.integers(0, 1000), st.integers(0, 2**63 - 1))),
                max_size=60),
       st.integers(min_value=0, max_value=60))
def test_forged_records_never_break_the_analysis(rows, cut):
    """Anyone who may write a trace element may write anything into it: whatever the records say,
    the analysis reports (what it cannot use it leaves out or keeps waiting), and never raises."""
    run = MpiTrace(3, comms=[(1, (0, 2))])
    records = np.array([(op, flags, cid, peer, arg, 8, start, start + length)
                        for op, flags, cid, peer, arg, length, start in rows], dtype=trace.DTYPE)
    states = WaitStates(run.catalogue)
    states.add(records[:cut])
    states.add(records[cut:])
    states.finish()
    report = states.report()
    assert report.records == len(records) and report.complete
    assert all(p.waiting_ns >= 0 and p.uncertain_ns >= 0 for p in report.patterns)
