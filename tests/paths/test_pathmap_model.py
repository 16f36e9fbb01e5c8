"""The typed pathmap: lookups, shared stages, trees, instrumentation, round trips, code-built maps."""

import dataclasses
import sys

import pytest

import yaml

import pastset.security
from paths import (Clock, ElementSpec, Instrument, Liveness, Node, Path, Pathmap, PathmapError, SecuritySpec, Selector,
                   Stage, Thread, Tree)
from paths import pathmap_yaml
from paths.sections import ENTRIES, NAMED, SECTION, label, schema
from paths.registry import BUILTIN_TYPES, registered_types


def test_model_is_typed_all_the_way_down(base_text):
    pm = Pathmap.loads(base_text)
    assert pm.node("B") == Node("B", "127.0.0.1", 0, "c1")
    assert pm.thread("T1") == Thread("T1", "B")
    assert pm.element("e01") == ElementSpec("e01", "B", ("int", "bytes"), delta=2)
    assert pm.element("e10").template == "=IQ" and pm.element("e10").keep == 10
    assert pm.stage("sum/root") == Stage("sum/root", "reduce", "A", {"fan_in": 2})
    assert pm.path("T1/e10").stages == ("T1/e10/user", "T1/e10/remote", "e10/element")
    assert pm.clock == Clock(samples=4, drift=False, reference="A")
    assert pm.allow_modules == ("mylib.wrappers",)
    assert pm.instrument == Instrument(keep=100, collectors=(Selector(at=("source", "sink")),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        pm.name = "other"


def test_lookups(base_text):
    pm = Pathmap.loads(base_text)
    assert pm.clusters == ("c1",)
    assert [n.name for n in pm.nodes_in("c1")] == ["A", "B"]
    assert [t.name for t in pm.threads_on("B")] == ["T1"]
    assert [e.name for e in pm.elements_on("A")] == ["e10"]
    assert {s.id for s in pm.stages_on("B")} == {"e01/element", "T1/e10/remote", "T1/e10/user", "sum/T1/remote"}
    assert [p.name for p in pm.paths_of("T1")] == ["T1/e01", "T1/e10"]
    assert pm.path_to("T0", "e01").name == "T0/e01"
    assert pm.next_stage("T1/e10/user") == "T1/e10/remote"
    assert pm.next_stage("sum/T1/remote") == "sum/root"
    assert pm.next_stage("e10/element") is None
    with pytest.raises(KeyError, match="no thread 'T9'"):
        pm.thread("T9")
    assert pm.summary() == {"nodes": 2, "clusters": 1, "threads": 2, "elements": 2, "stages": 7,
                            "paths": 3, "trees": 1, "collectors": 5}


def test_a_stage_shared_by_paths_is_one_instance(base_text):
    pm = Pathmap.loads(base_text)
    assert [p.name for p in pm.paths_through("e01/element")] == ["T0/e01", "T1/e01"]
    assert pm.stage("e01/element") is pm.stage("e01/element")


def test_tree_structure(base_text):
    pm = Pathmap.loads(base_text)
    tree = pm.tree("sum")
    assert tree.stage_ids == ("sum/root", "sum/T1/remote")
    assert tree.route("T1") == ("sum/T1/remote", "sum/root")
    assert tree.route("T0") == ("sum/root",)
    assert tree.children("sum/root") == ("sum/T1/remote",)
    assert tree.entrants("sum/root") == ("T0",)
    assert list(tree.graph().edges) == [("sum/T1/remote", "sum/root")]
    assert pm.fan_in("sum", "sum/root") == 2
    points = pm.tree_points("sum")
    assert points.contribute == (("T0", "sum/root"), ("T1", "sum/T1/remote"))
    assert points.arrival == ("sum/root",) and points.departure == ()


def test_collector_points(base_text):
    pm = Pathmap.loads(base_text)
    points = pm.collector_points()
    sources = [(p.path, p.stage, p.node) for p in points if p.role == "source"]
    assert sources == [("T0/e01", "T0/e01/remote", "A"), ("T1/e01", "e01/element", "B"),
                       ("T1/e10", "T1/e10/user", "B")]
    # A sink sits in front of the element stage, which every path into the element shares.
    assert [(p.stage, p.path) for p in points if p.role == "sink"] == [("e01/element", None), ("e10/element", None)]
    narrowed = dataclasses.replace(pm, instrument=Instrument(collectors=(
        Selector(at=("source",), nodes=("B",), elements=("e10",)),
        Selector(trees=("sum",), threads=("T1",)),
        Selector(stages=("sum/root",)),
    )))
    assert [(p.role, p.stage, p.thread) for p in narrowed.validate().collector_points()] == [
        ("source", "T1/e10/user", "T1"), ("contribute", "sum/T1/remote", "T1"), ("stage", "sum/root", None)]


def test_instrument_rule_that_selects_nothing_is_an_error(base_text):
    text = base_text.replace("- {at: [source, sink]}", "- {at: [source], threads: [T0], elements: [e10]}")
    with pytest.raises(PathmapError, match=r"instrument.collectors\[0\]: selects no collector point"):
        Pathmap.loads(text)


@pytest.mark.parametrize("name", ["example-toy.yaml", "toy-2node.yaml", "cluster-4node.yaml"])
def test_round_trip(name, tmp_path, pathmaps_dir):
    pm = Pathmap.load(pathmaps_dir / name)
    out = tmp_path / "again.yaml"
    pm.dump(out, header="a header\non two lines")
    text = out.read_text()
    assert text.startswith("# a header\n# on two lines\n")
    again = Pathmap.load(out)
    assert again == pm
    assert again.source == str(out) and pm.source != again.source  # equality ignores the source
    assert Pathmap.loads(again.dumps()).dumps() == again.dumps()


def test_round_trip_keeps_awkward_names_and_values(base_text):
    pm = Pathmap.loads(base_text)
    odd = dataclasses.replace(
        pm,
        name="yes",  # YAML 1.1 would read it as true unless quoted
        nodes=(Node("A", "::1", 7000, "null", clock_offset_ns=-5), Node("B", "10.0.0.2", 0, "c 2")),
        stages=tuple(dataclasses.replace(s, params={**s.params, "note": "a: b # c", "levels": [1, 2.5, True]})
                     if s.id == "T0/e01/remote" else s for s in pm.stages),
        allow_modules=("mylib.wrappers", "other.pkg"),
        clock=Clock(samples=2, drift=True, scheme="tree"),
        security=SecuritySpec(join_endpoints=("tcp://10.0.0.9:7000", "ipc:///tmp/relay")),
    )
    odd.validate()
    assert Pathmap.loads(odd.dumps()) == odd


def pyyaml_whole(pm: Pathmap, header: str | None = None) -> str:
    """What PyYAML writes for the whole pathmap in one document, with a section's comment before it and
    `header` as leading comments: the text every write of a pathmap must give (paths.pathmap_yaml.Writer
    lays entries out section by section, and remembers them)."""
    body = yaml.dump(pathmap_yaml.write_section(pm), Dumper=pathmap_yaml._Dumper, sort_keys=False,
                     default_flow_style=False, allow_unicode=True, width=160)
    comments = {s.name: s.spec.doc for s in schema(Pathmap) if s.spec.doc}
    lines = [f"# {line}".rstrip() for line in header.splitlines()] if header else []
    for line in body.splitlines():
        if line.split(":", 1)[0] in comments and not line.startswith(" "):
            lines += ["", f"# {comments[line.split(':', 1)[0]]}"]
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_a_writer_writes_what_pyyaml_writes_and_lays_out_only_what_a_pathmap_gained(base_text, pathmaps_dir):
    """Issue 34: an MPI run's snapshot is written again whenever its pathmap grows; a Writer lays out
    only the entries a pathmap did not hold when it last wrote, and its text is PyYAML's for the
    whole pathmap, byte for byte: awkward names, values that need quotes, lines PyYAML folds past
    160 characters, text of several lines, entries written as blocks (trees)."""
    for file in sorted(pathmaps_dir.glob("*.yaml")):
        if file.stat().st_size > 100_000:   # the paper's and 64 nodes': seconds to load, nothing more to see
            continue
        pm = Pathmap.load(file)
        assert pathmap_yaml.Writer().write(pm, "a header") == pyyaml_whole(pm, "a header") == pm.dumps("a header")
    pm = Pathmap.loads(base_text)
    writer = pathmap_yaml.Writer()
    assert writer.write(pm) == pyyaml_whole(pm)
    entries = writer.laid_out
    awkward = {"note": "a: b # c", "levels": [1, 2.5, True], "text": "two\nlines", "yes": "no",
               "long": ["x" * 30] * 8, "null": None}
    grown = dataclasses.replace(
        pm,
        nodes=pm.nodes + (Node("true", "::1", 7000, "null", clock_offset_ns=-5),),
        elements=pm.elements + (ElementSpec("1.5", "A", ("int",), keep=3),),
        stages=pm.stages[:1] + (Stage("odd/user", "mylib.wrappers.Odd", "true", awkward),) + pm.stages[1:],
        trees=pm.trees + (dataclasses.replace(pm.trees[0], name="again"),),
        instrument=dataclasses.replace(pm.instrument, collectors=pm.instrument.collectors + (
            Selector(at=("contribute",), trees=("again",)),)))
    assert writer.write(grown, "grown\n") == pyyaml_whole(grown, "grown\n")
    assert writer.laid_out == entries + 5   # the node, element, stage, tree and rule it gained
    assert writer.write(grown) == pyyaml_whole(grown) and writer.laid_out == entries + 5
    # What the last pathmap written does not hold is forgotten; an unrelated one is laid out whole.
    assert writer.write(pm) == pyyaml_whole(pm) and writer.laid_out == entries + 5
    assert writer.write(grown) == pyyaml_whole(grown) and writer.laid_out == entries + 10
    other = Pathmap.load(pathmaps_dir / "example-toy.yaml")
    assert writer.write(other) == pyyaml_whole(other)


def test_every_key_of_the_schema_is_written_and_read_back(base_text, tmp_path):
    """What `dumps` writes holds every key the schema (paths.sections) has, once each holds a value
    other than its default, and `loads` reads it back to an equal pathmap."""
    pm = Pathmap.loads(base_text)
    pastset.security.generate(tmp_path / "keys")
    full = dataclasses.replace(
        pm,
        nodes=(Node("A", clock_offset_ns=7), pm.nodes[1]),
        clock=Clock(samples=3, drift=True, reference="B", scheme="tree"),
        security=SecuritySpec(keys=str(tmp_path / "keys"), join_endpoints=("tcp://10.0.0.9:7000",)),
        liveness=Liveness(grace=12.5),
        instrument=dataclasses.replace(pm.instrument, location="B", system=False, collectors=(
            Selector(at=("source",), paths=("T1/e10",), threads=("T1",), nodes=("B",), elements=("e10",)),
            Selector(at=("contribute",), trees=("sum",)), Selector(stages=("T1/e10/user",)))),
    )
    written = yaml.safe_load(full.dumps())

    def unwritten(held: list, where: str) -> list[str]:
        """The keys of a section that none of its entries (held: [(entry, its YAML data)]) has written."""
        missing = []
        for s in schema(type(held[0][0])):
            both = [(getattr(entry, s.name), data[s.name]) for entry, data in held if s.name in data]
            if s.spec.holds == SECTION:
                inner = both
            elif s.spec.holds == ENTRIES:
                inner = [pair for value, data in both for pair in zip(value, data)]
            elif s.spec.holds == NAMED:
                inner = [(item, data[getattr(item, label(s.spec.section))]) for value, data in both for item in value]
            else:
                inner = None
            if not both:
                missing.append(f"{where}.{s.name}")
            elif inner:
                missing += unwritten(inner, f"{where}.{s.name}")
        return missing

    assert unwritten([(full, written)], "pathmap") == []
    assert full.check() == ()
    assert Pathmap.loads(full.dumps()) == full


def test_pathmap_built_in_code_is_validated_without_lines():
    pm = Pathmap(
        name="code",
        nodes=(Node("A"), Node("A")),
        threads=(Thread("T0", "Z"),),
        elements=(ElementSpec("e", "A", ("int",)),),
        stages=(Stage("e/element", "element", "A", {"element": "e"}),),
        paths=(Path("p", "T0", "e", ("e/element",)),),
        trees=(Tree("t", "allreduce", "e/element", {"T0": "e/element"}, {}),),
    )
    problems = pm.check()
    keys = [p.key for p in problems]
    assert "nodes.A" in keys and "threads.T0.node" in keys and "trees.t" in keys
    assert all(p.source == "<generated>" and p.line is None for p in problems)
    assert str(problems[0]).startswith("<generated>: ")
    with pytest.raises(PathmapError):
        pm.validate()


def test_registry_names_entry_points_without_loading_them(tmp_path, monkeypatch, base_text):
    """A package that registers a wrapper type in eventspace.wrappers makes it valid, with no change here."""
    text = base_text.replace("  sum/T1/remote: {type: remote, node: B}\n",
                             "  sum/T1/remote: {type: remote, node: B}\n"
                             "  T0/e01/probe: {type: probe, node: A}\n")
    text = text.replace("stages: [T0/e01/remote, e01/element]",
                        "stages: [T0/e01/probe, T0/e01/remote, e01/element]")
    with pytest.raises(PathmapError, match="unknown wrapper type 'probe'"):
        Pathmap.loads(text)
    dist = tmp_path / "fake_wrappers-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-wrappers\nVersion: 1.0\n")
    # The object named does not exist: a registry that loaded it would fail.
    (dist / "entry_points.txt").write_text("[eventspace.wrappers]\nprobe = no_such_module:Probe\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert "probe" in registered_types() and BUILTIN_TYPES < registered_types()
    pm = Pathmap.loads(text)
    assert pm.stage("T0/e01/probe").type == "probe"


def test_the_collector_wrapper_comes_from_eventspace_by_entry_point():
    assert "collector" in registered_types()
    assert "collector" not in BUILTIN_TYPES
