"""The pastset subcommands of `eventspace`, run as real processes: serve, ps stat."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness import TRACE
from pastset import connect

SCRIPT = Path(sys.executable).parent / "eventspace"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "eventspace.cli"]
ENV = {**os.environ, "COLUMNS": "200"}


@pytest.fixture
def run():
    """`run(*args)` -> the finished process (stdout, stderr, returncode); every process is reaped."""
    started: list[subprocess.Popen] = []

    def finished(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        proc = subprocess.Popen([*COMMAND, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=ENV)
        started.append(proc)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    yield finished
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
    assert all(proc.returncode is not None for proc in started)


@pytest.fixture
def serve():
    """`serve(*args)` -> a running `eventspace serve` process; each is terminated and reaped."""
    started: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen([*COMMAND, "serve", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=ENV)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


def free_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("bind", ["tcp://0.0.0.0:0", "tcp://192.0.2.1:5555", "tcp://example.com:5555"])
def test_serve_refuses_a_non_loopback_bind_without_insecure(run, bind):
    done = run("serve", "--bind", bind)
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert bind in lines[0] and "--insecure" in lines[0]


def test_serve_with_insecure_warns_and_serves(serve):
    proc = serve("--bind", "tcp://0.0.0.0:0", "--insecure", "--name", "open")
    line = proc.stdout.readline()
    assert line.startswith("serving on tcp://0.0.0.0:"), line
    with connect("tcp://127.0.0.1:" + line.strip().rsplit(":", 1)[1]) as client:
        assert client.ping() == "open"
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "warning: serving tcp://0.0.0.0:0 without authentication" in err


def test_serve_then_stat_lists_the_elements(serve, run):
    proc = serve("--bind", "tcp://127.0.0.1:0", "--name", "cli-node")
    line = proc.stdout.readline()
    assert line.startswith("serving on tcp://127.0.0.1:"), line
    endpoint = line.split()[-1]
    with connect(endpoint) as client:
        trace = client.enter("trace/T0", TRACE, keep=100)
        for i in range(5):
            trace.move((1, 2, 3, 4, 5, 6, 7, i))
        client.enter("jobs", ["int", "str"], delta=8).move((1, "one"))
        client.enter("[bold]odd", ["any"])
    done = run("ps", "stat", endpoint)
    assert done.returncode == 0, done.stderr
    assert "cli-node" in done.stdout and endpoint in done.stdout
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in done.stdout.splitlines() if line.count("│") >= 9}
    assert rows["trace/T0"] == [TRACE, "0", "5", "5", "100", "-", "180"]
    assert rows["jobs"] == ["[int, str]", "0", "1", "1", "-", "8", "3"]
    assert rows["[bold]odd"] == ["[any]", "0", "0", "0", "-", "-", "0"]
    proc.terminate()
    assert proc.wait(timeout=10) == 0


def test_stat_of_a_dead_endpoint_is_one_line_and_fails(run):
    endpoint = free_endpoint()
    done = run("ps", "stat", endpoint, "--timeout", "0.5")
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and endpoint in lines[0], done.stderr
