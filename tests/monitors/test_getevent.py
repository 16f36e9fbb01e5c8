"""GetEventMon on a live run: an archive that loses nothing, a Perfetto trace that loads, the CLI."""

import json
import time

import numpy as np
import pytest

from eventspace import trace
from eventspace.cli import main
from monitors.archive import Archive
from monitors.getevent import GetEventMon, format_of
from monitors.perfetto import validate
from paths import Pathmap, launch
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from pftrace_decode import decode
from runs import REPO

TOY = REPO / "pathmaps" / "windtunnel-toy.yaml"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The toy wind tunnel (1 node, 4 threads, every path and tree point collected), running."""
    run_dir = tmp_path_factory.mktemp("runs")
    with launch(Pathmap.load(TOY), run_dir=run_dir) as run:
        run.start("windtunnel", {"size": 32, "steps": 1_000_000, "until": time.time() + 60})
        yield run
        run.kill("A")


def _stream(mon, pulls: int, pause: float) -> int:
    """Pull `pulls` times, `pause` seconds apart; the events streamed."""
    streamed = 0
    for _ in range(pulls):
        streamed += mon.read().events
        time.sleep(pause)   # the monitor's pace, as --interval sets it
    return streamed


def test_an_archive_holds_every_event_streamed_and_counts_the_discarded(live, tmp_path):
    out = tmp_path / "events.sqlite"
    with GetEventMon(live, "all", out) as mon:
        streamed = _stream(mon, 6, 0.1)
        discarded = mon.stats.discarded
    assert streamed > 100
    with Archive.open(out) as archive:
        assert len(archive) == streamed == archive.info.tuples
        assert archive.info.discarded == discarded
        columns, rows = archive.query("SELECT DISTINCT thread FROM events WHERE thread IS NOT NULL ORDER BY thread")
        assert [r[0] for r in rows] == ["T0", "T1", "T2", "T3"]
        stored = archive.records()
    assert stored.dtype == trace.DTYPE and len(np.unique(stored)) == len(stored)


def test_a_perfetto_trace_of_a_live_run_is_valid_and_links_moves_to_observes(live, tmp_path):
    out = tmp_path / "trace.json"
    with GetEventMon(live, "thread:T0 | thread:T1", out, tree="per-node", placement="near") as mon:
        for _ in range(3):
            mon.read()
            time.sleep(0.05)   # the monitor's pace, as --interval sets it
    doc = json.loads(out.read_text())
    assert validate(doc) == []
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"T0", "T1"} <= names
    assert any(e["ph"] == "s" for e in doc["traceEvents"])  # T0 and T1 trade rows: flows exist


def test_a_native_perfetto_trace_of_a_live_run_holds_every_event_streamed(live, tmp_path):
    out = tmp_path / "trace.pftrace"
    with GetEventMon(live, "thread:T0 | thread:T1", out) as mon:
        streamed = _stream(mon, 3, 0.05)
    d = decode(out)
    assert {"T0", "T1"} <= {name for _, _, name, _ in d.threads.values()}
    assert len([s for s in d.slices if s.name != "read"]) == streamed > 0
    assert d.flow_starts and set(d.flow_starts) == set(d.flow_ends)   # T0 and T1 trade rows
    # Dated by when the monitor recorded, on the events' own clock.
    clocks = {c.clock_id: c.timestamp for c in d.clocks.clocks}
    assert clocks[pb.BUILTIN_CLOCK_REALTIME] - clocks[pb.BUILTIN_CLOCK_MONOTONIC] == \
        mon.recorded.realtime_ns - mon.recorded.monotonic_ns


def test_the_output_format_comes_from_the_file_name():
    assert format_of("a.pftrace") == "pftrace" and format_of("a.json") == "perfetto"
    assert format_of("a.sqlite") == "archive" and format_of("a.otf2") == "otf2"
    with pytest.raises(ValueError, match=r"unknown output format .txt; write trace.pftrace"):
        format_of("a.txt")


def test_monitor_commands_on_a_run_that_is_not_live_print_one_line(tmp_path, capsys):
    for monitor in ("heartbeat", "getevent", "colop"):
        assert main(["monitor", monitor, "--run", str(tmp_path / "gone.json")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no run file" in err


def test_getevent_cli_writes_an_archive(live, tmp_path, capsys):
    out = tmp_path / "cli.sqlite"
    assert main(["monitor", "getevent", "--run", live.run_file.path, "--out", str(out), "--duration", "0.5",
                 "--interval", "0.1", "--json"]) == 0
    *lines, end = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines and lines[-1]["total"] == sum(line["events"] for line in lines)
    assert end["ended"] is False and end["events"] == lines[-1]["total"]   # the last line: how it ended
    with Archive.open(out) as archive:
        assert len(archive) == lines[-1]["total"]
