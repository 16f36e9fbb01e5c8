"""Every experiment runs end to end at the tiny scale and writes well-formed results."""

import json
import numbers
import subprocess

import pytest

from eventspace.cli import main
from experiments.cli import NAMES
from experiments.network import PREFIX, unavailable


@pytest.mark.slow
def test_every_experiment_writes_its_table_as_json_and_markdown(tmp_path, capsys):
    out = tmp_path / "results"
    assert main(["experiment", "all", "--quick", "--tiny", "--out", str(out)]) == 0
    ran = [name for name in NAMES if name != "clusters" or unavailable() is None]
    for name in ran:
        result = json.loads((out / f"{name}.json").read_text())
        assert result["name"] == name and result["rows"], name
        assert all(len(row) == len(result["columns"]) for row in result["rows"])
        figures = [v for row in result["rows"] for v in row if isinstance(v, numbers.Number)]
        assert figures and all(v > 0 for v in figures), (name, result["rows"])
        assert result["meta"]["scale"] == "tiny" and result["meta"]["cores"] >= 1
        assert (out / f"{name}.md").read_text().startswith(f"### {result['title']}")
    assert "# Experiment results" in (out / "README.md").read_text()
    assert "all done" in capsys.readouterr().out
    collect = json.loads((out / "collect.json").read_text())["raw"]["small"]["switched"]
    # the run-time switch comparison ran its pairs, each side timed
    assert len(collect["baseline_ms"]) == len(collect["treated_ms"]) == 2 and collect["pair_median"] > 0
    reconfigure = json.loads((out / "reconfigure.json").read_text())
    for label, figures in reconfigure["raw"].items():   # each row pulled as its label says, nothing carried over
        assert figures["settings"]["concurrency"] == ("sequential" if "sequential" in label else "concurrent"), label
        assert (figures["settings"]["max_rate"] is not None) == ("max" in label), label
        assert label.startswith(f"{figures['settings']['tree']}/{figures['settings']['placement']}"), label
    if "clusters" in ran:
        clusters = json.loads((out / "clusters.json").read_text())
        # The monitor sits in cluster 1: cluster 2 is behind the 5 ms (each way) link.
        assert clusters["meta"]["round_trip_ms"]["c2"] >= 10 > 2 > clusters["meta"]["round_trip_ms"]["c1"]
        kb = {(row[0], row[1], row[2]): row[-1] for row in clusters["rows"]}
        # Joins near the data that keep each thread's newest event send less across the link than
        # a flat pull, which carries every record to the monitor.
        for link in {row[0] for row in clusters["rows"]}:
            assert kb[link, "newest per thread", "per-cluster/near"] < kb[link, "newest per thread", "flat/monitor"]
        assert not [ns for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
                    .splitlines() if ns.startswith(PREFIX)]


def test_an_unknown_size_is_one_clear_line(tmp_path, capsys):
    assert main(["experiment", "collect", "--tiny", "--sizes", "huge", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown size huge" in err and err.count("\n") == 1
