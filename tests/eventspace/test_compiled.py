"""Which collector a node runs: compiled by default, pure on request or when the extension was not built."""

import os
import shutil
import subprocess
import sys

from runs import REPO

# Two node servers start in one process (two node starts), collect one move each, and report.
NODES = """\
import dataclasses, warnings
warnings.simplefilter("default")
import eventspace
from eventspace.catalogue import Catalogue
from paths import AppMap, ClusterMap, Context, Instrument, NodeServer, Placement, Selector, generate
app = "threads: 1\\nelements:\\n  - {name: s, template: '=IQ', keep: 5, users: [T0]}\\n"
pm = generate(AppMap.loads(app), ClusterMap.loads("clusters: {c: {nodes: {A: {host: 127.0.0.1}}}}"),
              Placement(), "flat", name="which")
pm = dataclasses.replace(pm, instrument=Instrument(collectors=(Selector(at=("source",)),))).validate()
for _ in range(2):
    node = NodeServer(pm, "A")
    Context(node, "T0", {}).path("s").move((1, 2))
    (entry,) = Catalogue(pm)
    print(node.services["eventspace"].implementation, node.server.element(entry.trace).last(),
          eventspace.__file__.startswith(%r))
    node.close()
"""


def nodes(root, **env):
    """(lines printed, stderr) of NODES run with the packages under `root` and `env` (no EVENTSPACE_PURE else)."""
    inherited = {k: v for k, v in os.environ.items() if k != "EVENTSPACE_PURE"}
    done = subprocess.run([sys.executable, "-c", NODES % str(root)], cwd=root, capture_output=True, text=True,
                          timeout=120, env={**inherited, "PYTHONPATH": str(root), **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")[:2], done.stderr


def test_a_node_runs_the_compiled_collector_by_default_and_the_pure_one_on_request():
    out, err = nodes(REPO)
    assert out == ["compiled 1 True"] * 2 and "compiled collector" not in err
    out, err = nodes(REPO, EVENTSPACE_PURE="1")
    assert out == ["pure 1 True"] * 2 and "compiled collector" not in err


def test_without_the_built_extension_a_node_runs_the_pure_collector_and_warns_once(tmp_path):
    # A checkout where the extension was not built: the sources, without any compiled module.
    for package in ("pastset", "paths", "eventspace"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    out, err = nodes(tmp_path)
    assert out == ["pure 1 True"] * 2
    assert err.count("the compiled collector is not built") == 1, err
    assert "RuntimeWarning" in err and "pip install -e ." in err
