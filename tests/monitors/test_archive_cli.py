"""`eventspace archive query` and `eventspace archive export`: output, and one-line errors."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from pftrace_decode import decode

from eventspace.cli import main
from monitors.archive import Archive
from monitors.perfetto import validate


@pytest.fixture
def db(tmp_path, records, catalogue):
    path = tmp_path / "run.db"
    with Archive(path, catalogue) as archive:
        archive.append(records, discarded=2)
    return path


def test_query_prints_a_table(db, capsys):
    sql = "SELECT thread, count(*) AS n FROM events WHERE thread IS NOT NULL GROUP BY thread ORDER BY thread"
    assert main(["archive", "query", str(db), sql]) == 0
    out = capsys.readouterr().out
    assert "4 rows" in out and "thread" in out
    for thread in ("T0", "T1", "T2", "T3"):
        assert thread in out


def test_query_prints_values_as_data_not_markup(db, capsys):
    assert main(["archive", "query", str(db), "SELECT '[bold]x[/bold]' AS v, NULL AS w"]) == 0
    out = capsys.readouterr().out
    assert "[bold]x[/bold]" in out and "NULL" in out


def test_query_json(db, capsys, records):
    assert main(["archive", "query", str(db), "--json",
                 "SELECT collector, op_name, thread, t_end - t_start AS ns FROM events ORDER BY seq LIMIT 2"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == [
        {"collector": 1, "op_name": "move", "thread": "T0", "ns": int(records[0]["t_end"] - records[0]["t_start"])},
        {"collector": 2, "op_name": "move", "thread": None, "ns": int(records[1]["t_end"] - records[1]["t_start"])},
    ]


def test_export_native_perfetto(db, tmp_path, capsys, records, flows):
    out = tmp_path / "trace.pftrace"
    assert main(["archive", "export", str(db), "--perfetto", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: {len(records)} events" in printed and f"{len(flows)} flows" in printed
    d = decode(out)
    assert len([s for s in d.slices if s.name != "read"]) == len(records)
    assert len(d.flow_starts) == len(flows)
    # Dated by the archive's own recording time, not the export's.
    with Archive.open(db) as archive:
        recorded = archive.info.clock
    clocks = {c.clock_id: c.timestamp for c in d.clocks.clocks}
    assert clocks[pb.BUILTIN_CLOCK_REALTIME] == recorded.realtime(clocks[pb.BUILTIN_CLOCK_MONOTONIC])


def test_export_perfetto(db, tmp_path, capsys, records):
    out = tmp_path / "trace.json"
    assert main(["archive", "export", str(db), "--perfetto", str(out)]) == 0
    assert f"wrote {out}: {len(records)} events" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert validate(doc) == [] and doc["otherData"]["title"] == "toy-monitors"


def _one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("eventspace archive: ") and "\n" not in err and "Traceback" not in captured.err
    return err


@pytest.mark.parametrize("argv, expected", [
    (["archive", "query", "{missing}", "SELECT 1"], "no such file"),
    (["archive", "query", "{text}", "SELECT 1"], "is not an EventSpace archive"),
    (["archive", "query", "{db}", "SELEC nothing"], "syntax error"),
    (["archive", "query", "{db}", "DELETE FROM events"], "queries cannot change an archive"),
    (["archive", "export", "{missing}", "--perfetto", "{out}"], "no such file"),
    (["archive", "export", "{db}"], "--perfetto OUT.pftrace"),
    (["archive", "export", "{db}", "--perfetto", "{nodir}"], "no such directory"),
    (["archive", "export", "{db}", "--perfetto", "{nodir_pf}"], "no such directory"),
    (["archive", "export", "{db}", "--perfetto", "{txt_out}"], "OUT.pftrace (Perfetto's own format) or OUT.json"),
])
def test_errors_are_one_line_and_leave_the_archive_intact(db, tmp_path, capsys, argv, expected):
    text = tmp_path / "notes.txt"
    text.write_text("not an archive\n" * 50)
    before = db.read_bytes()
    names = {"missing": tmp_path / "missing.db", "text": text, "db": db, "out": tmp_path / "out.json",
             "nodir": tmp_path / "nodir" / "out.json", "nodir_pf": tmp_path / "nodir" / "out.pftrace",
             "txt_out": tmp_path / "out.txt"}
    assert main([a.format(**names) for a in argv]) == 2
    assert expected in _one_line_error(capsys)
    assert db.read_bytes() == before
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "out.txt").exists()


def test_export_otf2_without_the_package(db, tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "otf2", None)   # import otf2 -> ImportError
    assert main(["archive", "export", str(db), "--otf2", str(tmp_path / "otf2"),
                 "--perfetto", str(tmp_path / "t.json")]) == 2
    assert "pip install eventspace[otf2]" in _one_line_error(capsys)
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "otf2").exists()


def test_export_otf2(db, tmp_path, capsys, records):
    otf2 = pytest.importorskip("otf2")
    out = tmp_path / "otf2"
    assert main(["archive", "export", str(db), "--otf2", str(out)]) == 0
    assert f"{len(records):,} operations" in capsys.readouterr().out
    assert (out / "traces.otf2").exists()
    # The clock properties say when the archive's events were recorded, not when they were exported.
    with Archive.open(db) as archive:
        recorded = archive.info.clock
    with otf2.reader.open(str(out / "traces.otf2")) as reader:
        clock = reader.definitions.clock_properties
    assert clock.global_offset == int(records["t_start"].min())
    assert clock.realtime_timestamp == recorded.realtime(clock.global_offset)


def test_export_of_an_archive_that_does_not_say_when_it_was_recorded(db, tmp_path, capsys, records):
    otf2 = pytest.importorskip("otf2")
    sqlite = sqlite3.connect(db)   # as an archive written before the recording time was kept
    sqlite.execute("DELETE FROM meta WHERE key IN ('clock_monotonic_ns', 'clock_realtime_ns')")
    sqlite.commit()
    sqlite.close()
    out = tmp_path / "otf2"
    assert main(["archive", "export", str(db), "--otf2", str(out), "--perfetto", str(tmp_path / "t.pftrace")]) == 0
    captured = capsys.readouterr()
    assert "does not say when its events were recorded" in captured.err
    with otf2.reader.open(str(out / "traces.otf2")) as reader:
        assert reader.definitions.clock_properties.realtime_timestamp == otf2.Undefined.TIMESTAMP.value
    clocks = decode(tmp_path / "t.pftrace").clocks.clocks
    assert pb.BUILTIN_CLOCK_REALTIME not in {c.clock_id for c in clocks}


def test_export_otf2_says_what_it_wrote_and_what_it_left_out(tmp_path, capsys, records, catalogue):
    pytest.importorskip("otf2")
    from eventspace import trace

    samples = np.zeros(3, dtype=trace.DTYPE)   # system summary records: metrics, which OTF2 regions cannot hold
    samples["op"], samples["flags"] = 64, trace.SYSTEM
    samples["collector"] = catalogue.system[0].id
    samples["t_start"], samples["t_end"] = records["t_start"].min(), records["t_start"].min() + 100
    db = tmp_path / "with-samples.db"
    with Archive(db, catalogue) as archive:
        archive.append(np.concatenate([records, samples]))
    assert main(["archive", "export", str(db), "--otf2", str(tmp_path / "otf2")]) == 0
    out = capsys.readouterr().out
    assert f"{len(records):,} operations of the archive's {len(records) + 3:,} events" in out
    assert "left out 3 system summary records" in out
