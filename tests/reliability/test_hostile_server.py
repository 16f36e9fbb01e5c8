"""A hostile node server, as its clients and monitors meet it: one that answers pings but nothing else,
answers garbage, or answers with a reply far over the reply limit. `eventspace ps stat` and
`eventspace monitor getevent` end within their time with one line that names the server and says
what it did, exit status 2; no traceback, no hang, no gigabyte."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import msgpack
import pytest
from runs import REPO
from server_attacks import HostileServer

from pastset import protocol as p
from paths.process import process_start

ENDS_WITHIN = 20         # seconds; these once ran past 60 s
REPLY_LIMIT = p.Limits().max_reply


def pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


# name -> (the answer to every request but a ping, words its one line must hold)
GARBAGE = {
    "not msgpack": (lambda rid, op: b"\xc1\xc1\xc1", "malformed reply"),
    "extra data": (lambda rid, op: pack([rid, p.OK, 1]) + b"\x01", "malformed reply"),
    "nested 5000 deep": (lambda rid, op: b"\x91" * 5000 + b"\xc0", "malformed reply"),
    "not a list": (lambda rid, op: pack(5), "malformed reply"),
    "too short": (lambda rid, op: pack([rid]), "malformed reply"),
    "a result of the wrong shape": (lambda rid, op: pack([rid, p.OK, 7]), "malformed reply"),
    "an unknown status": (lambda rid, op: pack([rid, 9, 1, 2]), "malformed reply"),
    "an error without a message": (lambda rid, op: pack([rid, p.ERROR, 5, None]), "malformed reply"),
    "nothing (pings only)": (lambda rid, op: None, "answered a ping"),
}


@pytest.fixture
def hostile():
    made = []

    def start(answer) -> HostileServer:
        made.append(HostileServer(answer))
        return made[-1]

    yield start
    for server in made:
        server.close()


# `eventspace ARGV`, which prints its peak resident memory (kB) last on stderr as it exits: VmHWM, since
# getrusage's peak keeps that of the process it was forked from.
MEASURED = ("import atexit, sys; atexit.register(lambda: print('peak', [line.split()[1] for line in "
            "open('/proc/self/status') if line.startswith('VmHWM:')][0], file=sys.stderr)); "
            "from eventspace.cli import main; sys.exit(main(sys.argv[1:]))")


def eventspace(*argv: str, env: dict | None = None) -> tuple[int, list[str], float, int, list[str]]:
    """`eventspace ARGV` in a process of its own: (exit status, the lines it printed on stderr, its
    seconds, its peak resident memory in kB, the lines it printed on stdout); it is killed, and the
    test fails, past ENDS_WITHIN."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", MEASURED, *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    try:
        out, err = proc.communicate(timeout=ENDS_WITHIN)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"eventspace {' '.join(argv)} did not end within {ENDS_WITHIN} s") from None
    took = time.monotonic() - started
    lines = [line for line in err.splitlines() if line.strip()]
    peak = int(lines.pop().split()[1]) if lines and lines[-1].startswith("peak ") else 0
    return proc.returncode, lines, took, peak, [line for line in out.splitlines() if line.strip()]


def one_line(code: int, err: list[str], endpoint: str, words: str) -> None:
    assert code == 2 and len(err) == 1, (code, err)
    assert "Traceback" not in err[0] and endpoint in err[0] and words in err[0], err[0]


@pytest.mark.parametrize("case", list(GARBAGE))
def test_ps_stat_of_a_hostile_server_ends_with_one_line(hostile, case):
    answer, words = GARBAGE[case]
    server = hostile(answer)
    code, err, took, _, _ = eventspace("ps", "stat", server.endpoint)
    print(f"ps stat, {case}: exit {code} in {took:.1f} s: {err}")
    one_line(code, err, server.endpoint, words)


def run_file_of(directory, endpoint: str) -> str:
    """A run file of the toy pathmap whose nodes all listen at `endpoint`, launched by this process."""
    pathmap = directory / "toy.pathmap.yaml"
    shutil.copy(REPO / "pathmaps" / "example-toy.yaml", pathmap)
    pid = os.getpid()
    data = {"pathmap_file": str(pathmap), "endpoints": {"A": endpoint, "B": endpoint}, "pids": {"A": pid, "B": pid},
            "started": time.time(), "owner": {"pid": pid, "host": socket.gethostname(), "since": process_start(pid)},
            "pathmap": "toy"}
    (directory / "toy.json").write_text(json.dumps(data))
    return str(directory / "toy.json")


# case -> (exit status, words its one line on stderr holds; None: what stdout's last line holds)
GETEVENT = {
    "nothing (pings only)": (2, "node A does not answer clock queries: no reply within", None),
    "not msgpack": (2, "malformed reply", None),
    # Its clock answers with a number, and every read with a number: the nodes are missing.
    "a result of the wrong shape": (0, None, "node A not answering since"),
}


@pytest.mark.parametrize("case", list(GETEVENT))
def test_getevent_on_a_hostile_server_ends_with_one_line(hostile, tmp_path, case):
    server = hostile(GARBAGE[case][0])
    code, words, summary = GETEVENT[case]
    run = run_file_of(tmp_path, server.endpoint)
    got, err, took, _, out = eventspace("monitor", "getevent", "--run", run, "--duration", "2",
                                        env={"EVENTSPACE_RUN_DIR": str(tmp_path), "COLUMNS": "400"})
    err = [line for line in err if not line.startswith("getevent: watching run")]
    print(f"getevent, {case}: exit {got} in {took:.1f} s: {err} {out[-1:]}")
    if words is None:
        assert got == code and err == [] and summary in out[-1], (got, err, out)
    else:
        assert got == code and len(err) == 1 and words in err[0] and "Traceback" not in err[0], (got, err)


def test_a_reply_over_the_reply_limit_is_refused_before_it_is_read(hostile):
    """The server answers `ps stat` with 2 x Limits.max_reply (128 MiB): a client once read a 1000 MB
    reply whole (2.0 GB at its peak)."""
    huge = pack([1, p.OK, bytes(2 * REPLY_LIMIT)])
    server = hostile(lambda rid, op: huge)
    code, err, took, peak, _ = eventspace("ps", "stat", server.endpoint)
    print(f"ps stat of a {len(huge):,}-byte reply: exit {code} in {took:.1f} s, peak {peak / 1024:.0f} MiB: {err}")
    one_line(code, err, server.endpoint, "Limits.max_reply")
    assert 0 < peak < (REPLY_LIMIT >> 10) + 100 * 1024, "the client read the reply"
