"""OTF2 export (with the optional otf2 package): read back, a location per track, a region per
op, balanced enter/leave pairs with timestamps that never decrease on a location."""

from __future__ import annotations

import sys

import pytest

from eventspace import trace
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
