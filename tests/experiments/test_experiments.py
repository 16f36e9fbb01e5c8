"""Every experiment runs end to end at the tiny scale and writes well-formed results."""

import json
import numbers

import pytest

from eventspace.cli import main
from experiments.cli import NAMES


@pytest.mark.slow
def test_every_experiment_writes_its_table_as_json_and_markdown(tmp_path, capsys):
    out = tmp_path / "results"
    assert main(["experiment", "all", "--quick", "--tiny", "--out", str(out)]) == 0
    for name in NAMES:
        result = json.loads((out / f"{name}.json").read_text())
        assert result["name"] == name and result["rows"], name
        assert all(len(row) == len(result["columns"]) for row in result["rows"])
        figures = [v for row in result["rows"] for v in row if isinstance(v, numbers.Number)]
        assert figures and all(v > 0 for v in figures), (name, result["rows"])
        assert result["meta"]["scale"] == "tiny" and result["meta"]["cores"] >= 1
        assert (out / f"{name}.md").read_text().startswith(f"### {result['title']}")
    assert "# Experiment results" in (out / "README.md").read_text()
    assert "all done" in capsys.readouterr().out


def test_an_unknown_size_is_one_clear_line(tmp_path, capsys):
    assert main(["experiment", "collect", "--tiny", "--sizes", "huge", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown size huge" in err and err.count("\n") == 1
