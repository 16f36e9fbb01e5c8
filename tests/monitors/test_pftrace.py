"""The native Perfetto trace (.pftrace), decoded with the official protos: tracks, slices, flows,
interning and incremental timestamps on one sequence, and the same content as the JSON trace."""

from __future__ import annotations

import os

import pytest
from synthetic import T0
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from pftrace_decode import decode as _decode

from eventspace.clock import WallClock
from monitors.perfetto import to_perfetto
from monitors.pftrace import DELTA_CLOCK, write_pftrace

@pytest.fixture
def written(tmp_path, records, catalogue):
    summary = write_pftrace(tmp_path / "trace.pftrace", records, catalogue)
    return summary, _decode(summary.path)


def _records_only(decoded):
    return [s for s in decoded.slices if s.name != "read"]


def test_a_process_per_node_and_a_named_thread_track_per_thread(written):
    summary, d = written
    assert sorted(name for _, name in d.processes.values()) == ["A", "B"]
    assert {uuid: pid for uuid, (pid, _) in d.processes.items()} == {1: 1, 2: 2}   # uuid = pid
    node = {pid: name for pid, name in d.processes.values()}
    names = {(node[pid], name) for pid, _, name, _ in d.threads.values()}
    assert {("A", "T0"), ("A", "T1"), ("B", "T2"), ("B", "T3")} <= names
    assert {("A", "element row_0_1"), ("B", "element row_2_3"), ("A", "tree count"), ("B", "tree count")} <= names
    assert ("A", "T0 (overlap 1)") in names
    # A thread track's uuid is its tid, above every pid; ranks keep the JSON trace's order.
    assert all(uuid == tid and tid > len(d.processes) for uuid, (_, tid, _, _) in d.threads.items())
    assert sorted(rank for *_, rank in d.threads.values()) == list(range(len(d.threads)))
    assert (summary.tracks, summary.processes) == (len(d.threads), 2)
    assert {s.track for s in d.slices} <= set(d.threads)


def test_a_slice_per_record_with_the_json_traces_names_args_and_nanoseconds(written, records, catalogue):
    summary, d = written
    slices = _records_only(d)
    assert len(slices) == len(records) == summary.slices
    track_name = {uuid: name for uuid, (_, _, name, _) in d.threads.items()}
    got = sorted((track_name[s.track], s.ts, s.end - s.ts, s.name, sorted(s.args.items())) for s in slices)
    # The JSON trace of the same records: the same tracks, names and args, times in µs from t0.
    doc = to_perfetto(records, catalogue)
    json_tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    t0 = int(doc["otherData"]["t0_ns"])
    expected = sorted((json_tracks[e["pid"], e["tid"]], t0 + int(e["ts"] * 1000), int(e["dur"] * 1000), e["name"],
                       sorted(e["args"].items())) for e in doc["traceEvents"] if e["ph"] == "X")
    assert got == expected
    # Absolute nanoseconds on the records' clock.
    first = min(slices, key=lambda s: s.ts)
    assert first.ts == int(records["t_start"].min()) == T0 + 100
    error = next(s for s in slices if s.args.get("error"))
    assert error.name == "observe [error]" and error.args["collector"] == 23


def test_flows_start_on_each_move_and_end_where_its_observe_returned(written, records, catalogue, flows):
    summary, d = written
    assert set(d.flow_starts) == set(d.flow_ends) == set(range(1, len(flows) + 1))
    assert summary.flows == len(flows)
    got = set()
    for fid, start in d.flow_starts.items():
        end = d.flow_ends[fid]
        assert start.name == "move" and end.name == "read" and end.instant
        assert end.ts >= start.ts, f"flow {fid} ends before it starts"
        # The read instant sits where an observe on its track returned, and that observe read the tuple.
        observe = next(s for s in _records_only(d) if s.track == end.track and s.end == end.ts and s.name == "observe")
        assert (observe.args["element"], observe.args["index"]) == (start.args["element"], start.args["index"])
        got.add((start.args["collector"], observe.args["collector"], start.args["element"], start.args["index"]))
    assert got == flows


def test_a_flow_to_an_observe_that_blocked_before_the_move_still_points_forward(tmp_path, make, catalogue):
    # T3 starts observing tuple 9 of row_2_3 at 0 and blocks; T2 moves it in at 300-400; T3's
    # observe returns at 800.
    summary = write_pftrace(tmp_path / "t.pftrace", make([(21, "observe", 9, 0, 800), (17, "move", 9, 300, 400)]),
                            catalogue)
    d = _decode(summary.path)
    assert list(d.flow_starts) == [1]
    start, end = d.flow_starts[1], d.flow_ends[1]
    assert (start.name, start.ts - T0) == ("move", 300)
    assert (end.name, end.ts - T0) == ("read", 800)
    observe = next(s for s in d.slices if s.name == "observe")
    assert (observe.ts - T0, observe.end - T0, observe.track) == (0, 800, end.track)


def test_events_come_in_time_order_and_nest_per_track(written):
    _, d = written
    assert d.times == sorted(d.times)
    # Each track's slices nest or follow each other (the decoder's stacks already required it).
    for track in {s.track for s in d.slices}:
        spans = sorted(((s.ts, -s.end) for s in d.slices if s.track == track and not s.instant))
        open_ends = []
        for start, neg_end in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or open_ends[-1] >= -neg_end
            open_ends.append(-neg_end)


def test_slices_that_start_or_end_together_keep_their_own_times(tmp_path, make, catalogue):
    # On T0's track: an outer and an inner slice starting at one nanosecond, another pair ending at
    # one nanosecond, and a slice starting where one ends.
    rows = [(1, "move", 1, 100, 300), (1, "move", 2, 100, 500), (1, "move", 3, 600, 900),
            (1, "move", 4, 700, 900), (1, "move", 5, 900, 950)]
    d = _decode(write_pftrace(tmp_path / "t.pftrace", make(rows), catalogue).path)
    spans = {s.args["index"]: (s.ts - T0, s.end - T0) for s in d.slices}
    assert spans == {1: (100, 300), 2: (100, 500), 3: (600, 900), 4: (700, 900), 5: (900, 950)}
    assert len({s.track for s in d.slices}) == 1


def test_a_record_that_took_no_time_is_an_instant(tmp_path, make, catalogue):
    summary = write_pftrace(tmp_path / "t.pftrace",
                            make([(1, "move", 3, 100, 200), (1, "move", 4, 200, 200), (9, "observe", 4, 150, 200)]),
                            catalogue)
    d = _decode(summary.path)
    instant = next(s for s in d.slices if s.args.get("index") == 4 and s.name == "move")
    assert instant.instant and instant.ts == instant.end == T0 + 200
    assert len(_records_only(d)) == 3 and d.flow_ends[1].ts == T0 + 200 >= d.flow_starts[1].ts


def test_the_clock_snapshot_makes_monotonic_the_trace_clock_and_dates_it(tmp_path, records, catalogue):
    recorded = WallClock(monotonic_ns=T0, realtime_ns=1_700_000_000_000_000_000)
    summary = write_pftrace(tmp_path / "t.pftrace", records, catalogue, recorded=recorded)
    clocks = _decode(summary.path).clocks
    assert clocks.primary_trace_clock == pb.BUILTIN_CLOCK_MONOTONIC
    by_id = {c.clock_id: c for c in clocks.clocks}
    t0 = int(records["t_start"].min())
    assert by_id[pb.BUILTIN_CLOCK_MONOTONIC].timestamp == t0
    assert by_id[DELTA_CLOCK].timestamp == t0 and by_id[DELTA_CLOCK].is_incremental
    assert by_id[pb.BUILTIN_CLOCK_REALTIME].timestamp == 1_700_000_000_000_000_000 + t0 - T0
    # Without a recording time, no wall clock is claimed.
    summary = write_pftrace(tmp_path / "u.pftrace", records, catalogue)
    assert pb.BUILTIN_CLOCK_REALTIME not in {c.clock_id for c in _decode(summary.path).clocks.clocks}


def test_a_large_trace_is_streamed_in_bundles_under_the_bound(tmp_path, make, catalogue):
    # 30,000 moves of T0 and the observes of T1 that read them, each a flow.
    rows = []
    for k in range(15_000):
        rows += [(1, "move", k, 1000 * k, 1000 * k + 300), (9, "observe", k, 1000 * k + 100, 1000 * k + 900)]
    summary = write_pftrace(tmp_path / "big.pftrace", make(rows), catalogue)
    d = _decode(summary.path)
    assert d.bundles > 1 and summary.nbytes == (tmp_path / "big.pftrace").stat().st_size
    assert len(_records_only(d)) == 30_000 and len(d.flow_starts) == len(d.flow_ends) == 15_000
    assert all(d.flow_ends[fid].ts == T0 + 1000 * (fid - 1) + 900 for fid in (1, 7_500, 15_000))


def test_empty_and_unknown_collectors(tmp_path, make, catalogue):
    d = _decode(write_pftrace(tmp_path / "e.pftrace", make([]), catalogue).path)
    assert (d.slices, d.threads, d.processes) == ([], {}, {})
    d = _decode(write_pftrace(tmp_path / "u.pftrace", make([(999, "observe", 0, 0, 10)]), catalogue).path)
    assert [name for _, name in d.processes.values()] == ["(unknown)"]
    assert [name for _, _, name, _ in d.threads.values()] == ["collector 999"]
    assert [(s.name, s.args) for s in d.slices] == [("observe", {"collector": 999, "index": 0, "nbytes": 16})]


def test_the_file_is_written_whole_or_not_at_all(tmp_path, records, catalogue):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        write_pftrace(tmp_path / "missing" / "t.pftrace", records, catalogue)
    # A directory in the way: the finished file cannot be renamed into place, and nothing is left.
    (tmp_path / "t.pftrace").mkdir()
    (tmp_path / "t.pftrace" / "keep").write_text("x")
    with pytest.raises(OSError):
        write_pftrace(tmp_path / "t.pftrace", records, catalogue)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.pftrace"]
    assert [p.name for p in (tmp_path / "t.pftrace").iterdir()] == ["keep"]


def test_the_same_input_gives_the_same_file(tmp_path, records, catalogue):
    a = write_pftrace(tmp_path / "a.pftrace", records, catalogue).path.read_bytes()
    assert a == write_pftrace(tmp_path / "b.pftrace", records.copy(), catalogue).path.read_bytes()


def test_write_never_writes_through_a_link_planted_beside_the_trace(tmp_path, records, catalogue):
    victim = tmp_path / "victim"
    victim.write_bytes(b"the user's own file")
    os.symlink(victim, tmp_path / f".t.pftrace.{os.getpid()}.tmp")   # where a pid-named temporary would go
    summary = write_pftrace(tmp_path / "t.pftrace", records, catalogue)
    assert victim.read_bytes() == b"the user's own file"
    assert not summary.path.is_symlink() and _records_only(_decode(summary.path))
