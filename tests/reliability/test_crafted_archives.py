"""Archive files made by hand: `replay`, `archive export`, `archive query` and `archive matrix` open
anything they are given, so each crafted file is refused in one line or read for what it holds,
at once, in bounded memory. Each command runs in a process of its own; a command that has not ended
within HANG_S hangs (the files below made them run for ever on the code before these checks).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
from runs import REPO, THREE_NODES, pathmap_for, ring_app

from eventspace import ignored, trace
from eventspace.archive import Archive
from eventspace.catalogue import Catalogue
from eventspace.cli import main
from monitors.replay import MAX_FRAMES
from paths import Instrument, Selector

HANG_S = 60
T0 = 10**12                 # ns: the recording's clock does not start at zero
STEP = 10_000               # ns between records: 100,000 records a second of recording
MOVE, OBSERVE = trace.OP_CODES["move"], trace.OP_CODES["observe"]


def genuine(path, n: int):
    """An archive of `n` records of six threads on three nodes, a move or an observe every STEP ns."""
    pm = pathmap_for(ring_app(6), THREE_NODES, rule="block", shape="kary:2", name="crafted")
    pm = dataclasses.replace(pm, instrument=Instrument(collectors=(Selector(at=("source",)),))).validate()
    catalogue = Catalogue(pm)
    ids = np.array([e.id for e in catalogue.entries], dtype=np.uint32)
    with Archive(path, catalogue) as archive:
        for lo in range(0, n, 50_000):
            i = np.arange(lo, min(n, lo + 50_000))
            records = np.zeros(len(i), dtype=trace.DTYPE)
            records["op"] = np.where(i % 2, OBSERVE, MOVE)
            records["collector"] = ids[i % len(ids)]
            records["arg"] = i // len(ids)
            records["t_start"] = T0 + i * STEP
            records["t_end"] = T0 + i * STEP + STEP // 2
            archive.append(records)
    return path


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """20,000 records: 0.2 s of recording."""
    return genuine(tmp_path_factory.mktemp("crafted") / "genuine.sqlite", 20_000)


@pytest.fixture
def crafted(small, tmp_path):
    """A copy of the genuine archive, and a function running SQL statements on it."""
    path = tmp_path / "crafted.sqlite"
    shutil.copy(small, path)

    def change(*statements):
        with sqlite3.connect(path) as db:
            for statement in statements:
                db.execute(statement)
        db.close()
        return path

    return path, change


def run(*args, timeout: float = HANG_S) -> subprocess.CompletedProcess:
    """`eventspace ARGS` in a process of its own; AssertionError if it does not end within `timeout` s."""
    try:
        return subprocess.run([sys.executable, "-m", "eventspace.cli", *map(str, args)], capture_output=True,
                              text=True, timeout=timeout, cwd=REPO, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"`eventspace {' '.join(map(str, args))}` did not end within {timeout} s") from None


def endless(table: str, columns: list[str]) -> list[str]:
    """SQL putting a recursive view that never gives a row in place of `table`, with its columns."""
    values = ", ".join(f"n AS {c}" for c in columns)
    return [f"ALTER TABLE {table} RENAME TO kept_{table}",
            f"CREATE VIEW {table} AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
            f"SELECT {values} FROM r WHERE n < 0"]


def columns(path, table: str) -> list[str]:
    with sqlite3.connect(path) as db:
        names = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
    db.close()
    return names


COMMANDS = {
    "replay": lambda path, tmp: ["replay", path, "--json"],
    "export": lambda path, tmp: ["archive", "export", path, "--perfetto", tmp / "out.pftrace"],
    "query": lambda path, tmp: ["archive", "query", path, "SELECT count(*) FROM events"],
}
# A view in place of each table, and the commands that read that table (pulls: only replay does).
VIEWS = [(table, command) for table in ("events", "catalogue", "meta") for command in COMMANDS] + [("pulls", "replay")]


@pytest.mark.parametrize("table, command", VIEWS)
def test_a_recursive_view_in_place_of_a_table_is_refused_at_once(crafted, tmp_path, table, command):
    """Attack: a recursive VIEW named `events` made replay, export and query run for ever."""
    path, change = crafted
    change(*endless(table, columns(path, table)))
    done = run(*COMMANDS[command](path, tmp_path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"its {table} is a view, not a table" in done.stderr and str(path) in done.stderr
    assert not (tmp_path / "out.pftrace").exists()


def test_a_table_without_its_columns_is_refused(crafted, tmp_path):
    path, change = crafted
    change("ALTER TABLE events DROP COLUMN t_end")
    done = run("replay", path, "--json")
    assert done.returncode == 2 and "its events table has no column t_end" in done.stderr, done.stderr


def test_a_time_past_any_clock_is_left_out(crafted):
    """Attack: one row with t_end = 2**63 - 1 made `replay --json` run past 100 s."""
    path, change = crafted
    change(f"UPDATE events SET t_end = {2**63 - 1} WHERE seq = 5000")
    done = run("replay", path, "--json", "--interval", "0.05")
    assert done.returncode == 0, done.stderr
    frames = done.stdout.splitlines()
    assert len(frames) == 4, len(frames)   # 0.2 s of recording, as in the genuine archive
    assert done.stderr.splitlines() == [f"archive {path}: 1 row ignored: {ignored.BAD_TIMES}"]


def test_times_that_span_years_are_refused_in_one_line(crafted):
    """A time below 2**62 ns but 146 years after the others: more than MAX_FRAMES frames."""
    path, change = crafted
    change(f"UPDATE events SET t_end = {2**62 - 1} WHERE seq = 5000")
    done = run("replay", path, "--json")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"more than {MAX_FRAMES:,}" in done.stderr and "146 years" in done.stderr and "--from" in done.stderr
    assert run("replay", path, "--json", "--to", "0.2", "--interval", "0.05").stdout.count("\n") == 4


def test_rows_that_are_not_records_are_left_out_and_counted(crafted, tmp_path):
    """Rows whose fields are text, negative or out of a field's range (the command died on ValueError)."""
    path, change = crafted
    change("UPDATE events SET op = 'x' WHERE seq = 10", "UPDATE events SET collector = -5 WHERE seq = 11",
           "UPDATE events SET flags = 70000 WHERE seq = 12", "UPDATE events SET collector = 99 WHERE seq = 13")
    done = run("replay", path, "--json", "--interval", "0.05")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 4, done.stderr
    assert done.stderr.splitlines() == [f"archive {path}: 3 rows ignored: {ignored.NOT_INTEGERS}",
                                        f"archive {path}: 1 row ignored: {ignored.UNKNOWN_COLLECTOR}"]
    done = run("archive", "export", path, "--perfetto", tmp_path / "out.pftrace")
    assert done.returncode == 0 and "wrote" in done.stdout and "19996 events" in done.stdout, done.stderr


def test_a_damaged_catalogue_is_refused_in_one_line(crafted):
    path, change = crafted
    change("UPDATE catalogue SET element_id = 'seven' WHERE id = 7")
    done = run("replay", path, "--json")
    assert done.returncode == 2 and "damaged EventSpace archive" in done.stderr and done.stderr.count("\n") == 1


def test_a_json_export_too_large_to_build_is_refused(small, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("monitors.perfetto.MAX_JSON_RECORDS", 10_000)
    assert main(["archive", "export", str(small), "--perfetto", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert "20,000 events, more than a JSON trace is made of (10,000" in err and "OUT.pftrace" in err
    assert not (tmp_path / "out.json").exists()


def test_an_export_larger_than_the_memory_available_is_refused(small, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("monitors.cli.available_memory", lambda: 1 << 20)
    assert main(["archive", "export", str(small), "--perfetto", str(tmp_path / "out.pftrace")]) == 2
    err = capsys.readouterr().err
    assert re.search(r"holds 20,000 events: writing them as a trace takes about [\d.]+ GiB of memory, and "
                     r"0\.0 GiB are available", err), err
    assert not (tmp_path / "out.pftrace").exists()


# getrusage's ru_maxrss survives fork and exec (a child reports its parent's peak if that was higher):
# VmHWM is this process's own.
PEAK = """\
import sys
from eventspace.cli import main
code = main(sys.argv[1:])
print(next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")), file=sys.stderr)
sys.exit(code)
"""


def peak_kb(*args) -> int:
    """The peak resident memory (kB) of `eventspace ARGS`, run in a process of its own."""
    done = subprocess.run([sys.executable, "-c", PEAK, *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=REPO, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return int(done.stderr.strip().splitlines()[-1].split()[1])


@pytest.mark.slow
def test_replay_and_export_memory_does_not_follow_the_archive_size(tmp_path):
    """Attack: 10**7 rows took replay to 2.5 GB and export to MemoryError. Replay streams its archive
    (its memory does not grow with it); an export holds numpy columns of the records, not Python
    objects: here a tenth of the rows against all of a million."""
    few, many = genuine(tmp_path / "few.sqlite", 100_000), genuine(tmp_path / "many.sqlite", 1_000_000)
    replay = [peak_kb("replay", path, "--json") for path in (few, many)]
    export = [peak_kb("archive", "export", path, "--perfetto", tmp_path / "out.pftrace") for path in (few, many)]
    per_record = (export[1] - export[0]) * 1024 / 900_000
    print(f"peak RSS: replay {replay[0] // 1024} MiB at 100k rows, {replay[1] // 1024} MiB at 1M; export "
          f"{export[0] // 1024} MiB, {export[1] // 1024} MiB ({per_record:.0f} bytes a record)")
    assert replay[1] - replay[0] < 40 * 1024
    assert per_record < 450
