"""System summaries in the monitors: counter tracks in both Perfetto exports, rows of an archive, bar rows
of the dashboard, and SystemMon on a live run."""

import dataclasses
import json

import numpy as np
import pytest

from eventspace import system, trace
from monitors.archive import Archive
from monitors.dashboard import DashboardState
from monitors.perfetto import to_perfetto, validate
from monitors.pftrace import write_pftrace
from monitors.render import render, system_bars
from synthetic import T0
from monitors.system import SystemMon
from paths import Instrument, Selector, launch
from pftrace_decode import decode
from polling import until
from runs import ENV, THREE_NODES, pathmap_for, ring_app
from test_render import text

MS = 1_000_000


def sample(catalogue, node, start_ms, values, threads=()):
    """One sample of `node` over [start, start + 100 ms]: {metric: value}, and (thread, user ns, system ns)."""
    cid = catalogue.system_of(node).id
    index = {name: i for i, (name, _) in enumerate(catalogue.threads, 1)}
    rows = [(metric, 0, value) for metric, value in values.items()]
    for thread, user, sys_ in threads:
        rows += [(system.CPU_USER, index[thread], user), (system.CPU_SYSTEM, index[thread], sys_)]
    out = np.zeros(len(rows), dtype=trace.DTYPE)
    for i, (metric, element, value) in enumerate(rows):
        out[i] = (metric, trace.SYSTEM, cid, element, value & 0xFFFFFFFF, value >> 32,
                  T0 + start_ms * MS, T0 + (start_ms + 100) * MS)
    return out


@pytest.fixture(scope="module")
def samples(catalogue):
    a = {system.CPU_USER: 50 * MS, system.CPU_SYSTEM: 10 * MS, system.RSS: 5 << 32, system.MSGS_IN: 300,
         system.BYTES_IN: 30_000, system.MSGS_OUT: 200, system.BYTES_OUT: 10_000}
    return np.concatenate([sample(catalogue, "A", 0, a, [("T0", 40 * MS, 0), ("T1", 10 * MS, 10 * MS)]),
                           sample(catalogue, "A", 100, a),
                           sample(catalogue, "B", 0, {system.CPU_USER: 100 * MS, system.RSS: 64 << 20})])


def test_samples_read_back_as_rates_per_node(catalogue, samples):
    first, b, second = system.samples(samples, catalogue)   # by interval end, then node
    assert (first.node, b.node, second.node) == ("A", "B", "A")
    assert first.cpu_user == pytest.approx(0.5) and first.cpu_system == pytest.approx(0.1)
    assert first.rss_bytes == 5 << 32                       # over 32 bits: arg and nbytes together
    assert first.msgs_in == pytest.approx(3_000) and first.bytes_out == pytest.approx(100_000)
    assert first.threads == {"T0": pytest.approx((0.4, 0.0)), "T1": pytest.approx((0.1, 0.1))}
    assert system.newest(samples, catalogue)["A"].t_start == second.t_start


def test_the_json_trace_shows_samples_as_counters_of_each_nodes_process(catalogue, records, samples):
    doc = to_perfetto(np.concatenate([records, samples]), catalogue)
    assert validate(doc) == []
    pids = {e["args"]["name"]: e["pid"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == len(samples)
    assert not any(e["ph"] == "X" and e["name"].startswith("cpu") for e in doc["traceEvents"])
    by_name = {(e["pid"], e["name"]): e["args"]["value"] for e in counters if e["ts"] < 1}   # the first sample
    assert by_name[(pids["A"], "cpu user (cores)")] == pytest.approx(0.5)
    assert by_name[(pids["A"], "T1 cpu system (cores)")] == pytest.approx(0.1)
    assert by_name[(pids["A"], "rss (bytes)")] == 5 << 32
    # A node with only samples gets a process of its own.
    alone = to_perfetto(samples[samples["collector"] == catalogue.system_of("B").id], catalogue)
    assert validate(alone) == [] and [e["args"]["name"] for e in alone["traceEvents"]
                                      if e.get("name") == "process_name"] == ["B"]


def test_the_native_trace_has_counter_tracks_under_each_nodes_process(catalogue, records, samples, tmp_path):
    out = tmp_path / "t.pftrace"
    written = write_pftrace(out, np.concatenate([records, samples]), catalogue)
    assert written.counters == len(samples) and written.slices == len(records)
    d = decode(out)
    process = {uuid: name for uuid, (_, name) in d.processes.items()}
    tracks = {uuid: (process[parent], name) for uuid, (parent, name) in d.counter_tracks.items()}
    assert len(set(tracks.values())) == len(tracks) == 7 + 4 + 2   # A's seven metrics, T0's and T1's two, B's two
    values = {(tracks[uuid], ts): value for uuid, ts, value in d.counters}
    assert values[(("A", "cpu user (cores)"), T0)] == pytest.approx(0.5)
    assert values[(("A", "T0 cpu user (cores)"), T0)] == pytest.approx(0.4)
    assert values[(("B", "rss (bytes)"), T0)] == 64 << 20
    assert values[(("A", "messages in /s"), T0 + 100 * MS)] == pytest.approx(3_000)
    assert sorted(d.times) == d.times                    # counters take their place in time order
    assert len(d.slices) >= len(records)


def test_an_archive_keeps_samples_with_their_node_and_thread(catalogue, records, samples, tmp_path):
    with Archive(tmp_path / "a.sqlite", catalogue) as archive:
        archive.append(np.concatenate([records, samples]))
    with Archive.open(tmp_path / "a.sqlite") as archive:
        _, rows = archive.query("SELECT node, thread, op_name, arg FROM events WHERE role = 'system' AND thread "
                                "IS NOT NULL ORDER BY thread, op_name")
        assert rows == [("A", "T0", "cpu_system_ns", 0), ("A", "T0", "cpu_user_ns", 40 * MS),
                        ("A", "T1", "cpu_system_ns", 10 * MS), ("A", "T1", "cpu_user_ns", 10 * MS)]
        assert archive.catalogue.threads == catalogue.threads and archive.catalogue.system == catalogue.system
        assert system.samples(archive.records(), archive.catalogue) == system.samples(samples, catalogue)


def test_the_dashboard_draws_a_bar_row_per_node(catalogue, samples):
    shown = list(system.newest(samples, catalogue).values())
    out = text(system_bars(shown), width=160)
    row_a = next(line for line in out.splitlines() if line.strip().startswith("A "))
    assert "0.60 (0.50 + 0.10)" in row_a and "20,480 MiB" in row_a and "5,000 msg/s" in row_a
    assert row_a.count("█") > 0
    frame = text(render(DashboardState("board", 3.0, nodes=shown)), width=200)
    assert "nodes: cpu, memory, communication per interval" in frame and "1.00 (1.00 + 0.00)" in frame
    assert "sampling is off" in text(render(DashboardState("board", 3.0)), width=200)


@pytest.mark.slow   # 6-7 s: make test-fast stays within its 3 minutes
def test_system_mon_follows_every_nodes_newest_sample(tmp_path):
    pm = pathmap_for(ring_app(6), THREE_NODES, rule="block", name="sysmon")
    pm = dataclasses.replace(pm, instrument=Instrument(collectors=(Selector(at=("source",)),))).validate()
    with launch(pm, run_dir=tmp_path, env=ENV) as run:
        run.start("programs:ring_forever", {"stop_after": 3, "pause": 0.002})
        with SystemMon(run) as mon:
            # A node's first sample comes two intervals after it started.
            first = until(lambda: {s.node: s for s in mon.read().nodes}, 30, "a sample of every node",
                          holds=lambda seen: len(seen) == 3)
            later = until(lambda: {s.node: s for s in mon.read().nodes}, 30, "a newer sample of every node",
                          holds=lambda seen: len(seen) == 3 and all(seen[n].t_end > first[n].t_end for n in seen))
        run.wait()
    assert set(first) == set(later) == {"A", "B", "C"}
    assert all(later[n].t_end > first[n].t_end for n in later)
    assert json.dumps([s.as_dict() for s in later.values()])
