"""Every kind of pathmap error is found, and named by file, line and key path."""

import textwrap

import pytest

from paths import Pathmap, PathmapError


def edit(text: str, old: str, new: str) -> tuple[str, int]:
    """`text` with the one occurrence of `old` replaced by `new`, and the line where it starts."""
    assert text.count(old) == 1, f"{old!r} must occur once in the base pathmap"
    at = text.index(old)
    return text.replace(old, new), text.count("\n", 0, at) + 1


def problems(text: str) -> PathmapError:
    with pytest.raises(PathmapError) as info:
        Pathmap.loads(text, source="bad.yaml")
    return info.value


def assert_problem(error: PathmapError, key: str, line: int, *words: str) -> None:
    found = [p for p in error.problems if p.key == key and p.line == line]
    assert found, f"no problem at bad.yaml:{line} key {key}; got:\n{error}"
    text = str(found[0])
    assert text.startswith(f"bad.yaml:{line}: {key}: "), text
    assert ";" in text, f"a problem says what to do after ';': {text}"
    for word in words:
        assert word in text, f"{word!r} not in {text!r}"
    assert text in str(error)


# (old text, new text, key path, line offset from the edit, words the message must hold)
CASES = {
    "yaml syntax": ("  T1: {node: B}", "  T1: node: B", "(yaml)", 0, ["YAML syntax error"]),
    "unknown wrapper type": ("{type: remote, node: A}", "{type: remoet, node: A}",
                             "stages.T0/e01/remote.type", 0, ["'remoet'", "did you mean 'remote'"]),
    "stage on unknown node": ("T0/e01/remote: {type: remote, node: A}", "T0/e01/remote: {type: remote, node: Z}",
                              "stages.T0/e01/remote.node", 0, ["unknown node 'Z'", "A, B"]),
    "path thread unknown": ("T0/e01: {thread: T0,", "T0/e01: {thread: T7,", "paths.T0/e01.thread", 0,
                            ["unknown thread 'T7'"]),
    "path element unknown": ("T1/e01: {thread: T1, element: e01,", "T1/e01: {thread: T1, element: e99,",
                             "paths.T1/e01.element", 0, ["unknown element 'e99'"]),
    "user wrapper module not allowed": ("'mylib.wrappers:Tag'", "'evil.wrappers:Tag'",
                                        "stages.T1/e10/user.type", 0, ["'evil.wrappers'", "allow_modules"]),
    "reduce function module not allowed": ("params: {fan_in: 2}}", "params: {fan_in: 2, fn: 'os:system'}}",
                                           "stages.sum/root.params.fn", 0, ["'os'", "allow_modules"]),
    "bad user reference": ("'mylib.wrappers:Tag'", "'mylib.wrappers:'", "stages.T1/e10/user.type", 0,
                           ["pkg.sub:name"]),
    "duplicate node": ("  B: {host: 127.0.0.1, port: 0, cluster: c1}\n",
                       "  B: {host: 127.0.0.1, port: 0, cluster: c1}\n  B: {host: 127.0.0.2}\n",
                       "nodes.B", 1, ["duplicate key 'B'", "first at line"]),
    "duplicate thread": ("  T1: {node: B}\n", "  T1: {node: B}\n  T1: {node: A}\n", "threads.T1", 1,
                         ["duplicate key 'T1'"]),
    "duplicate element": ("  e10: {node: A", "  e01: {node: A, template: [int]}\n  e10: {node: A",
                          "elements.e01", 0, ["duplicate key 'e01'"]),
    "duplicate stage id": ("  sum/T1/remote: {type: remote, node: B}\n",
                           "  sum/T1/remote: {type: remote, node: B}\n  sum/root: {type: remote, node: A}\n",
                           "stages.sum/root", 1, ["duplicate key 'sum/root'"]),
    "duplicate path": ("  T1/e01: {thread: T1,", "  T0/e01: {thread: T0, element: e01, stages: [e01/element]}\n"
                       "  T1/e01: {thread: T1,", "paths.T0/e01", 0, ["duplicate key 'T0/e01'"]),
    "duplicate tree": ("trees:\n", "trees:\n  sum: {kind: barrier, root: sum/root, members: {T0: sum/root}}\n",
                       "trees.sum", 2, ["duplicate key 'sum'"]),
    "unknown key": ("A: {host: 127.0.0.1,", "A: {hots: 127.0.0.1,", "nodes.A.hots", 0,
                    ["unknown key 'hots'", "did you mean 'host'"]),
    "unknown top-level key": ("instrument:\n", "instrumnet:\n", "instrumnet", 0,
                              ["did you mean 'instrument'"]),
    "missing key": ("T1/e10/remote: {type: remote, node: B}", "T1/e10/remote: {node: B}",
                    "stages.T1/e10/remote.type", 0, ["missing", "type:"]),
    "port not a number": ("A: {host: 127.0.0.1, port: 0,", "A: {host: 127.0.0.1, port: abc,",
                          "nodes.A.port", 0, ["whole number", "'abc'"]),
    "port out of range": ("A: {host: 127.0.0.1, port: 0,", "A: {host: 127.0.0.1, port: 70000,",
                          "nodes.A.port", 0, ["out of range"]),
    "clock offset beyond 2^62 ns": ("A: {host: 127.0.0.1, port: 0,",
                                    "A: {host: 127.0.0.1, port: 0, clock_offset_ns: -4611686018427387905,",
                                    "nodes.A.clock_offset_ns", 0, ["-4611686018427387905", "2^62"]),
    "stages not a list": ("stages: [e01/element]}", "stages: e01/element}", "paths.T1/e01.stages", 0,
                          ["expected a list"]),
    "thread not a mapping": ("  T0: {node: A}", "  T0: [A]", "threads.T0", 0, ["expected a mapping"]),
    "drift not a boolean": ("drift: false", "drift: maybe", "clock.drift", 0, ["true or false"]),
    "join endpoint not an address": ("drift: false, reference: A}\n",
                                     "drift: false, reference: A}\nsecurity: {join_endpoints: [10.0.0.1]}\n",
                                     "security.join_endpoints[0]", 1, ["'10.0.0.1' is not an endpoint",
                                                                       "tcp://HOST:PORT"]),
    "unknown clock scheme": ("drift: false", "drift: false, scheme: ntp", "clock.scheme", 0,
                             ["unknown clock scheme 'ntp'", "use direct or tree"]),
    "keep zero": ("keep: 10}", "keep: 0}", "elements.e10.keep", 0, ["positive whole number"]),
    "delta negative": ("delta: 2}", "delta: -3}", "elements.e01.delta", 0, ["positive whole number"]),
    "keep not whole": ("keep: 10}", "keep: 1.5}", "elements.e10.keep", 0, ["whole number"]),
    "keep and delta": ("keep: 10}", "keep: 10, delta: 1}", "elements.e10.delta", 0, ["both keep and delta"]),
    "template field type": ("[int, bytes]", "[int, flaot]", "elements.e01.template", 0, ["'flaot'"]),
    "template struct code": ("'=IQ'", "'=IZ'", "elements.e10.template", 0, ["invalid template"]),
    "template without =": ("'=IQ'", "'IQ'", "elements.e10.template", 0, ["'='"]),
    "template empty": ("[int, bytes]", "[]", "elements.e01.template", 0, ["at least one field"]),
    "template huge": ("'=IQ'", "'=99999999999I'", "elements.e10.template", 0, ["at most"]),
    "path crosses nodes without remote": (
        "stages: [T1/e10/user, T1/e10/remote, e10/element]", "stages: [T1/e10/user, e10/element]",
        "paths.T1/e10.stages[1]", 0, ["without a remote stage", "insert a remote stage on B"]),
    "path starts off its thread's node": (
        "stages: [T0/e01/remote, e01/element]", "stages: [e01/element]", "paths.T0/e01.stages[0]", 0,
        ["thread T0 runs on A"]),
    "path does not end at its element": (
        "T1/e01: {thread: T1, element: e01, stages: [e01/element]}",
        "T1/e01: {thread: T1, element: e01, stages: [T1/e10/user]}", "paths.T1/e01.stages[0]", 0,
        ["not the element stage of e01"]),
    "stage with two next stages": (
        "T1/e01: {thread: T1, element: e01, stages: [e01/element]}",
        "T1/e01: {thread: T1, element: e01, stages: [T1/e10/user, T1/e10/remote, e01/element]}",
        "paths.T1/e10.stages[1]", 1, ["one next stage"]),
    "element stage on the wrong node": ("e01/element: {type: element, node: B,",
                                        "e01/element: {type: element, node: A,",
                                        "stages.e01/element.node", 0, ["element e01 is on node B"]),
    "member enters on another node": ("members: {T0: sum/root, T1: sum/T1/remote}",
                                      "members: {T0: sum/root, T1: sum/root}", "trees.sum.members.T1", 0,
                                      ["enters the tree at sum/root on node A"]),
    "fan_in does not match": ("params: {fan_in: 2}}", "params: {fan_in: 3}}", "stages.sum/root.params.fan_in",
                              0, ["set fan_in: 2"]),
    "fan_in is not a number": ("params: {fan_in: 2}}", "params: {fan_in: '2'}}", "stages.sum/root.params.fan_in",
                               0, ["must be a whole number", "not '2'", "write fan_in: 2"]),
    "unknown tree kind": ("kind: allreduce", "kind: allreduse", "trees.sum.kind", 0, ["did you mean 'allreduce'"]),
    "unknown tree shape": ("shape: flat", "shape: kary:1", "trees.sum.shape", 0, ["at least 2"]),
    "instrument names an unknown thread": ("- {at: [source, sink]}", "- {at: [source], threads: [T9]}",
                                           "instrument.collectors[0].threads[0]", 0, ["unknown thread 'T9'"]),
    "instrument names an unknown point": ("- {at: [source, sink]}", "- {at: [sauce]}",
                                          "instrument.collectors[0].at[0]", 0, ["did you mean 'source'"]),
    "instrument location unknown": ("  keep: 100\n", "  keep: 100\n  location: Q\n", "instrument.location", 1,
                                    ["use local"]),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_error_names_file_line_and_key(base_text, case):
    old, new, key, offset, words = CASES[case]
    text, line = edit(base_text, old, new)
    assert_problem(problems(text), key, line + offset, *words)


def test_base_pathmap_is_valid(base_text):
    pathmap = Pathmap.loads(base_text)
    assert pathmap.name == "base"
    assert pathmap.source == "<string>"


def test_tree_cycle_is_found_with_networkx(base_text):
    text, line = edit(base_text, "edges: {sum/T1/remote: sum/root}",
                      "edges: {sum/T1/remote: sum/root, sum/root: sum/T1/remote}")
    error = problems(text)
    cycles = [p for p in error.problems if "cycle" in p.what]
    assert cycles and cycles[0].line == line and cycles[0].key.startswith("trees.sum.edges.")
    assert "sum/root -> sum/T1/remote -> sum/root" in cycles[0].what or \
           "sum/T1/remote -> sum/root -> sum/T1/remote" in cycles[0].what


def test_root_of_the_wrong_type_is_reported_at_the_tree(base_text):
    text, _ = edit(base_text, "sum/root: {type: reduce", "sum/root: {type: barrier")
    root_line = text.splitlines().index("    root: sum/root") + 1
    assert_problem(problems(text), "trees.sum.root", root_line, "reduce stages")


def test_every_problem_is_collected_in_one_error(base_text):
    text, line_a = edit(base_text, "{type: remote, node: A}", "{type: remoet, node: A}")
    text, line_b = edit(text, "T1/e01: {thread: T1,", "T1/e01: {thread: T9,")
    text, line_c = edit(text, "keep: 10}", "keep: -1}")
    error = problems(text)
    assert isinstance(error, ValueError)
    assert [p.line for p in error.problems] == sorted([line_a, line_b, line_c])
    assert len(str(error).splitlines()) == 3


def test_problems_from_a_file_name_the_file(tmp_path, base_text):
    text, line = edit(base_text, "T0/e01: {thread: T0,", "T0/e01: {thread: T7,")
    file = tmp_path / "mine.yaml"
    file.write_text(text)
    with pytest.raises(PathmapError) as info:
        Pathmap.load(file)
    assert str(info.value).startswith(f"{file}:{line}: paths.T0/e01.thread: unknown thread 'T7'")


def test_a_wrongly_typed_key_is_told_once(base_text):
    text, line = edit(base_text, "T1/e10/remote: {type: remote, node: B}", "T1/e10/remote: {type: [remote], node: B}")
    error = problems(text)
    assert [p.key for p in error.problems] == ["stages.T1/e10/remote.type"]


@pytest.mark.parametrize("text, key, words", [
    ("", "nodes", ["empty"]),
    ("- a\n- b\n", "(top level)", ["expected a mapping"]),
    ("nodes: {}\n", "nodes", ["at least one"]),
    ("nodes: {A: {host: x}}\nthreads: {T0: {node: A}}\nbogus: 1\n", "bogus", ["unknown key"]),
])
def test_degenerate_documents(text, key, words):
    error = problems(text)
    assert any(p.key == key and all(w in p.what for w in words) for p in error.problems), str(error)


def test_merge_keys_and_anchors_are_read():
    pathmap = Pathmap.loads(textwrap.dedent("""\
        nodes:
          A: &local {host: 127.0.0.1, cluster: c1}
          B: {<<: *local, port: 7001}
        """))
    assert pathmap.node("B").cluster == "c1" and pathmap.node("B").port == 7001
