"""`eventspace monitor getevent` when its output or its run fails it.

Faults, one per test:
- the archive to append to is read-only: one line naming the file and what to do, exit 2, file untouched;
- a node of the run is killed while getevent streams: its last line names the node, and says gone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading

import pytest
from polling import until
from runs import windtunnel_with_source_collectors

from eventspace.catalogue import Catalogue
from eventspace.cli import main
from monitors.archive import Archive


@pytest.fixture
def live(tmp_path):
    """The 2-node wind tunnel with a collector at every path's source, running for two minutes."""
    with windtunnel_with_source_collectors(tmp_path / "runs") as run:
        yield run


class ReadOnly:
    """Make a file read-only for everyone, root included (root ignores mode bits: then `chattr +i`)."""

    def __init__(self, path):
        self.path = path
        self.immutable = os.geteuid() == 0
        if self.immutable:
            if not shutil.which("chattr"):
                pytest.skip("running as root without chattr: cannot make a file read-only for root")
            made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
            if made.returncode:
                pytest.skip(f"running as root and `chattr +i` failed: {made.stderr.strip()}")
        else:
            path.chmod(0o444)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.immutable:
            subprocess.run(["chattr", "-i", str(self.path)], check=True)
        else:
            self.path.chmod(0o644)


def test_getevent_to_a_read_only_archive_names_the_file_and_what_to_do(live, tmp_path, capsys):
    """getevent --out events.sqlite where events.sqlite is an archive of this run that cannot be written."""
    out = tmp_path / "events.sqlite"
    Archive(out, Catalogue(live.pathmap)).close()
    before = hashlib.sha256(out.read_bytes()).hexdigest()
    with ReadOnly(out):
        capsys.readouterr()
        code = main(["monitor", "getevent", "--run", live.run_file.path, "--out", str(out), "--duration", "1",
                     "--interval", "0.1"])
        err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert str(out) in err[0] and "read-only" in err[0] and "readonly database" not in err[0], err[0]
    assert "new file" in err[0] or "writable" in err[0], err[0]
    assert hashlib.sha256(out.read_bytes()).hexdigest() == before


def test_getevent_names_a_node_that_died_while_it_streamed(live, tmp_path, capsys):
    """kill -9 node B while getevent streams: it still exits 0, and its summary names B as gone."""
    def kill_b():
        # Once getevent streams (its archive opens when its scope is set up and its clocks are read).
        until(lambda: (tmp_path / "e.sqlite").exists(), 60, "getevent streaming into its archive")
        live.kill("B")

    killer = threading.Thread(target=kill_b, daemon=True)
    killer.start()
    capsys.readouterr()
    code = main(["monitor", "getevent", "--run", live.run_file.path, "--out", str(tmp_path / "e.sqlite"),
                 "--duration", "5", "--interval", "0.2"])
    killer.join(10)
    out = capsys.readouterr().out
    assert code == 0
    out = " ".join(out.split())   # rich wraps long lines
    assert "node B gone since" in out and "node A" not in out, out
