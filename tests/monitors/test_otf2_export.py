"""OTF2 export (with the optional otf2 package): read back, a location per track, a region per
op, balanced enter/leave pairs with timestamps that never decrease on a location."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from conftest import T0

from eventspace import trace
from eventspace.clock import WallClock
from monitors.otf2_export import Otf2Unavailable, available, write_otf2


def test_without_the_package_the_error_says_what_to_install(tmp_path, records, catalogue, monkeypatch):
    monkeypatch.setitem(sys.modules, "otf2", None)
    assert not available()
    with pytest.raises(Otf2Unavailable, match=r"pip install eventspace\[otf2\]"):
        write_otf2(tmp_path / "out", records, catalogue)


def _read(anchor):
    otf2 = pytest.importorskip("otf2")
    per_location: dict[str, list] = {}
    with otf2.reader.open(str(anchor)) as reader:
        resolution = reader.timer_resolution
        groups = {loc.name: loc.group.name for loc in reader.definitions.locations}
        regions = {r.name for r in reader.definitions.regions}
        for location, event in reader.events:
            per_location.setdefault(location.name, []).append(event)
    return resolution, groups, regions, per_location


def test_read_back(tmp_path, records, catalogue):
    otf2 = pytest.importorskip("otf2")
    anchor = write_otf2(tmp_path / "out", records, catalogue)
    resolution, groups, regions, per_location = _read(anchor)
    assert resolution == 1_000_000_000
    assert {"T0": "A", "T1": "A", "T2": "B", "T3": "B"}.items() <= groups.items()
    assert {"element row_2_3", "tree count"} <= set(groups)
    assert regions == {trace.OP_NAMES[int(op)] for op in set(records["op"].tolist())}
    enters = 0
    for name, events in per_location.items():
        times = [e.time for e in events]
        assert times == sorted(times), f"{name}: timestamps go back"
        stack = []
        for e in events:
            if isinstance(e, otf2.events.Enter):
                stack.append(e.region.name)
                enters += 1
            else:
                assert isinstance(e, otf2.events.Leave) and stack.pop() == e.region.name
        assert not stack, f"{name}: regions left open"
    assert enters == len(records)
    # Times are the records' own nanoseconds; attributes name what each event touched.
    first = next(e for e in per_location["T1"] if isinstance(e, otf2.events.Enter))
    attrs = {a.name: v for a, v in first.attributes.items()}
    assert first.time == int(records[records["collector"] == 9]["t_start"][0])
    assert attrs["element"] == "row_0_1" and attrs["arg"] == 5 and attrs["role"] == "source"


def test_an_existing_archive_is_not_overwritten(tmp_path, records, catalogue):
    pytest.importorskip("otf2")
    write_otf2(tmp_path / "out", records, catalogue)
    with pytest.raises(FileExistsError, match="already holds an OTF2 archive"):
        write_otf2(tmp_path / "out", records, catalogue)


RECORDED = WallClock(monotonic_ns=T0 - 5_000_000_000, realtime_ns=1_700_000_000_000_000_000)


def test_the_clock_properties_date_the_recording_not_the_export(tmp_path, records, catalogue):
    otf2 = pytest.importorskip("otf2")
    anchor = write_otf2(tmp_path / "out", records, catalogue, recorded=RECORDED)
    with otf2.reader.open(str(anchor)) as reader:
        clock = reader.definitions.clock_properties
    first = int(records["t_start"].min())
    assert clock.global_offset == first
    assert clock.trace_length == int(records["t_end"].max()) - first
    # The first event happened 5 s (plus its offset from T0) after the recorded reading.
    assert clock.realtime_timestamp == RECORDED.realtime_ns + first - RECORDED.monotonic_ns
    assert clock.realtime_timestamp == 1_700_000_005_000_000_000 + first - T0


def test_without_a_recording_time_the_wall_clock_is_undefined_not_the_export_time(tmp_path, records, catalogue):
    otf2 = pytest.importorskip("otf2")
    anchor = write_otf2(tmp_path / "out", records, catalogue)
    with otf2.reader.open(str(anchor)) as reader:
        assert reader.definitions.clock_properties.realtime_timestamp == otf2.Undefined.TIMESTAMP.value


@pytest.mark.skipif(shutil.which("otf2-print") is None, reason="otf2-print (Debian: otf2-tools) is not installed")
def test_otf2_print_reads_the_recording_time(tmp_path, records, catalogue):
    pytest.importorskip("otf2")
    anchor = write_otf2(tmp_path / "out", records, catalogue, recorded=RECORDED)
    shown = subprocess.run(["otf2-print", "-G", str(anchor)], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    line = next(line for line in shown.stdout.splitlines() if line.startswith("CLOCK_PROPERTIES"))
    realtime = RECORDED.realtime(int(records["t_start"].min()))
    date = datetime.fromtimestamp(realtime // 1_000_000_000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    assert f"Global Offset: {int(records['t_start'].min())}" in line
    assert f"Date: {date}.{realtime % 1_000_000_000:09d} +0000" in line, line
