"""Every monitor has one shape (monitors.monitor): `read()` returns its frozen Report, `render(report)` draws
it, and its `--json` lines are the report's `as_dict()`."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import typing

import pytest
from rich.console import Console

from monitors.archive import Archive
from monitors.classes import ClassesMon
from monitors.colop import ColOpMon
from monitors.dashboard import Dashboard
from monitors.getevent import GetEventMon
from monitors.heartbeat import Heartbeat
from monitors.matrix import MatrixMon
from monitors.monitor import Monitor, Report
from monitors.render import render
from monitors.replay import Replay, ReplayError
from monitors.stacks import StacksMon
from monitors.system import SystemMon
from monitors.waitstates import WaitStatesMon
from test_json_lines import eventspace, json_lines, live_ring

MONITORS = [Heartbeat, GetEventMon, ColOpMon, ClassesMon, MatrixMon, WaitStatesMon, SystemMon, StacksMon, Dashboard,
            Replay]


def report_type(monitor: type) -> type:
    return typing.get_type_hints(monitor.read)["return"]


@pytest.mark.parametrize("monitor", MONITORS, ids=lambda m: m.__name__)
def test_every_monitor_reads_a_frozen_report_that_render_draws(monitor):
    kind = report_type(monitor)
    assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen, f"{kind.__name__} is not frozen"
    assert callable(getattr(kind, "as_dict", None)), f"{kind.__name__} has no --json form (as_dict)"
    assert render.dispatch(kind) is not render.dispatch(object), f"render does not draw a {kind.__name__}"
    assert callable(getattr(monitor, "close", None))


def alike(a, b, depth: int = 2) -> bool:
    """Whether two JSON values have one shape to `depth` levels: dicts with the same keys, alike key by
    key, and lists alike by their first items, where both have them (figures, what an empty list or a
    None would hold, and maps keyed by data further down, differ from read to read)."""
    if depth == 0:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(alike(a[key], b[key], depth - 1) for key in a)
    if isinstance(a, list) and isinstance(b, list) and a and b:
        return alike(a[0], b[0], depth)
    return True


def printed(report) -> str:
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(render(report))
    return console.export_text()


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from live_ring(tmp_path_factory, "protocol")


LIVE = {"heartbeat": (lambda run: Heartbeat(run), ["monitor", "heartbeat"]),
        "getevent": (lambda run: GetEventMon(run), ["monitor", "getevent"]),
        "colop": (lambda run: ColOpMon(run, "count"), ["monitor", "colop", "--tree", "count"]),
        "classes": (lambda run: ClassesMon(run), ["monitor", "classes"]),
        "dashboard": (lambda run: Dashboard(run), ["dashboard"]),
        "stack": (lambda run: StacksMon(run), ["stack"])}


@pytest.mark.parametrize("name", LIVE)
def test_a_live_monitor_reads_its_report_and_its_json_lines_are_that_report(ring, name):
    run, tmp_path = ring
    make, command = LIVE[name]
    with contextlib.closing(make(run)) as mon:
        assert isinstance(mon, Monitor)
        first, second = mon.read(), mon.read()
    kind = report_type(type(mon))
    assert type(first) is kind and type(second) is kind and isinstance(first, Report)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(second, dataclasses.fields(kind)[0].name, None)
    assert printed(second).strip(), f"render drew nothing of a {kind.__name__}"
    said = json.loads(json.dumps(second.as_dict()))
    watch = [] if name == "stack" else ["--interval", "0.3", "--duration", "1.2"]
    lines = json_lines(eventspace(*command, "--run", run.name, "--json", *watch, cwd=tmp_path))
    frames = lines if name == "stack" else lines[:-1]
    assert frames and all(alike(frame, said) for frame in frames), (frames[0], said)


@pytest.mark.slow   # 7-12 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_a_replay_reads_frame_after_frame_and_its_json_lines_are_those_frames(ring):
    run, tmp_path = ring
    out = tmp_path / "ring.sqlite"
    with GetEventMon(run, out=out) as mon:
        for _ in range(4):
            mon.read()
    with Archive.open(out) as archive:
        replay = Replay(archive, 0.2)
        frames = [replay.read()]
        frames += list(replay.frames())
        assert replay.ended and [f.index for f in frames] == list(range(replay.count))
        with pytest.raises(ReplayError):
            replay.read()
        replay.close()
    assert printed(frames[-1]).strip()
    lines = json_lines(eventspace("replay", out, "--interval", "0.2", "--json", cwd=tmp_path))
    assert lines == [json.loads(json.dumps(f.as_dict())) for f in frames]
