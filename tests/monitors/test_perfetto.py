"""Perfetto / Chrome trace JSON: valid by the format's rules, a process per node, a track per
thread, a slice per record, and flow arrows from each move to the observes that read its tuple."""

from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest

from eventspace import trace
from monitors.perfetto import InvalidTrace, to_perfetto, validate, write_perfetto
from monitors.slices import tuple_flows


def _index(doc):
    """(processes by pid, track names by (pid, tid), slices, flow events by id)."""
    processes, tracks, slices, flows = {}, {}, [], {}
    for ev in doc["traceEvents"]:
        if ev["ph"] == "M" and ev["name"] == "process_name":
            processes[ev["pid"]] = ev["args"]["name"]
        elif ev["ph"] == "M" and ev["name"] == "thread_name":
            tracks[ev["pid"], ev["tid"]] = ev["args"]["name"]
        elif ev["ph"] == "X":
            slices.append(ev)
        elif ev["ph"] in "stf":
            flows.setdefault(ev["id"], []).append(ev)
    return processes, tracks, slices, flows


def _ns(us):
    return int(us * 1000)


def _bound(slices, ev):
    """The slice a flow's start binds to: on its track, starting at its ts (they are written so)."""
    found = [s for s in slices if (s["pid"], s["tid"], s["ts"]) == (ev["pid"], ev["tid"], ev["ts"])]
    assert found, f"flow event {ev} binds to no slice"
    return max(found, key=lambda s: -s["dur"])   # the outermost one starting there


def _returned(doc, slices, ev):
    """The slice a flow's end belongs to: the one on its track that ends where the `f` sits,
    on a `read` instant written just before it."""
    where = (ev["pid"], ev["tid"], ev["ts"])
    events = doc["traceEvents"]
    before = events[events.index(ev) - 1]
    assert before["ph"] in "if" and (before["pid"], before["tid"], before["ts"]) == where
    assert any(e["ph"] == "i" and e["name"] == "read" and (e["pid"], e["tid"], e["ts"]) == where for e in events)
    found = [s for s in slices if (s["pid"], s["tid"]) == where[:2]
             and _ns(s["ts"]) + _ns(s["dur"]) == _ns(ev["ts"])]
    assert found, f"flow end {ev} is at the end of no slice"
    return max(found, key=lambda s: -s["dur"])


def test_the_trace_passes_validation(records, catalogue):
    doc = to_perfetto(records, catalogue)
    assert validate(doc) == []
    assert doc["otherData"]["title"] == "toy-monitors"


def test_one_process_per_node_and_a_named_track_per_thread(records, catalogue):
    processes, tracks, slices, _ = _index(to_perfetto(records, catalogue))
    assert sorted(processes.values()) == ["A", "B"]
    pid = {name: p for p, name in processes.items()}
    names = {(processes[p], name) for (p, _), name in tracks.items()}
    assert {("A", "T0"), ("A", "T1"), ("B", "T2"), ("B", "T3")} <= names
    assert {("A", "element row_0_1"), ("B", "element row_2_3"), ("A", "tree count"), ("B", "tree count")} <= names
    # Every slice is on a named track; track ids never repeat a process id.
    assert all((s["pid"], s["tid"]) in tracks for s in slices)
    assert not {tid for _, tid in tracks} & set(processes)
    # T2's events are in node B's process.
    t2 = next(tid for (p, tid), name in tracks.items() if name == "T2")
    assert all(s["pid"] == pid["B"] for s in slices if s["tid"] == t2)


def test_a_slice_per_record_with_its_names_and_times_from_the_earliest(records, catalogue):
    _, _, slices, _ = _index(to_perfetto(records, catalogue))
    assert len(slices) == len(records)
    assert min(int(s["ts"] * 1000) for s in slices) == 0     # ns, as a reader truncates them
    t0 = int(records["t_start"].min())
    by_key = {(s["args"]["collector"], int(s["ts"] * 1000)): s for s in slices}
    for r in records:
        s = by_key[int(r["collector"]), int(r["t_start"]) - t0]
        assert s["name"].split(" ")[0] == trace.OP_NAMES[int(r["op"])]
        assert int(s["dur"] * 1000) == int(r["t_end"]) - int(r["t_start"])
        entry = catalogue[int(r["collector"])]
        assert s["args"]["role"] == entry.role
        assert s["args"].get("element") == entry.element and s["args"].get("tree") == entry.tree
    move = next(s for s in slices if s["args"]["collector"] == 1)
    assert move["args"]["index"] == 5 and move["args"]["nbytes"] == 16


def test_error_events_are_marked(records, catalogue):
    _, _, slices, _ = _index(to_perfetto(records, catalogue))
    errors = [s for s in slices if s["args"].get("error")]
    assert len(errors) == 1
    assert errors[0]["name"] == "observe [error]" and errors[0]["args"]["collector"] == 23


def test_flows_join_each_move_to_the_observe_that_read_its_tuple(records, catalogue, flows):
    doc = to_perfetto(records, catalogue)
    _, _, slices, flow_events = _index(doc)
    got = set()
    for fid, events in flow_events.items():
        phases = sorted(e["ph"] for e in events)
        assert phases == ["f", "s"], f"flow {fid}: {phases}"
        start = _bound(slices, next(e for e in events if e["ph"] == "s"))
        end_event = next(e for e in events if e["ph"] == "f")
        assert end_event["bp"] == "e"
        end = _returned(doc, slices, end_event)
        assert (start["name"], end["name"]) == ("move", "observe")
        assert start["args"]["element"] == end["args"]["element"]
        assert start["args"]["index"] == end["args"]["index"]
        got.add((start["args"]["collector"], end["args"]["collector"], start["args"]["element"],
                 start["args"]["index"]))
    assert got == flows
    assert sorted(flow_events) == list(range(1, len(flows) + 1))


def test_a_flow_ends_where_the_observe_returned_not_before_the_move(make, catalogue):
    # T3 starts observing tuple 9 of row_2_3 at 0 and blocks; T2 moves it in at 300-400; T3's
    # observe returns at 800. The arrow must run from the move (300) to the return (800).
    doc = to_perfetto(make([(21, "observe", 9, 0, 800), (17, "move", 9, 300, 400)]), catalogue)
    assert validate(doc) == []
    _, _, slices, flow_events = _index(doc)
    assert list(flow_events) == [1]
    start = next(e for e in flow_events[1] if e["ph"] == "s")
    end = next(e for e in flow_events[1] if e["ph"] == "f")
    assert _ns(end["ts"]) >= _ns(start["ts"]), "the flow ends before it starts"
    assert (_ns(start["ts"]), _ns(end["ts"])) == (300, 800)
    assert _returned(doc, slices, end)["name"] == "observe"


def test_no_flow_ends_before_it_starts(records, catalogue):
    _, _, _, flow_events = _index(to_perfetto(records, catalogue))
    for fid, events in flow_events.items():
        start = next(e["ts"] for e in events if e["ph"] == "s")
        assert all(e["ts"] >= start for e in events if e["ph"] == "f"), f"flow {fid}"


def test_an_unmatched_move_gets_no_flow(records, catalogue):
    pairs = tuple_flows(records, catalogue)
    unmatched = [i for i, r in enumerate(records) if r["collector"] == 1 and r["arg"] == 6]
    assert unmatched and not any(m in unmatched for m, _ in pairs)
    assert all(records[m]["op"] == trace.OP_CODES["move"] for m, _ in pairs)


def test_sink_records_carry_the_flow_when_no_thread_saw_the_operation(make, catalogue):
    recs = make([(2, "move", 3, 0, 100), (2, "observe", 3, 200, 300), (2, "observe", 4, 400, 500),
                 (2, "move", 3, 600, 700, trace.ERROR)])
    assert tuple_flows(recs, catalogue) == [(0, 1)]


def test_overlapping_slices_move_to_an_overflow_track_and_still_nest(records, catalogue):
    doc = to_perfetto(records, catalogue)
    _, tracks, slices, _ = _index(doc)
    assert {"T0 (overlap 1)", "element row_2_3 (overlap 1)", "tree count (overlap 1)"} <= set(tracks.values())
    overflow = next(k for k, name in tracks.items() if name == "T0 (overlap 1)")
    main = next(k for k, name in tracks.items() if name == "T0")
    assert overflow[0] == main[0]    # the same node's process
    on_overflow = [s for s in slices if (s["pid"], s["tid"]) == overflow]
    assert [s["args"]["collector"] for s in on_overflow] == [7]
    # The same records with the overlap removed need no overflow track.
    moved = records.copy()
    moved["t_start"][moved["collector"] == 7] += 1000
    moved["t_end"][moved["collector"] == 7] += 1000
    assert "T0 (overlap 1)" not in _index(to_perfetto(moved, catalogue))[1].values()


def test_the_same_input_gives_the_same_file(records, catalogue):
    assert json.dumps(to_perfetto(records, catalogue)) == json.dumps(to_perfetto(records.copy(), catalogue))


def test_write_gives_a_json_file_that_loads(tmp_path, records, catalogue):
    out = tmp_path / "trace.json"
    doc = write_perfetto(out, records, catalogue, title="run 1")
    loaded = json.loads(out.read_text())
    assert loaded == json.loads(json.dumps(doc))
    assert loaded["otherData"]["title"] == "run 1"
    assert validate(loaded) == []
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]   # no temporary left behind


def test_write_never_writes_through_a_link_planted_beside_the_trace(tmp_path, records, catalogue):
    out = tmp_path / "trace.json"
    victim = tmp_path / "victim"
    victim.write_text("the user's own file")
    os.symlink(victim, tmp_path / f".trace.json.{os.getpid()}.tmp")   # where a pid-named temporary would go
    write_perfetto(out, records, catalogue)
    assert victim.read_text() == "the user's own file"
    assert not out.is_symlink() and validate(json.loads(out.read_text())) == []


def test_nanosecond_edges_nest_as_a_reader_truncates_them(make, catalogue):
    # Times whose microsecond values are not exact in binary: a child ending with its parent
    # must still nest once ts * 1000 is truncated, without being sent to an overflow track.
    rows = []
    for k in range(200):
        base = 1_000 * k + 7
        rows += [(1, "move", k, base, base + 567), (1, "move", k, base + 1, base + 567)]
    doc = to_perfetto(make(rows), catalogue)
    assert validate(doc) == []
    assert list(_index(doc)[1].values()) == ["T0"]


def test_empty_and_unknown_collectors(make, catalogue):
    assert validate(to_perfetto(make([]), catalogue)) == []
    doc = to_perfetto(make([(999, "observe", 0, 0, 10)]), catalogue)
    processes, tracks, slices, _ = _index(doc)
    assert validate(doc) == [] and list(processes.values()) == ["(unknown)"]
    assert list(tracks.values()) == ["collector 999"] and len(slices) == 1


# -- the validator catches what the format forbids --------------------------------------------

def _slice(ts, dur, tid=10, **extra):
    return {"ph": "X", "name": "x", "cat": "c", "ts": ts, "dur": dur, "pid": 1, "tid": tid, **extra}


@pytest.mark.parametrize("events, expected", [
    ([_slice(0, 10), _slice(5, 10)], "without nesting"),
    ([_slice(-1, 10)], "ts must be a number >= 0"),
    ([{"ph": "X", "name": "x", "ts": 0, "dur": 1, "pid": 1}], "pid and tid must be integers"),
    ([_slice(0, -1)], "dur must be a number >= 0"),
    ([{"name": "x"}], "string `ph`"),
    ([_slice(0, 10), {"ph": "s", "id": 1, "name": "t", "cat": "c", "ts": 1, "pid": 1, "tid": 10}], "no end"),
    ([_slice(0, 10), {"ph": "f", "bp": "e", "id": 1, "name": "t", "cat": "c", "ts": 1, "pid": 1, "tid": 10}],
     "0 starts"),
    ([_slice(0, 10), {"ph": "s", "id": 1, "name": "t", "cat": "c", "ts": 20, "pid": 1, "tid": 10},
      {"ph": "f", "bp": "e", "id": 1, "name": "t", "cat": "c", "ts": 5, "pid": 1, "tid": 10}], "binds to no slice"),
    ([{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {}}], "args.name"),
    ([{"ph": "Q", "ts": 0, "pid": 1, "tid": 1}], "unknown phase"),
])
def test_validate_reports_broken_rules(events, expected):
    problems = validate({"traceEvents": events})
    assert any(expected in p for p in problems), problems


def test_validate_catches_a_broken_export(records, catalogue):
    doc = to_perfetto(records, catalogue)
    broken = copy.deepcopy(doc)
    overflow = {ev["tid"] for ev in broken["traceEvents"]
                if ev["ph"] == "M" and ev.get("args", {}).get("name") == "T0 (overlap 1)"}
    main = next(ev["tid"] for ev in broken["traceEvents"]
                if ev["ph"] == "M" and ev.get("args", {}).get("name") == "T0")
    for ev in broken["traceEvents"]:
        if ev["ph"] != "M" and ev["tid"] in overflow:
            ev["tid"] = main   # undo the nesting fix
    assert any("without nesting" in p for p in validate(broken))
    assert validate({"events": []}) and validate(np.zeros(1))


def test_write_refuses_an_invalid_trace(tmp_path, records, catalogue, monkeypatch):
    from monitors import perfetto

    monkeypatch.setattr(perfetto, "validate", lambda doc: ["event 3: broken"])
    with pytest.raises(InvalidTrace, match="event 3: broken"):
        write_perfetto(tmp_path / "t.json", records, catalogue)
    assert not list(tmp_path.iterdir())
