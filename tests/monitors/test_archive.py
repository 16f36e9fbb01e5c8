"""The SQLite archive: nothing appended is lost, the catalogue comes back without the pathmap,
queries are read-only, and bad files or SQL give one clear error and leave the file as it was."""

from __future__ import annotations

import hashlib
import sqlite3
import time

import numpy as np
import pytest

from eventspace import trace
from monitors.archive import Archive, ArchivedCatalogue, ArchiveError
from monitors.perfetto import to_perfetto


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def archived(tmp_path, records, catalogue):
    """An archive of `records` in two batches (the second reporting 3 discarded)."""
    path = tmp_path / "run.db"
    with Archive(path, catalogue) as archive:
        assert archive.append(records[:10]) == 10
        assert archive.append(records[10:], discarded=3) == len(records) - 10
    return path


def test_round_trip_keeps_every_record_in_order(archived, records):
    with Archive.open(archived) as archive:
        assert len(archive) == len(records)
        got = archive.records()
        info = archive.info
    assert got.dtype == trace.DTYPE and np.array_equal(got, records)
    assert (info.pathmap, info.tuples, info.discarded) == ("toy-monitors", len(records), 3)
    assert info.created.endswith("+00:00")


def test_packed_bytes_and_empty_batches_append_too(tmp_path, records, catalogue):
    with Archive(tmp_path / "b.db", catalogue) as archive:
        assert archive.append(trace.encode(records)) == len(records)
        assert archive.append(trace.empty(), discarded=5) == 0
        assert np.array_equal(archive.records(), records)
        assert archive.info.discarded == 5
        with pytest.raises(TypeError, match="trace.DTYPE"):
            archive.append([{"op": 1}])
        with pytest.raises(ValueError, match="negative"):
            archive.append(records, discarded=-1)
        too_late = records[:1].copy()
        too_late["t_end"] = 2**63
        with pytest.raises(ValueError, match="2\\*\\*63"):
            archive.append(too_late)
        assert len(archive) == len(records)   # a refused batch adds nothing


def test_the_catalogue_is_rebuilt_from_the_archive(archived, records, catalogue):
    with Archive.open(archived) as archive:
        rebuilt = archive.catalogue
    assert isinstance(rebuilt, ArchivedCatalogue)
    assert rebuilt.pathmap.name == "toy-monitors" and rebuilt.entries == catalogue.entries
    assert rebuilt[13] == catalogue[13] and rebuilt.label(records[:3]) == catalogue.label(records[:3])
    with pytest.raises(KeyError, match="no collector 999"):
        rebuilt[999]
    # Export needs no pathmap: the rebuilt catalogue gives the same trace.
    assert to_perfetto(records, rebuilt) == to_perfetto(records, catalogue)


def test_names_are_stored_alongside_for_queries(archived):
    with Archive.open(archived) as archive:
        columns, rows = archive.query(
            "SELECT thread, count(*) AS n FROM events WHERE op_name = 'allreduce' AND thread IS NOT NULL "
            "GROUP BY thread ORDER BY thread")
        assert columns == ("thread", "n")
        assert rows == [("T0", 1), ("T1", 1), ("T2", 1), ("T3", 1)]
        _, rows = archive.query("SELECT role, node, element_name, tree FROM events WHERE collector = ?", (14,))
        assert set(rows) == {("sink", "B", "row_2_1", None)}
        _, rows = archive.query("SELECT DISTINCT tree, element_name FROM events WHERE role = 'arrival'")
        assert rows == [("count", None)]
        _, rows = archive.query("SELECT role = 'system', count(*) FROM catalogue GROUP BY role = 'system'")
        assert sorted(rows) == [(0, 33), (1, 2)]   # 33 collectors, and each node's system element
        indexes = {r[0] for r in archive.query("SELECT name FROM sqlite_master WHERE type = 'index'")[1]}
        assert {"events_thread", "events_element", "events_t_start"} <= indexes


def test_reading_leaves_the_file_byte_identical(archived, tmp_path):
    before = _digest(archived)
    with Archive.open(archived) as archive:
        archive.query("SELECT * FROM events")
        archive.records()
        assert archive.info.tuples
        with pytest.raises(ArchiveError, match="queries cannot change an archive"):
            archive.query("DELETE FROM events")
        with pytest.raises(ArchiveError, match="read-only"):
            archive.append(trace.empty())
    assert _digest(archived) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.db"]   # no journal, no -wal


def test_queries_on_a_writer_are_read_only_too(tmp_path, records, catalogue):
    with Archive(tmp_path / "w.db", catalogue) as archive:
        archive.append(records)
        with pytest.raises(ArchiveError, match="queries cannot change an archive"):
            archive.query("DROP TABLE events")
        assert archive.query("SELECT count(*) FROM events")[1] == [(len(records),)]


def test_appending_to_an_existing_archive_of_the_same_collectors(archived, records, catalogue):
    with Archive(archived, catalogue) as archive:
        archive.append(records[:4], discarded=1)
        archive.set_meta("run", "windtunnel 3")
    with Archive.open(archived) as archive:
        assert len(archive) == len(records) + 4
        assert archive.info.discarded == 4 and archive.info.extra == {"run": "windtunnel 3"}
        with pytest.raises(ArchiveError, match="read-only"):
            archive.set_meta("x", 1)


def test_meta_keys_kept_by_the_archive_are_refused(tmp_path, catalogue):
    with Archive(tmp_path / "m.db", catalogue) as archive, pytest.raises(ValueError, match="kept by the archive"):
        archive.set_meta("tuples", 0)


def test_the_archive_keeps_when_its_events_were_recorded(tmp_path, catalogue):
    before_mono, before_real = time.monotonic_ns(), time.time_ns()
    with Archive(tmp_path / "r.db", catalogue):
        pass
    after_mono, after_real = time.monotonic_ns(), time.time_ns()
    time.sleep(0.01)   # the clocks move on: the reading kept must be the first
    with Archive(tmp_path / "r.db", catalogue) as archive:   # reopened later to append: still the first reading
        clock = archive.info.clock
        with pytest.raises(ValueError, match="kept by the archive"):
            archive.set_meta("clock_realtime_ns", 0)
    assert before_mono <= clock.monotonic_ns <= after_mono and before_real <= clock.realtime_ns <= after_real
    with Archive.open(tmp_path / "r.db") as archive:
        assert archive.info.clock == clock


def test_an_archive_written_before_the_recording_time_was_kept_still_opens(archived):
    db = sqlite3.connect(archived)
    db.execute("DELETE FROM meta WHERE key IN ('clock_monotonic_ns', 'clock_realtime_ns')")
    db.commit()
    db.close()
    with Archive.open(archived) as archive:
        assert archive.info.clock is None and archive.info.extra == {}


def test_an_archive_of_other_collectors_is_refused_and_kept(archived, catalogue):
    before = _digest(archived)
    other = ArchivedCatalogue("toy-monitors", catalogue.entries[:5])
    with pytest.raises(ArchiveError, match="other collectors"):
        Archive(archived, other)
    assert _digest(archived) == before


@pytest.mark.parametrize("content, expected", [
    (b"a,b,c\n1,2,3\n" * 100, "is not an EventSpace archive"),
    (None, "without a meta table"),        # an SQLite database of something else
])
def test_files_that_are_not_archives(tmp_path, catalogue, content, expected):
    path = tmp_path / "other.db"
    if content is None:
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE people (name TEXT)")
        db.commit()
        db.close()
    else:
        path.write_bytes(content)
    before = _digest(path)
    with pytest.raises(ArchiveError, match=expected) as err:
        Archive.open(path)
    assert str(path) in str(err.value) and "written by eventspace.archive.Archive" in str(err.value)
    with pytest.raises(ArchiveError, match=expected):
        Archive(path, catalogue)   # not appended to either
    assert _digest(path) == before


def test_a_missing_file_or_a_directory(tmp_path, catalogue):
    with pytest.raises(ArchiveError, match="no such file"):
        Archive.open(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(ArchiveError, match="is a directory"):
        Archive.open(tmp_path)
    with pytest.raises(ArchiveError, match="is a directory"):
        Archive(tmp_path, catalogue)
    with pytest.raises(ArchiveError, match="cannot create"):
        Archive(tmp_path / "no" / "such" / "dir.db", catalogue)


@pytest.mark.parametrize("sql, expected", [
    ("SELEC * FROM events", "syntax error"),
    ("SELECT nonsense FROM events", "no such column"),
    ("SELECT * FROM nowhere", "no such table"),
    ("SELECT 1; SELECT 2", "one statement"),
])
def test_bad_sql_names_the_file_and_the_tables(archived, sql, expected):
    before = _digest(archived)
    with Archive.open(archived) as archive, pytest.raises(ArchiveError, match=expected) as err:
        archive.query(sql)
    message = str(err.value)
    assert str(archived) in message and "tables: events" in message and "\n" not in message
    assert _digest(archived) == before


def test_an_archive_from_a_newer_version_is_refused(archived):
    db = sqlite3.connect(archived)
    db.execute("UPDATE meta SET value = '99' WHERE key = 'version'")
    db.commit()
    db.close()
    with pytest.raises(ArchiveError, match="version 99, newer than this EventSpace reads"):
        Archive.open(archived)
