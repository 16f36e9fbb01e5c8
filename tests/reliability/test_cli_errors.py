"""Every `eventspace` command, given a missing file, an unreadable file, a wrong endpoint or a run that is
not live: exit status non-zero, exactly one line on stderr, and no traceback unless --debug."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time

import pytest
from runs import REPO

from eventspace.cli import main

PATHMAP = REPO / "pathmaps" / "windtunnel-4node.yaml"
CLUSTER = REPO / "pathmaps" / "inputs" / "toy-cluster.yaml"

# Commands that read a YAML file, with {f} where the file goes.
YAML_COMMANDS = {
    "pathmap validate": ["pathmap", "validate", "{f}"],
    "pathmap show": ["pathmap", "show", "{f}"],
    "pathmap generate --app": ["pathmap", "generate", "--app", "{f}", "--cluster", str(CLUSTER),
                               "--mapping", "block", "-o", "out.yaml"],
    "pathmap generate --cluster": ["pathmap", "generate", "windtunnel", "--threads", "4", "--cluster", "{f}",
                                   "--mapping", "block", "-o", "out.yaml"],
    "pathmap generate --mapping": ["pathmap", "generate", "windtunnel", "--threads", "4", "--cluster",
                                   str(CLUSTER), "--mapping", "{f}", "-o", "out.yaml"],
    "pathmap instrument": ["pathmap", "instrument", "{f}", "--all"],
    "node": ["node", "--pathmap", "{f}", "--node", "A"],
    "run windtunnel": ["run", "windtunnel", "--pathmap", "{f}", "--steps", "5"],
    "run collectives": ["run", "collectives", "--pathmap", "{f}", "--rounds", "5"],
    "space ls": ["space", "ls", "{f}"],
    "demo": ["demo", "--pathmap", "{f}", "--duration", "1", "--trace", "demo.json"],
}
# Commands that read an archive.
ARCHIVE_COMMANDS = {
    "archive query": ["archive", "query", "{f}", "SELECT count(*) FROM events"],
    "archive export": ["archive", "export", "{f}", "--perfetto", "out.json"],
}
# Commands that attach to a live run, with {r} where the run goes.
RUN_COMMANDS = {
    "space ls": ["space", "ls", "{r}"],
    "space switch": ["space", "switch", "off", "--run", "{r}"],
    "monitor heartbeat": ["monitor", "heartbeat", "--run", "{r}", "--duration", "1"],
    "monitor getevent": ["monitor", "getevent", "--run", "{r}", "--duration", "1"],
    "monitor colop": ["monitor", "colop", "--run", "{r}", "--duration", "1"],
    "dashboard": ["dashboard", "--run", "{r}", "--duration", "1"],
}


def dead_endpoint() -> str:
    """A TCP endpoint on this host where nothing listens (a port just freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"tcp://127.0.0.1:{port}"


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    """Work in a fresh directory holding bad inputs: `missing` names nothing, `directory` is a directory,
    `binary` is not text, `locked` cannot be read (but root reads anything), `stale` is the run file
    of a run whose nodes are gone."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00\x81 not text \x00")
    (tmp_path / "binary.sqlite").write_bytes(b"SQLite format 3\x00" + bytes(range(256)))
    locked = tmp_path / "locked.yaml"
    shutil.copy(PATHMAP, locked)
    locked.chmod(0)
    snapshot = tmp_path / "gone.pathmap.yaml"
    shutil.copy(PATHMAP, snapshot)
    stale = tmp_path / "gone.json"
    stale.write_text(json.dumps({"pathmap_file": str(snapshot), "endpoints": {"A": dead_endpoint()},
                                 "pids": {"A": 2 ** 22 + 1}, "started": time.time() - 60}))
    return {"missing": "missing.yaml", "missing_db": "missing.sqlite", "directory": "adir",
            "binary": "binary.yaml", "binary_db": "binary.sqlite", "locked": "locked.yaml",
            "stale": str(stale)}


def fails_in_one_line(argv: list[str], capsys) -> str:
    """Run the command; assert the contract; the line it printed on stderr."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code not in (0, None), f"`eventspace {' '.join(argv)}` exited 0"
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"`eventspace {' '.join(argv)}` wrote {len(lines)} lines: {err!r}"
    return lines[0]


def fill(template: list[str], **values) -> list[str]:
    return [part.format(**values) for part in template]


@pytest.mark.parametrize("command", list(YAML_COMMANDS))
@pytest.mark.parametrize("problem", ["missing", "directory", "binary", "locked"])
def test_a_yaml_input_that_is_missing_or_unreadable(inputs, capsys, command, problem):
    if problem == "locked" and os.geteuid() == 0:
        pytest.skip("root reads a file without read permission")
    line = fails_in_one_line(fill(YAML_COMMANDS[command], f=inputs[problem]), capsys)
    assert inputs[problem] in line, f"the message does not name the file: {line}"


@pytest.mark.parametrize("command", list(ARCHIVE_COMMANDS))
@pytest.mark.parametrize("problem", ["missing_db", "directory", "binary_db", "binary"])
def test_an_archive_that_is_missing_or_unreadable(inputs, capsys, command, problem):
    line = fails_in_one_line(fill(ARCHIVE_COMMANDS[command], f=inputs[problem]), capsys)
    assert inputs[problem] in line, f"the message does not name the file: {line}"


def test_wrong_endpoints(inputs, capsys):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        taken = f"tcp://127.0.0.1:{busy.getsockname()[1]}"
        nobody = dead_endpoint()
        for argv, words in (
            (["ps", "stat", nobody, "--timeout", "0.3"], [nobody]),
            (["ps", "stat", "nonsense", "--timeout", "0.3"], ["nonsense", "tcp://HOST:PORT"]),
            (["serve", "--bind", "nonsense"], ["nonsense"]),
            (["serve", "--bind", taken], [taken]),
            (["node", "--pathmap", str(PATHMAP), "--node", "A", "--bind", "nonsense"], ["nonsense"]),
            (["node", "--pathmap", str(PATHMAP), "--node", "Z"], ["'Z'"]),
        ):
            line = fails_in_one_line(argv, capsys)
            assert all(w in line for w in words), line
    finally:
        busy.close()


@pytest.mark.parametrize("command", list(RUN_COMMANDS))
def test_a_run_that_does_not_exist(inputs, capsys, command):
    line = fails_in_one_line(fill(RUN_COMMANDS[command], r="norun"), capsys)
    assert "norun" in line and "is the run live?" in line


@pytest.mark.slow   # each waits its 2 s for the run's node to answer
@pytest.mark.parametrize("command", ["space ls", "space switch", "monitor heartbeat"])
def test_a_run_that_is_no_longer_live(inputs, capsys, command):
    """One command per way of checking a run (the monitors and the dashboard share `live_run`)."""
    line = fails_in_one_line(fill(RUN_COMMANDS[command], r=inputs["stale"]), capsys)
    assert "is stale" in line and "node A does not answer" in line


def test_debug_shows_the_traceback(inputs):
    with pytest.raises(FileNotFoundError):
        main(["--debug", "pathmap", "show", inputs["missing"]])
