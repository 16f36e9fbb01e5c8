"""`allow_modules` bypasses: a `module:name` reference that walks out of an allowed module.

Every place a pathmap, a scope or a command names code resolves it through
`paths.registry.load_reference`: wrapper types, stage functions (`fn`), programs and scope
reductions. Validation refuses what it can see in the text (file:line); resolution refuses what
the module does not define itself.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from runs import ENV, REPO, node_children, pathmap_for, ring_app

from eventspace.cli import main
from eventspace.stages import ScopeStage, StageError
from paths import NodeServer, Pathmap, PathmapError, PathsError, Stage, launch
from paths.registry import load_reference

TOY = (REPO / "pathmaps" / "example-toy.yaml").read_text()
ONE_NODE = "clusters: {c1: {nodes: {A: {host: 127.0.0.1}}}}"
# Attribute chains from the allowed module `json` to builtins, sys and any function's globals.
CHAINS = ["json:codecs.builtins.__import__", "json:codecs.sys.modules", "json:codecs.builtins.exec",
          "json:JSONDecoder.__init__.__globals__", "json:decoder.scanner.re.sys.exit"]


def with_stage(stage: str) -> tuple[str, int]:
    """The example-toy pathmap with one more stage (YAML flow text) and the line it is on."""
    anchor = "  row_0_1/element: {type: element, node: B, params: {element: row_0_1}}\n"
    text = TOY.replace(anchor, anchor + f"  {stage}\n", 1)
    return text, TOY[:TOY.index(anchor)].count("\n") + 2


# Where a pathmap names code: a stage's wrapper type, and a stage's function (convert's `fn`, as reduce's).
PLACES = {"stages.evil.type": "evil: {{type: '{ref}', node: A}}",
          "stages.evil.params.fn": "evil: {{type: convert, node: A, params: {{fn: '{ref}'}}}}"}


@pytest.mark.parametrize("key", list(PLACES))
@pytest.mark.parametrize("reference", CHAINS)
def test_a_reference_through_an_attribute_chain_is_refused_by_validation(reference, key):
    """Attack: `type: 'json:codecs.builtins.__import__'` or `fn: 'json:codecs.sys.modules'` with json allowed."""
    text, line = with_stage(PLACES[key].format(ref=reference))
    with pytest.raises(PathmapError) as info:
        Pathmap.loads(text, source="toy.yaml")
    (problem,) = [p for p in info.value.problems if p.key == key]
    assert problem.line == line and "chain of attributes" in problem.what, problem


def test_the_example_toy_stage_fails_validate_with_file_and_line(tmp_path, capsys):
    """Attack: the issue's stage added to pathmaps/example-toy.yaml passed `eventspace pathmap validate`."""
    text, line = with_stage("evil: {type: 'json:codecs.builtins.__import__', node: A}")
    bad = tmp_path / "toy.yaml"
    bad.write_text(text)
    assert main(["pathmap", "validate", str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{bad}:{line}: stages.evil.type: 'json:codecs.builtins.__import__' follows a "
                             "chain of attributes"), out
    assert out[-1] == f"1 problem in {bad}"


def test_eventspace_node_imports_nothing_through_a_chain(tmp_path):
    """Attack: `eventspace node` on that pathmap built `__import__` as a wrapper and imported `this`."""
    text, _ = with_stage("this: {type: 'json:codecs.builtins.__import__', node: A}")
    bad = tmp_path / "toy.yaml"
    bad.write_text(text)
    done = subprocess.run([sys.executable, "-m", "eventspace.cli", "node", "--pathmap", str(bad), "--node", "A"],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert "Zen of Python" not in done.stdout, "the node imported the module `this`"
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "chain of attributes" in done.stderr, done.stderr


@pytest.mark.parametrize("reference", ["json:codecs.builtins.exec", "json:JSONDecoder.__init__.__globals__"])
def test_a_scope_reduction_through_an_attribute_chain_is_refused(reference):
    """Attack: `ScopeStage.parse("reduce:json:codecs.builtins.exec", allow_modules=("json",))` was accepted."""
    with pytest.raises(StageError, match="chain of attributes"):
        ScopeStage.parse(f"reduce:{reference}", allow_modules=("json",))


@pytest.mark.parametrize("reference, words", [
    ("json:codecs", "is a module"),                          # a module the allowed module imported
    ("json:JSONDecoder", "imported from 'json.decoder'"),    # a class it imported from its submodule
    ("json:_default_decoder", "JSONDecoder value"),          # module-level data, not code
    ("json:nothing", "defines no 'nothing'"),
])
def test_resolution_refuses_what_the_allowed_module_does_not_define(reference, words):
    """Attack: a plain name bound in the allowed module to another module, or to an import."""
    with pytest.raises(LookupError, match=words):
        load_reference(reference, ("json",), "eventspace.functions", "function")
    with pytest.raises(StageError, match=words):
        ScopeStage.parse(f"reduce:{reference}", allow_modules=("json",))


def test_a_node_refuses_a_wrapper_the_module_merely_imported(monkeypatch):
    """Attack: `type: 'programs:Wrapper'` (tests/programs imports paths.Wrapper): valid text, refused at build."""
    monkeypatch.syspath_prepend(ENV["PYTHONPATH"])
    text, _ = with_stage("borrowed: {type: 'programs:Wrapper', node: B}")
    pm = Pathmap.loads(text.replace("allow_modules: [json]", "allow_modules: [json, programs]"))
    with pytest.raises(PathsError, match="imported from 'paths.wrapper', not a wrapper type defined in "
                                         "module 'programs'"):
        NodeServer(pm, "B")


def test_listing_a_package_does_not_allow_its_submodules():
    """Attack: `allow_modules: [json]` reaching `json.decoder:JSONDecoder` (any module under a listed package)."""
    text, line = with_stage("dec: {type: convert, node: A, params: {fn: 'json.decoder:JSONDecoder'}}")
    with pytest.raises(PathmapError) as info:
        Pathmap.loads(text, source="toy.yaml")
    (problem,) = [p for p in info.value.problems if p.key == "stages.dec.params.fn"]
    assert problem.line == line and "listing its package 'json' does not allow its submodules" in problem.what
    Pathmap.loads(text.replace("allow_modules: [json]", "allow_modules: [json, json.decoder]"))


def _ring_with_user_code(name: str) -> Pathmap:
    """A one-node ring of two threads whose paths pass a user wrapper class and a user convert function."""
    pm = pathmap_for(ring_app(2), ONE_NODE, name=name)
    user = (Stage("T0/row_0_1/count", "programs:Count", "A"),
            Stage("T1/row_0_1/convert", "convert", "A", {"fn": "programs:double_items"}))
    paths = tuple(dataclasses.replace(p, stages=(f"{p.thread}/row_0_1/{'count' if p.thread == 'T0' else 'convert'}",
                                                 *p.stages)) if p.element == "row_0_1" else p for p in pm.paths)
    return dataclasses.replace(pm, stages=pm.stages + user, paths=paths).validate()


@pytest.fixture(scope="module")
def user_code_run(tmp_path_factory):
    with launch(_ring_with_user_code("allowed"), run_dir=tmp_path_factory.mktemp("run"), env=ENV) as run:
        yield run
    assert node_children() == []


def test_allowed_module_functions_still_run_in_node_processes(user_code_run):
    """Guard, not an attack (passes on main too): the program `programs:ring`, the wrapper class
    `programs:Count` and the function `programs:double_items`, from an allowed module, in a launched node."""
    results = user_code_run.run("programs:ring", {"steps": 3}, timeout=60)
    assert results["T0"]["sums"] == [1, 1, 1] and results["T1"]["seen"][0] == [0, "T0"]


@pytest.mark.parametrize("program, words", [("programs:time.sleep", "chain of attributes"),
                                            ("programs:time", "is a module")])
def test_a_program_through_an_allowed_module_is_refused_by_the_node(user_code_run, program, words):
    """Attack: `run.start("programs:time.sleep")` ran a function of a module the pathmap does not allow."""
    with pytest.raises(PathsError, match=words):
        user_code_run.start(program)
