"""CURVE: authorised clients talk, everyone else is refused at once; keys, the process default, the bind policy, the CLI."""

import dataclasses
import os
import select
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq

import pastset
from pastset import AuthError, Refused, Security, ServerGone, TupleServer, connect
from pastset import protocol as p
from eventspace.cli import main
from pastset import security
from pastset.fanout import Fanout

SCRIPT = Path(sys.executable).parent / "eventspace"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "eventspace.cli"]


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    """A key directory as `eventspace keys generate` writes it."""
    base = tmp_path_factory.mktemp("keys") / "run"
    security.generate(base)
    return base


@pytest.fixture(scope="module")
def stranger(tmp_path_factory) -> Security:
    """Keys of another key directory: a valid key pair the server never authorised."""
    base = tmp_path_factory.mktemp("keys") / "other"
    security.generate(base)
    return Security.load(base)


@pytest.fixture
def curve(keys):
    """(server, endpoint): a TupleServer served with CURVE and the keys' authorised clients."""
    server = TupleServer("curve")
    endpoint = server.serve("tcp://127.0.0.1:0", Security.load(keys))
    yield server, endpoint
    server.close()


@pytest.fixture(autouse=True)
def no_process_keys(monkeypatch):
    """Each test starts with plaintext as the process's keys, whatever the environment holds."""
    monkeypatch.delenv(security.KEYS_ENV, raising=False)
    security.use(None)
    yield
    security.use(None)


def test_an_authorised_client_moves_and_observes(curve, keys):
    server, endpoint = curve
    with connect(endpoint, security=Security.load(keys)) as client:
        assert client.ping() == "curve"
        jobs = client.enter("jobs", ["int", "str"])
        assert jobs.move((1, "one")) == 0
        assert jobs.observe() == (1, "one")
        # A parked observe is woken by an in-process move (the endpoint's inproc waker works
        # beside the CURVE socket).
        local = server.element("jobs")
        start = time.monotonic()
        mover = threading.Timer(0.2, lambda: local.move((2, "two")))
        mover.start()
        assert jobs.observe(timeout=5) == (2, "two")
        mover.join()
        assert time.monotonic() - start < 3
        assert jobs.move((3, "three")) == 2
        assert client.latest_many(["jobs"]) == [(2, [(3, "three")])]


def test_fanout_speaks_curve_with_the_keys_it_is_given(curve, keys, stranger):
    _, endpoint = curve
    fanout = Fanout({"n": endpoint}, security=Security.load(keys))
    try:
        pull = fanout.round(timeout=5)
        name = pull.ping("n")
        assert pull.wait() == set() and name.result() == "curve"
    finally:
        fanout.close()
    for refused in (Security(), stranger):
        fanout = Fanout({"n": endpoint}, security=refused)
        try:
            pull = fanout.round(timeout=0.3)
            name = pull.ping("n")
            assert pull.wait() == {"n"} and not name.answered
        finally:
            fanout.close()


def test_a_client_with_an_unauthorised_key_is_refused(curve, keys, stranger):
    _, endpoint = curve
    # The right server key, but a client key pair the server's directory does not hold.
    unauthorised = dataclasses.replace(Security.load(keys), client_public=stranger.client_public,
                                       client_secret=stranger.client_secret)
    start = time.monotonic()
    with pytest.raises(Refused, match="does not authorise this client's CURVE key") as refused:
        connect(endpoint, timeout=3, security=unauthorised)
    assert time.monotonic() - start < 3
    assert isinstance(refused.value, ServerGone) and isinstance(refused.value, AuthError)
    # A whole other key directory: its server key is not this server's either.
    with pytest.raises(Refused, match="CURVE handshake failed"):
        connect(endpoint, timeout=3, security=stranger)


def test_a_plaintext_client_cannot_talk_to_a_curve_server(curve):
    _, endpoint = curve
    start = time.monotonic()
    with pytest.raises(ServerGone, match="the server uses CURVE and this client has no keys; set EVENTSPACE_KEYS"):
        connect(endpoint, timeout=2, security=Security())
    assert time.monotonic() - start < 2.5
    # A bare socket's requests go unanswered: nothing reaches the server's loop.
    ctx = zmq.Context()
    try:
        raw = ctx.socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(endpoint)
        raw.send(msgpack.packb([1, p.PING]))
        assert raw.poll(500) == 0
    finally:
        ctx.destroy(linger=0)


def test_a_curve_client_is_told_that_a_plaintext_server_does_not_speak_curve(keys):
    with TupleServer("plain") as server:
        endpoint = server.serve("tcp://127.0.0.1:0", Security())
        with pytest.raises(Refused, match="the server does not use CURVE"):
            connect(endpoint, timeout=2, security=Security.load(keys))


def test_silence_is_still_plain_server_gone(keys):
    start = time.monotonic()
    with pytest.raises(ServerGone, match="no node server answers") as gone:
        connect("tcp://127.0.0.1:1", timeout=0.3, security=Security.load(keys))
    assert not isinstance(gone.value, Refused)
    assert time.monotonic() - start < 1.5


def test_the_process_keys_come_from_eventspace_keys(curve, keys, monkeypatch):
    _, endpoint = curve
    assert security.default() == Security()
    monkeypatch.setenv("EVENTSPACE_KEYS", str(keys))
    assert security.default() == Security.load(keys)
    with connect(endpoint) as client:  # no keys given: the environment's
        assert client.ping() == "curve"
    # A server given no keys serves CURVE with them too.
    with TupleServer("env") as server, pytest.raises(Refused):
        connect(server.serve(), timeout=2, security=Security())
    monkeypatch.setenv("EVENTSPACE_KEYS", str(keys / "nowhere"))
    with pytest.raises(AuthError, match=r"EVENTSPACE_KEYS=.*nowhere.*does not exist"):
        connect(endpoint)


def test_use_overrides_the_environment(curve, keys, monkeypatch):
    monkeypatch.setenv("EVENTSPACE_KEYS", str(keys / "nowhere"))
    security.use(Security.load(keys))
    with connect(curve[1]) as client:
        assert client.ping() == "curve"


def test_secret_keys_are_never_printed(keys):
    loaded = Security.load(keys)
    assert loaded.client_secret.decode() not in repr(loaded)
    assert loaded.server_secret.decode() not in repr(loaded)


def test_key_directory_problems_name_the_file(tmp_path, keys):
    assert security.problems(keys, serve=True) == []
    assert "does not exist" in security.problems(tmp_path / "none")[0]
    partial = tmp_path / "partial"
    security.generate(partial)
    (partial / "client.key_secret").unlink()
    os.chmod(partial / "server.key_secret", 0o644)
    for f in (partial / "authorized_clients").iterdir():
        f.unlink()
    found = "\n".join(security.problems(partial))
    assert f"{partial / 'client.key_secret'} is missing" in found
    assert f"chmod 600 {partial / 'server.key_secret'}" in found
    assert "holds no *.key file" in found
    with pytest.raises(AuthError, match="client.key_secret is missing"):
        Security.load(partial)
    # A monitor's directory: the server's public key and a client pair, nothing to serve with.
    monitor = tmp_path / "monitor"
    monitor.mkdir()
    for name in ("server.key", "client.key_secret"):
        (monitor / name).write_bytes((keys / name).read_bytes())
    os.chmod(monitor / "client.key_secret", 0o600)
    loaded = Security.load(monitor)
    assert loaded.connects and not loaded.serves
    assert any("server.key_secret is missing" in m for m in security.problems(monitor, serve=True))


@pytest.mark.parametrize("bind, exposed", [
    ("tcp://127.0.0.1:0", False), ("tcp://localhost:5555", False), ("tcp://[::1]:0", False),
    ("ipc:///tmp/x", False), ("tcp://0.0.0.0:0", True), ("tcp://192.0.2.1:5555", True),
])
def test_a_non_loopback_bind_needs_curve_or_insecure(bind, exposed, keys, capsys):
    assert (security.bind_problem(bind, Security()) is not None) == exposed
    assert security.bind_problem(bind, Security.load(keys)) is None
    if exposed:
        with pytest.raises(pastset.PastSetError, match="refusing to bind .*--insecure"):
            security.check_bind(bind, Security(), insecure=False)
        security.check_bind(bind, Security(), insecure=True)
        assert "warning: serving" in capsys.readouterr().err
    security.check_bind(bind, Security.load(keys), insecure=False)
    assert capsys.readouterr().err == ""


# -- the command line ---------------------------------------------------------------------------------

def test_keys_generate_writes_owner_only_secret_keys(tmp_path, capsys):
    target = tmp_path / "k"
    assert main(["keys", "generate", str(target)]) == 0
    out = capsys.readouterr().out
    modes = {str(f.relative_to(target)): stat.S_IMODE(f.stat().st_mode) for f in target.rglob("*")}
    assert modes == {"server.key": 0o644, "server.key_secret": 0o600, "client.key": 0o644,
                     "client.key_secret": 0o600, "authorized_clients": 0o700,
                     "authorized_clients/client.key": 0o644}
    assert f"security: {{keys: {target}}}" in out and f"EVENTSPACE_KEYS={target}" in out
    assert Security.load(target).serves
    assert main(["keys", "generate", str(target)]) == 2
    assert "already holds keys" in capsys.readouterr().err
    before = (target / "client.key_secret").read_text()
    assert main(["keys", "generate", str(target), "--force"]) == 0
    assert (target / "client.key_secret").read_text() != before
    assert stat.S_IMODE((target / "client.key_secret").stat().st_mode) == 0o600


def test_serve_on_every_address_is_refused_without_keys(capsys):
    assert main(["serve", "--bind", "tcp://0.0.0.0:0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to bind tcp://0.0.0.0:0" in err and "EVENTSPACE_KEYS" in err and "--insecure" in err


def test_serve_on_every_address_with_keys_serves_curve_only(keys):
    env = {**os.environ, "EVENTSPACE_KEYS": str(keys)}
    proc = subprocess.Popen([*COMMAND, "serve", "--bind", "tcp://0.0.0.0:0", "--name", "open"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("serving on tcp://0.0.0.0:") and "(CURVE" in line, line
        endpoint = "tcp://127.0.0.1:" + line.split()[2].rsplit(":", 1)[1]
        with connect(endpoint, security=Security.load(keys)) as client:
            assert client.ping() == "open"
        with pytest.raises(Refused):
            connect(endpoint, timeout=2, security=Security())
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "warning" not in err
