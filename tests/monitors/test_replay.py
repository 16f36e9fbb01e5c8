"""The sequence player: an archive of a real run played back through the dashboard, from the command line
(`--json`) and in a terminal driven through tmux."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

from eventspace import trace
from eventspace.cli import main
from monitors.archive import Archive
from monitors.colop import Rounds
from monitors.getevent import GetEventMon
from monitors.replay import Replay, ReplayError
from paths import Instrument, Selector, launch
from polling import until
from runs import ENV, REPO, THREE_NODES, pathmap_for, ring_app

HOLD = 3.0   # seconds T5 holds back before the last allreduce of the recording


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """An archive of six threads on three nodes: two seconds of the ring, then allreduces that
    wait HOLD seconds for T5 (asleep, outside any operation), recorded by getevent as it happened
    (every collector, and the nodes' system summaries)."""
    pm = pathmap_for(ring_app(6), THREE_NODES, rule="block", shape="kary:2", name="replayed")
    pm = dataclasses.replace(pm, instrument=Instrument(keep=2000, collectors=(
        Selector(at=("source",)), Selector(trees=("count", "step"))))).validate()
    out = tmp_path_factory.mktemp("replay") / "run.sqlite"
    with launch(pm, run_dir=tmp_path_factory.mktemp("runs"), env=ENV) as run:
        mon = GetEventMon(run, out=out)
        try:
            for program, args in (("programs:ring_forever", {"stop_after": 2, "pause": 0.01}),
                                  ("programs:hold_back", {"rounds": 3, "late": "T5", "hold": HOLD})):
                run.start(program, args)
                while any(run.client(n.name).call("paths.info")["running"] for n in pm.nodes):
                    mon.read()
                    time.sleep(0.2)   # the monitor's pace: the recording's pulls
                run.wait(timeout=60)
            mon.read()
        finally:
            mon.close()
    return out


def frames(path, *extra, capsys):
    assert main(["replay", str(path), "--json", *extra]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.slow   # 6-7 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_every_interval_of_the_recording_becomes_one_dashboard_state(recorded, capsys):
    shown = frames(recorded, "--interval", "0.5", capsys=capsys)
    with Archive.open(recorded) as archive:
        replay = Replay(archive, 0.5)
        records = archive.records()
    assert len(shown) == replay.count == int(np.ceil(replay.length / 0.5 - 1e-9)) >= 10
    assert [f["index"] for f in shown] == list(range(len(shown)))
    operations = records[(records["flags"] & trace.SYSTEM) == 0]
    assert sum(f["events"] for f in shown) == len(operations)   # every event in exactly one interval
    assert all(len(f["heartbeat"]["threads"]) == 6 for f in shown)
    assert [t["status"] for t in shown[1]["heartbeat"]["threads"]] == ["alive"] * 6
    # Rounds only grow, and the last frame has every round of the recording.
    for tree in ("count", "step"):
        rounds = [sum(o["rounds"] for r in f["colops"] if r["tree"] == tree for o in r["ops"]) for f in shown]
        assert rounds == sorted(rounds) and rounds[-1] > 0
    with Archive.open(recorded) as archive:
        whole = Rounds(archive.catalogue, "count")
        whole.add(records)
        assert sum(o.rounds for o in whole.report().ops) == \
            sum(o["rounds"] for r in shown[-1]["colops"] if r["tree"] == "count" for o in r["ops"])
    # The nodes' system summaries, and the recording scope's own figures.
    assert {n["node"] for n in shown[2]["nodes"]} == {"A", "B", "C"}
    assert all(n["rss_bytes"] > 0 for n in shown[2]["nodes"])
    assert shown[2]["scopes"][0]["name"] == "getevent" and shown[2]["scopes"][0]["pulls"] >= 1


def test_a_thread_that_held_back_shows_stalled_while_the_others_wait_for_it(recorded, capsys):
    shown = frames(recorded, "--interval", "0.5", capsys=capsys)
    statuses = [{t["thread"]: t["status"] for t in f["heartbeat"]["threads"]} for f in shown]
    held = [s for s in statuses if s["T5"] == "stalled"]
    assert len(held) >= 2
    assert all(s[t] == "waiting" for s in held for t in ("T0", "T1", "T2", "T3", "T4"))
    waits = [t["waiting_in"] for f in shown for t in f["heartbeat"]["threads"] if t["status"] == "waiting"]
    assert waits and all("contribute" in w and "count" in w for w in waits)
    opened = [r["open"] for f in shown for r in f["colops"] if r["tree"] == "count" and r["open"]]
    assert any(o["waiting_for"] == ["T5"] and o["open_for_s"] >= 1.0 for o in opened)


def test_a_window_of_the_recording_plays_alone(recorded, capsys):
    shown = frames(recorded, "--from", "1", "--to", "2.5", "--interval", "0.5", capsys=capsys)
    assert [f["at"] for f in shown] == pytest.approx([1.5, 2.0, 2.5])
    assert shown[0]["heartbeat"]["threads"][0]["last_t_end"] > 0   # what came before the window counts
    assert main(["replay", str(recorded), "--from", "500"]) == 2
    assert "nothing to play from 500 s" in capsys.readouterr().err


def test_an_archive_without_events_is_refused_in_one_line(recorded, tmp_path):
    with Archive.open(recorded) as archive:
        catalogue = archive.catalogue
    with Archive(tmp_path / "empty.sqlite", catalogue) as empty:
        pass
    with Archive.open(tmp_path / "empty.sqlite") as empty, pytest.raises(ReplayError, match="holds no events"):
        Replay(empty)


def tmux(*args, check=True) -> str:
    return subprocess.run(["tmux", *args], check=check, capture_output=True, text=True).stdout


def press(session, keys: str) -> None:
    """Type `keys` as they are (`-` and `+` are not tmux options here)."""
    tmux("send-keys", "-t", session, "-l", "--", keys)


def screen(session, words, timeout=30.0) -> str:
    """The pane's text once it holds `words` (AssertionError if it does not in time)."""
    return until(lambda: tmux("capture-pane", "-p", "-t", session), timeout, f"{words!r} on the screen",
                 holds=lambda shown: words in shown)


def frame_number(shown) -> int:
    line = next(line for line in shown.splitlines() if "frame " in line and " of " in line)
    return int(line.split("frame ")[1].split(" of")[0])


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
def test_the_player_obeys_its_keys_in_a_terminal_and_gives_the_terminal_back(recorded):
    session = f"replay-{uuid.uuid4().hex[:8]}"
    tmux("new-session", "-d", "-s", session, "-x", "200", "-y", "55", "bash --norc --noprofile")
    try:
        command = (f"cd {REPO} && PYTHONPATH={os.pathsep.join(sys.path)} {sys.executable} -m eventspace.cli "
                   f"replay {recorded} --interval 0.5 --speed 0.5")
        tmux("send-keys", "-t", session, command, "Enter")
        screen(session, "playing")
        press(session, " ")
        paused = frame_number(screen(session, "paused"))
        time.sleep(1.5)                                       # paused: no frame goes by (what is under test)
        assert frame_number(screen(session, "paused")) == paused
        press(session, "s")
        screen(session, f"frame {paused + 1} of")
        tmux("send-keys", "-t", session, "Right")
        screen(session, f"frame {paused + 2} of")
        press(session, "+")
        screen(session, "1× speed")
        press(session, "+")
        screen(session, "2× speed")
        press(session, "---")
        screen(session, "1/4× speed")
        press(session, " ")                                   # playing again, then quit
        screen(session, "playing")
        press(session, "q")
        screen(session, "replayed")
        # Typed before the player has ended, a line goes partly to its key reader (cbreak mode).
        until(lambda: tmux("display-message", "-p", "-t", session, "#{pane_current_command}").strip(), 30,
              "the player ending after q: bash in the pane again", holds=lambda command: command == "bash")
        # The typed line must not hold what the output is waited for: `$p` makes the prefix.
        tmux("send-keys", "-t", session,
             "p=tty; stty -a | tr ' ' '\\n' | grep -x -e -*icanon -e -*echo | sed s/^/$p:/; echo $p:checked",
             "Enter")
        shown = screen(session, "tty:checked")
        assert "tty:icanon" in shown and "tty:echo" in shown   # cbreak mode is undone
    finally:
        tmux("kill-session", "-t", session, check=False)
