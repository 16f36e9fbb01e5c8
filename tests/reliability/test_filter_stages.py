"""A filter stage that validation passed and the node then refused to build, with a traceback.

`eventspace pathmap validate` runs the parse a node makes when it builds a filter stage
(`paths.wrapper.Filter.parse`), and a node that is given such a stage anyway says so in one line.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from runs import REPO

from eventspace.cli import main
from paths import NodeServer, Pathmap, PathmapError, PathsError

TOY = (REPO / "pathmaps" / "windtunnel-toy.yaml").read_text()
PATH = "  T0/up0_0: {thread: T0, element: up0_0, stages: [up0_0/element]}\n"
STAGE = "  up0_0/element: {type: element, node: A, params: {element: up0_0}}\n"
# Expressions the filter's parser refuses, and a word of its message.
REFUSED = {
    "unknown field": ("size > 3", "unknown field 'size'"),
    "a call": ('__import__("os").system("true")', "call is not allowed"),
    "syntax": ("f0 >", "does not parse"),
    "nested too deeply": ("+".join(["f0"] * 600) + " > 0", "nested too deeply"),
    "a string computed with": ('"x" * 3000000000 == f0', "arithmetic takes numbers"),
}


def with_filter(where: str) -> tuple[str, int]:
    """The wind-tunnel toy pathmap with a filter stage on T0's path to up0_0, and the stage's line."""
    text = TOY.replace(STAGE, STAGE + f"  T0/up0_0/filter: {{type: filter, node: A, params: {{where: {where!r}}}}}\n")
    text = text.replace(PATH, "  T0/up0_0: {thread: T0, element: up0_0, stages: [T0/up0_0/filter, up0_0/element]}\n")
    return text, TOY[:TOY.index(STAGE)].count("\n") + 2


@pytest.mark.parametrize("case", list(REFUSED))
def test_validate_refuses_a_filter_the_node_would_refuse(case, tmp_path, capsys):
    """Attack: `validate` said ok for a filter stage whose expression the node refused at launch."""
    where, words = REFUSED[case]
    text, line = with_filter(where)
    bad = tmp_path / "filter.yaml"
    bad.write_text(text)
    assert main(["pathmap", "validate", str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{bad}:{line}: stages.T0/up0_0/filter.params.where: filter ") and words in out[0], out
    assert out[-1] == f"1 problem in {bad}"


def test_a_launch_with_such_a_filter_fails_in_one_line(tmp_path):
    """Attack: `eventspace run` on that pathmap failed with the node's traceback lines in its message."""
    text, line = with_filter("size > 3")
    (tmp_path / "filter.yaml").write_text(text)
    done = subprocess.run([sys.executable, "-m", "eventspace.cli", "run", "windtunnel", "--pathmap", "filter.yaml",
                           "--steps", "2"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and 'File "' not in done.stderr, done.stderr
    assert f"filter.yaml:{line}: stages.T0/up0_0/filter.params.where: filter 'size > 3': unknown field 'size'" \
        in done.stderr


def test_a_node_given_such_a_filter_says_so_in_one_line():
    """Attack: a node built from an unvalidated pathmap raised ExpressionError from deep in the parser."""
    good, _ = with_filter("f0 > 0")
    pm = Pathmap.loads(good)
    bad = dataclasses.replace(pm, stages=tuple(
        dataclasses.replace(s, params={"where": "size > 3"}) if s.type == "filter" else s for s in pm.stages))
    with pytest.raises(PathmapError):
        bad.validate()
    with pytest.raises(PathsError) as info:
        NodeServer(bad, "A")
    assert str(info.value).startswith("stage T0/up0_0/filter: filter 'size > 3': unknown field 'size'")
    assert "\n" not in str(info.value)
