"""Your own program, end to end: `eventspace run MODULE:FUNCTION`, the README's example, `--path`,
`--arg`, and the one line that says why a node cannot import the program."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pastset
from eventspace.cli import main
from paths import PathsError
from paths.runcommand import program_args
from runs import REPO, node_children

EXAMPLE = REPO / "examples" / "ownprogram"
README = (REPO / "README.md").read_text()


def eventspace(*argv, cwd, timeout=120):
    return subprocess.run([sys.executable, "-m", "eventspace.cli", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "COLUMNS": "120"})


def squares_of(rounds, items):
    return rounds * sum(i * i for i in range(items))


def readme_section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def test_the_readmes_program_and_application_map_are_the_example_files():
    section = readme_section("Writing your own program")
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)
    assert ("python", (EXAMPLE / "squares.py").read_text()) in blocks
    assert ("yaml", (EXAMPLE / "app.yaml").read_text()) in blocks
    assert "eventspace run squares:main --pathmap squares.yaml" in section
    assert "--path examples/ownprogram" in section


@pytest.mark.slow   # 6-7 s: make test-fast stays within its 3 minutes
def test_the_example_runs_through_the_command_from_its_directory(tmp_path):
    done = eventspace("run", "squares:main", "--pathmap", "squares.yaml", "--arg", "rounds=3", "--arg", "items=10",
                      "--json", cwd=EXAMPLE)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["program"], summary["pathmap"], summary["threads"], summary["nodes"]) == ("squares:main", "squares", 4, 2)
    results = summary["results"]
    assert results["T0"] == {"handled": 0, "squares": squares_of(3, 10)}
    assert sum(results[t]["handled"] for t in ("T1", "T2", "T3")) == 30
    # The run's name and run file, on stderr, in the session's run directory.
    (announced,) = [line for line in done.stderr.splitlines() if line.startswith("run squares")]
    assert announced == f"run squares: run file {os.environ['EVENTSPACE_RUN_DIR']}/squares.json"
    shown = eventspace("run", "squares:main", "--pathmap", "squares.yaml", "--args-json", '{"rounds": 2, "items": 5}',
                       cwd=EXAMPLE)
    assert shown.returncode == 0, shown.stderr
    assert "squares:main on squares" in shown.stdout and "2/2 steps" in shown.stdout
    assert f"'squares': {squares_of(2, 5)}" in shown.stdout and "4 threads on 2 nodes" in shown.stdout


@pytest.mark.slow   # 7-9 s: make test-fast stays within its 3 minutes
def test_from_another_directory_with_path_and_the_one_line_when_the_module_is_not_found(tmp_path):
    pathmap = str(EXAMPLE / "squares.yaml")
    found = eventspace("run", "squares:main", "--pathmap", pathmap, "--path", str(EXAMPLE), "--arg", "rounds=2",
                       "--json", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"]["T0"]["squares"] == squares_of(2, 20)
    lost = eventspace("run", "squares:main", "--pathmap", pathmap, "--json", cwd=tmp_path)
    assert lost.returncode == 2 and lost.stdout == ""
    assert "Traceback" not in lost.stderr
    (line,) = [line for line in lost.stderr.splitlines() if "cannot import" in line]
    assert line.startswith("eventspace run: node A cannot import program 'squares:main': No module named 'squares'")
    assert f"sys.path: {tmp_path}:" in line and str(EXAMPLE) not in line


def test_a_thread_that_fails_ends_the_run_with_one_line_naming_it(capsys):
    code = main(["run", "squares:main", "--pathmap", str(EXAMPLE / "squares.yaml"), "--path", str(EXAMPLE),
                 "--arg", "rounds=many"])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("eventspace run: thread T0 on node A raised ValueError: invalid literal for int()")
    assert "at squares.py:" in err[-1] and "in main (traceback in " in err[-1]


@pytest.mark.parametrize("argv, words", [
    (["--arg", "rounds"], "--arg 'rounds': write KEY=VALUE"),
    (["--args-json", "[1, 2]"], "--args-json: expected a JSON object, got list"),
    (["--args-json", "{rounds: 2}"], "--args-json: not JSON"),
    (["--path", "/no/such/dir"], "--path /no/such/dir: no such directory"),
])
def test_bad_options_are_one_line_before_anything_starts(capsys, argv, words):
    before = set(node_children())
    assert main(["run", "squares:main", "--pathmap", str(EXAMPLE / "squares.yaml"), *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert set(node_children()) == before


def test_a_module_the_pathmap_does_not_allow_is_refused_before_launching(capsys):
    before = set(node_children())
    assert main(["run", "os:system", "--pathmap", str(EXAMPLE / "squares.yaml")]) == 2
    err = capsys.readouterr().err
    assert "module 'os' is not in the pathmap's allow_modules" in err and "--allow-module os" in err
    assert set(node_children()) == before


def test_arg_values_are_json_when_they_are_json_else_text():
    assert program_args(None, ["n=3", "x=0.5", "on=true", "none=null", "list=[1, 2]", "name=T3",
                               'quoted="3"', "empty=", "eq=a=b"]) == {
        "n": 3, "x": 0.5, "on": True, "none": None, "list": [1, 2], "name": "T3", "quoted": "3", "empty": "",
        "eq": "a=b"}
    assert program_args('{"n": 1, "m": 2}', ["n=5"]) == {"n": 5, "m": 2}


def test_eventspace_node_imports_programs_from_path(tmp_path):
    """`eventspace node` on a host of its own: --path (and its working directory) is where the
    program's module is found, whatever directory the console script lives in."""
    pathmap = tmp_path / "one.yaml"
    done = eventspace("pathmap", "generate", "--app", str(EXAMPLE / "app.yaml"), "--cluster",
                      str(REPO / "pathmaps" / "inputs" / "one-node-cluster.yaml"), "--mapping", "block",
                      "--allow-module", "squares", "-o", str(pathmap), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for extra, imported in (([], False), (["--path", str(EXAMPLE)], True)):
        proc = subprocess.Popen([sys.executable, "-m", "eventspace.cli", "node", "--pathmap", str(pathmap),
                                 "--node", "A", "--bind", "tcp://127.0.0.1:0", *extra], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            endpoint = json.loads(proc.stdout.readline())["endpoint"]
            with pastset.connect(endpoint) as client:
                if not imported:
                    with pytest.raises(PathsError, match="node A cannot import program 'squares:main'"):
                        client.call("paths.start", "squares:main", {})
                    continue
                client.call("paths.start", "squares:main", {"rounds": 2, "items": 6})
                joined = client.call("paths.join", 60)
                assert joined["running"] == [] and joined["outcomes"]["T0"] == ["ok", {"handled": 0, "squares": 110}]
        finally:
            proc.terminate()
            proc.wait(20)
            proc.stdout.close()
            proc.stderr.close()


def test_a_thread_that_raises_ends_the_run_at_once_naming_it_and_leaves_nothing_running(tmp_path):
    """T1 raises in round 3 while the other threads wait for it in an allreduce: the run ends with
    exit status 2 and one line naming the thread, its error, where it raised and its node's log; the
    others are stopped (not left waiting for ever), and no node process remains."""
    from runs import PROGRAMS, TWO_NODES, pathmap_for, ring_app

    pm = tmp_path / "fails.yaml"
    pathmap_for(ring_app(4), TWO_NODES, name="fails").dump(pm)
    runs = tmp_path / "runs"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "eventspace.cli", "run", "programs:fails_in_round", "--pathmap",
                           str(pm), "--path", str(PROGRAMS), "--run-dir", str(runs), "--arg", "thread=T1",
                           "--arg", "round=3"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("eventspace run:")]
    line_no = next(i for i, text in enumerate((PROGRAMS / "programs.py").read_text().splitlines(), 1)
                   if "return step / 0" in text)
    assert "thread T1 on node A raised ZeroDivisionError: division by zero" in line, line
    assert f"at programs.py:{line_no} in fails_in_round" in line and "3 other threads stopped" in line, line
    log = re.search(r"traceback in (\S+)\)", line).group(1)
    assert "ZeroDivisionError" in open(log).read()
    assert took < 60, took   # not the allreduce's 600 s timeout
    assert not list(runs.glob("*.json")) and not processes_mentioning(str(runs))


def processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line holds `text` (a run's node processes name its
    pathmap snapshot, in the run directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
