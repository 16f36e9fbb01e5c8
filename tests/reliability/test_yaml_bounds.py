"""YAML inputs that cost unbounded time or memory: merge-key bombs, deep nesting, huge files, floods of errors.

Every YAML the project reads (pathmaps, application, cluster and application-to-cluster maps)
goes through `paths.document`, which refuses these before PyYAML builds anything. The commands
run as subprocesses with a time limit (and an address-space limit), so that an unbounded read
fails the test instead of hanging the suite or swamping the machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap

import pytest
from runs import REPO

TOY = (REPO / "pathmaps" / "example-toy.yaml").read_text()
INPUTS = REPO / "pathmaps" / "inputs"
DEFAULT_LIMIT = 16 * 1024 * 1024   # the documented default size limit (README, paths/document.py)
SECONDS = 20                       # far beyond what a refusal takes (under a second of work)
ADDRESS_SPACE = 3 << 30            # a bomb on main grows to gigabytes; stop it at 3 GiB


def eventspace(*argv: str, cwd, env: dict | None = None, timeout: float = SECONDS) -> subprocess.CompletedProcess:
    """`eventspace ARGV` in a subprocess limited in time and address space."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    return subprocess.run([sys.executable, "-m", "eventspace.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, **(env or {})}, preexec_fn=limit,
                          stdin=subprocess.DEVNULL)


def anchors(levels: int, fan: int = 9) -> list[str]:
    """Mapping entries `aI: &aI {<<: [*aJ, ...]}`: each level merges `fan` copies of the one below."""
    lines = ["a0: &a0 {n: 0}"]
    lines += [f"a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * fan)}]}}" for i in range(1, levels + 1)]
    return lines


def bomb(levels: int = 8) -> str:
    """The issue's merge-key bomb (about 500 bytes): `<<` over 9 aliases, `levels` levels, merged at the top."""
    return "\n".join(anchors(levels)) + f"\n<<: *a{levels}\n"


def with_params_bomb(levels: int = 8) -> str:
    """The example-toy pathmap with the bomb inside one stage's `params`."""
    line = "  samples/element: {type: element, node: A, params: {element: samples}}"
    inner = ", ".join(anchors(levels))
    return TOY.replace(line, f"  samples/element: {{type: element, node: A, params: {{element: samples, "
                             f"{inner}, <<: *a{levels}}}}}")


def refused(done: subprocess.CompletedProcess, file: str, *words: str) -> str:
    """`pathmap validate` refused FILE: exit 1, one problem line naming it, then the count."""
    lines = done.stdout.splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 2 and lines[1] == f"1 problem in {file}", lines[:5]
    assert lines[0].startswith(f"{file}:") and all(w in lines[0] for w in words), lines[0]
    return lines[0]


def test_a_merge_bomb_at_the_top_of_a_pathmap(tmp_path):
    """Attack: 500 bytes of `<<` over 9 aliases, 8 levels deep: main ran past 60 s at 3.7 GiB, silent."""
    (tmp_path / "bomb.yaml").write_text("name: bomb\n" + bomb())
    refused(eventspace("pathmap", "validate", "bomb.yaml", cwd=tmp_path), "bomb.yaml", "(yaml): aliases",
            "more than 100,000 YAML nodes")


def test_a_merge_bomb_inside_stage_params(tmp_path):
    """Attack: the same bomb inside one stage's `params` of a valid pathmap."""
    (tmp_path / "params.yaml").write_text(with_params_bomb())
    refused(eventspace("pathmap", "validate", "params.yaml", cwd=tmp_path), "params.yaml", "(yaml): aliases")


@pytest.mark.parametrize("option, valid", [("--app", INPUTS / "toy-app.yaml"),
                                           ("--cluster", INPUTS / "toy-cluster.yaml"),
                                           ("--mapping", INPUTS / "block.yaml")])
def test_a_merge_bomb_in_a_generator_input(tmp_path, option, valid):
    """Attack: the bomb in an application map, a cluster map or an application-to-cluster map."""
    (tmp_path / "bomb.yaml").write_text(valid.read_text() + bomb())
    inputs = {"--app": str(INPUTS / "toy-app.yaml"), "--cluster": str(INPUTS / "toy-cluster.yaml"),
              "--mapping": str(INPUTS / "block.yaml"), option: "bomb.yaml"}
    done = eventspace("pathmap", "generate", *[x for pair in inputs.items() for x in pair], "-o", "out.yaml",
                      cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert done.stderr.startswith("eventspace pathmap: bomb.yaml:") and "(yaml): aliases" in done.stderr
    assert not (tmp_path / "out.yaml").exists()


def test_nesting_30000_deep_is_refused_not_a_crash(tmp_path):
    """Attack: 30,000 nested lists made PyYAML's C composer segfault (exit -11, no message)."""
    (tmp_path / "deep.yaml").write_text("name: deep\nnodes: " + "[" * 30000 + "]" * 30000 + "\n")
    refused(eventspace("pathmap", "validate", "deep.yaml", cwd=tmp_path), "deep.yaml", "deep.yaml:2: (yaml):",
            "more than 100 levels")
    done = eventspace("pathmap", "show", "deep.yaml", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "more than 100 levels" in done.stderr


def test_an_alias_inside_what_it_names_is_refused(tmp_path):
    """Attack: a self-containing alias (`&n {<<: *n}`), which main read as an empty section."""
    (tmp_path / "loop.yaml").write_text("name: loop\nnodes: &n {A: {host: 127.0.0.1}, <<: *n}\n")
    refused(eventspace("pathmap", "validate", "loop.yaml", cwd=tmp_path), "loop.yaml", "loop.yaml:2: (yaml):",
            "alias *n is inside what &n names")


def test_a_file_above_the_configured_size_limit(tmp_path):
    """Attack: a 200 MB pathmap took 5 min and 9.5 GiB; the limit is configurable, so a small one shows it."""
    (tmp_path / "toy.yaml").write_text(TOY)
    size = len(TOY.encode())
    done = eventspace("pathmap", "validate", "toy.yaml", cwd=tmp_path, env={"EVENTSPACE_YAML_MAX_BYTES": "4096"})
    refused(done, "toy.yaml", f"toy.yaml: (file): {size:,} bytes, more than the 4,096 bytes",
            "EVENTSPACE_YAML_MAX_BYTES")
    raised = eventspace("pathmap", "validate", "toy.yaml", cwd=tmp_path,
                        env={"EVENTSPACE_YAML_MAX_BYTES": str(size)})
    assert raised.returncode == 0 and raised.stdout.startswith("ok: toy.yaml"), raised.stdout


def test_the_default_size_limit(tmp_path):
    """Attack: a file just above the default limit (16 MiB of comments after a valid pathmap) is refused
    before it is read; one exactly at the limit is read."""
    body = TOY.encode() + b"# padding\n"
    pad = DEFAULT_LIMIT - len(body) - 1
    (tmp_path / "at.yaml").write_bytes(body + b"#" * pad + b"\n")
    (tmp_path / "above.yaml").write_bytes(body + b"#" * (pad + 1) + b"\n")
    refused(eventspace("pathmap", "validate", "above.yaml", cwd=tmp_path), "above.yaml",
            f"above.yaml: (file): {DEFAULT_LIMIT + 1:,} bytes, more than the {DEFAULT_LIMIT:,} bytes")
    done = eventspace("pathmap", "validate", "at.yaml", cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("ok: at.yaml"), done.stdout[-500:]


def test_a_file_of_tiny_nodes_under_the_size_limit_is_refused_before_it_is_built(tmp_path):
    """Attack: a pathmap just under 16 MiB made of the smallest YAML nodes there are (`[a,a,a,...]`, two
    bytes each, 8 million of them) took 132 s and 2.0 GB; PyYAML takes some 370 bytes a node."""
    head = "name: tiny\nnodes: ["
    count = (DEFAULT_LIMIT - len(head) - 4) // 2
    (tmp_path / "tiny.yaml").write_text(head + "a," * count + "a]\n")
    assert (tmp_path / "tiny.yaml").stat().st_size <= DEFAULT_LIMIT
    refused(eventspace("pathmap", "validate", "tiny.yaml", cwd=tmp_path), "tiny.yaml", "tiny.yaml:2: (yaml):",
            "more than 1,048,576 YAML nodes", "EVENTSPACE_YAML_MAX_BYTES")


def test_a_bad_size_limit_setting_is_one_clear_line(tmp_path):
    """Attack: EVENTSPACE_YAML_MAX_BYTES that is not a number; main ignored it."""
    (tmp_path / "toy.yaml").write_text(TOY)
    done = eventspace("pathmap", "show", "toy.yaml", cwd=tmp_path, env={"EVENTSPACE_YAML_MAX_BYTES": "lots"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "EVENTSPACE_YAML_MAX_BYTES='lots' is not a positive whole number of bytes" in done.stderr


def test_repeated_duplicate_key_errors_are_told_once(tmp_path):
    """Attack: a 6-level merge printed 531,449 identical "duplicate key" lines (4 levels here: 6,561 on main)."""
    (tmp_path / "dup.yaml").write_text("name: dup\n" + "\n".join(anchors(4)) + "\nnodes: {<<: *a4}\n")
    done = eventspace("pathmap", "validate", "dup.yaml", cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert done.returncode == 1 and len(lines) == len(set(lines)), f"{len(lines)} lines, {len(set(lines))} distinct"
    # PyYAML before 6.0.3 keeps every merged copy of `n` (one problem, told once); later ones
    # merge them as YAML says (the first wins), so there is none.
    assert sum("duplicate key 'n'" in line for line in lines) <= 1 and len(lines) < 12, lines
    assert lines[-1] == f"{len(lines) - 1} problems in dup.yaml"


def test_a_flood_of_distinct_errors_is_capped(tmp_path):
    """Attack: a pathmap with 1,001 problems printed 1,001 lines; now 100, then '… and 901 more problems'."""
    (tmp_path / "many.yaml").write_text("name: many\n" + "".join(f"bogus{i}: 1\n" for i in range(1000)))
    done = eventspace("pathmap", "validate", "many.yaml", cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert done.returncode == 1 and len(lines) == 102, len(lines)
    assert lines[100:] == ["… and 901 more problems", "1001 problems in many.yaml"], lines[99:]


def test_never_an_empty_message_when_memory_runs_out(tmp_path):
    """Attack: running out of memory on a big pathmap printed `eventspace pathmap: ` and nothing else."""
    line = "  pad/{:07d}/remote: {{type: remote, node: A}}\n"
    (tmp_path / "big.yaml").write_text(TOY.replace("stages:\n", "stages:\n" + "".join(
        line.format(i) for i in range(100_000)), 1))
    # The process limits itself to what it has after start-up plus 128 MiB, so memory runs out early.
    script = textwrap.dedent("""\
        import resource, sys
        from eventspace.cli import build_parser, main
        build_parser()
        size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + (128 << 20),) * 2)
        sys.exit(main(sys.argv[1:]))
    """)
    done = subprocess.run([sys.executable, "-c", script, "pathmap", "show", "big.yaml"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL,
                          env={**os.environ, "EVENTSPACE_YAML_MAX_BYTES": str(1 << 30)})
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    message = done.stderr.removeprefix("eventspace pathmap:").strip()
    assert message.startswith("ran out of memory (MemoryError)"), done.stderr
