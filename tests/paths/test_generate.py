"""Generators: the three input maps, placement, paths and trees of a generated pathmap."""

import textwrap

import pytest

from paths import AppMap, ClusterMap, Pathmap, PathmapError, Placement, generate
from paths.registry import JOIN_TYPES

CLUSTER = """\
# cluster map: clusters, their nodes, and where each node runs (port 0: pick a free one)
clusters:
  c1: {nodes: {A: {host: 127.0.0.1}, B: {host: 127.0.0.1}}}
  c2: {nodes: {C: {host: 127.0.0.1, port: 0}}}
"""

APP = """\
# application map: threads, the elements they use, the trees they join
threads: 6
elements:
  - {name: row_0_1, template: [bytes], delta: 2, users: [T0, T1]}
  - {name: row_1_5, template: [int, bytes], users: [T1, T5]}
  - {name: log, template: '=IQ', keep: 50, users: [T4, T0, T2]}
  - {name: spare, template: [any]}
trees:
  - {name: count, kind: allreduce, members: all}
  - {name: sync, kind: barrier, members: [T0, T2, T4]}
"""

MAPPING = """\
# application-to-cluster map: a rule, or explicit placement (anything not listed follows the rule)
rule: block
threads: {T0: C}
elements: {row_0_1: B, spare: A}
"""


def inputs(app=APP, cluster=CLUSTER, mapping=MAPPING):
    return (AppMap.loads(app, "app.yaml"), ClusterMap.loads(cluster, "cluster.yaml"),
            Placement.loads(mapping, "mapping.yaml"))


def test_input_models():
    app, cluster, mapping = inputs()
    assert app.threads == ("T0", "T1", "T2", "T3", "T4", "T5")
    assert app.elements[0].users == ("T0", "T1") and app.elements[2].keep == 50
    assert app.trees[0].members == app.threads and app.trees[1].members == ("T0", "T2", "T4")
    assert [(n.name, n.cluster, n.port) for n in cluster.nodes] == [("A", "c1", 0), ("B", "c1", 0), ("C", "c2", 0)]
    assert cluster.clusters == ("c1", "c2")
    assert mapping.rule == "block" and mapping.threads == {"T0": "C"}
    assert AppMap.loads("threads: [x, y]\n").threads == ("x", "y")


def test_placement_rules_and_pins():
    app, cluster, mapping = inputs()
    pm = generate(app, cluster, mapping)
    # block over 3 nodes by position among all 6 threads; T0 pinned to C.
    assert {t.name: t.node for t in pm.threads} == {"T0": "C", "T1": "A", "T2": "B", "T3": "B", "T4": "C", "T5": "C"}
    pm = generate(app, cluster, Placement(rule="round-robin", elements={"spare": "A"}))
    assert [t.node for t in pm.threads] == ["A", "B", "C", "A", "B", "C"]
    # Elements: pinned, or with their first user.
    pm = generate(app, cluster, mapping)
    assert {e.name: e.node for e in pm.elements} == {"row_0_1": "B", "row_1_5": "A", "log": "C", "spare": "A"}


def test_one_path_per_thread_and_element_with_remote_where_it_crosses():
    app, cluster, mapping = inputs()
    pm = generate(app, cluster, mapping, name="gen")
    assert pm.name == "gen"
    uses = {(u, e.name) for e in app.elements for u in e.users}
    assert {(p.thread, p.element) for p in pm.paths} == uses
    for path in pm.paths:
        thread, element = pm.thread(path.thread), pm.element(path.element)
        assert path.stages[-1] == f"{element.name}/element"
        if thread.node == element.node:
            assert path.stages == (f"{element.name}/element",)
        else:
            remote = pm.stage(path.stages[0])
            assert remote.type == "remote" and remote.node == thread.node and len(path.stages) == 2
    assert pm.paths_through("log/element") == tuple(p for p in pm.paths if p.element == "log")


@pytest.mark.parametrize("shape", ["flat", "kary:2", "knomial:2", "per-node", "per-cluster"])
def test_generated_trees_are_valid_with_fan_in_and_remote_edges(shape):
    app, cluster, mapping = inputs()
    pm = generate(app, cluster, mapping, shape)
    for tree in pm.trees:
        assert tree.shape == shape and tree.root == f"{tree.name}/root"
        assert list(tree.members) == list(next(t for t in app.trees if t.name == tree.name).members)
        for member, entry in tree.members.items():
            assert pm.stage(entry).node == pm.thread(member).node
            assert tree.route(member)[-1] == tree.root
        for child, parent in tree.edges.items():
            if pm.stage(child).node != pm.stage(parent).node:
                assert pm.stage(child).type == "remote"
        joins = [s for s in tree.stage_ids if pm.stage(s).type in JOIN_TYPES]
        assert {pm.stage(s).type for s in joins} == {"reduce" if tree.kind == "allreduce" else "barrier"}
        for join in joins:
            assert pm.stage(join).params["fan_in"] == pm.fan_in(tree.name, join)
        # Every member's contribution is counted once on its way to the root.
        assert sum(len(tree.entrants(s)) for s in tree.stage_ids) == len(tree.members)
    assert Pathmap.loads(pm.dumps()) == pm


def test_per_cluster_tree_levels_in_the_pathmap():
    app, cluster, mapping = inputs()
    tree = generate(app, cluster, mapping, "per-cluster").tree("count")
    assert set(tree.children("count/root")) == {"count/cluster-c1", "count/cluster-c2/remote"}
    assert tree.route("T5") == ("count/node-C", "count/cluster-c2", "count/cluster-c2/remote", "count/root")


def test_generator_input_mismatches_name_the_file_that_says_them():
    mapping = MAPPING.replace("threads: {T0: C}", "threads: {T0: Q, T99: A}")
    app = APP.replace("  - {name: spare, template: [any]}\n", "  - {name: lonely, template: [any]}\n")
    with pytest.raises(PathmapError) as info:
        generate(*inputs(app=app, mapping=mapping))
    text = str(info.value)
    assert "mapping.yaml:3: threads.T0: unknown node 'Q'" in text
    assert "mapping.yaml:3: threads.T99: the application map has no thread 'T99'" in text
    assert "mapping.yaml:4: elements.spare: the application map has no element 'spare'" in text
    assert "app.yaml:7: elements[3]: element lonely has no users and no placement" in text


def test_unknown_tree_shape():
    with pytest.raises(ValueError, match="unknown tree shape 'ring'"):
        generate(*inputs(), tree_shape="ring")


@pytest.mark.parametrize("kind, text, source, key, line, words", [
    ("cluster", "clusters:\n  c1: {nodes: {A: {host: h}}}\n  c2: {nodes: {A: {host: h}}}\n", "cluster.yaml",
     "clusters.c2.nodes.A", 3, ["already in cluster c1"]),
    ("cluster", "clusters:\n  c1: {nodes: {A: {hots: h}}}\n", "cluster.yaml", "clusters.c1.nodes.A.hots", 2,
     ["did you mean 'host'"]),
    ("cluster", "clusters:\n  c1: {nodes: {A: {port: 99999}}}\n", "cluster.yaml", "clusters.c1.nodes.A.port", 2,
     ["out of range"]),
    ("cluster", "clusters:\n  c1: {nodes: {}}\n", "cluster.yaml", "clusters.c1.nodes", 2, ["no nodes"]),
    ("cluster", "clusters: [c1]\n", "cluster.yaml", "clusters", 1, ["expected a mapping"]),
    ("app", "threads: 2\nelements:\n  - {name: e, template: [int], users: [T0, T7]}\n", "app.yaml",
     "elements[0].users[1]", 3, ["unknown thread 'T7'"]),
    ("app", "threads: 2\nelements:\n  - {name: e, template: [nope]}\n", "app.yaml", "elements[0].template", 3,
     ["invalid template"]),
    ("app", "threads: 2\nelements:\n  - {name: e, template: [int], keep: 0}\n", "app.yaml", "elements[0].keep", 3,
     ["positive whole number"]),
    ("app", "threads: 2\nelements:\n  - {name: e, template: [int]}\n  - {name: e, template: [int]}\n",
     "app.yaml", "elements[1].name", 4, ["duplicate element 'e'"]),
    ("app", "threads: 2\ntrees:\n  - {name: t, kind: allreduse, members: all}\n", "app.yaml", "trees[0].kind", 3,
     ["did you mean 'allreduce'"]),
    ("app", "threads: 2\ntrees:\n  - {name: t, kind: barrier, members: [T0, T5]}\n", "app.yaml",
     "trees[0].members[1]", 3, ["unknown thread 'T5'"]),
    ("app", "threads: many\n", "app.yaml", "threads", 1, ["thread count"]),
    ("app", "threads: 0\n", "app.yaml", "threads", 1, ["at least 1"]),
    ("app", "threads: [T0, T0]\n", "app.yaml", "threads[1]", 1, ["duplicate thread"]),
    ("mapping", "rule: blok\n", "mapping.yaml", "rule", 1, ["did you mean 'block'"]),
    ("mapping", "rule: block\nthreads: [T0]\n", "mapping.yaml", "threads", 2, ["expected a mapping"]),
    ("mapping", "rule: block\n  bad: [\n", "mapping.yaml", "(yaml)", 2, ["YAML syntax error"]),
])
def test_input_errors_name_file_line_and_key(kind, text, source, key, line, words):
    model = {"cluster": ClusterMap, "app": AppMap, "mapping": Placement}[kind]
    with pytest.raises(PathmapError) as info:
        model.loads(text, source)
    found = [p for p in info.value.problems if p.key == key]
    assert found, str(info.value)
    assert str(found[0]).startswith(f"{source}:{line}: {key}: "), str(found[0])
    for word in words:
        assert word in found[0].what


def test_inputs_load_from_files(inputs_dir):
    app = AppMap.load(inputs_dir / "toy-app.yaml")
    cluster = ClusterMap.load(inputs_dir / "toy-cluster.yaml")
    mapping = Placement.load(inputs_dir / "block.yaml")
    pm = generate(app, cluster, mapping, "kary:2")
    assert len(pm.threads) == 4 and len(pm.paths) == 16


def test_tree_named_like_a_thread_is_refused():
    app = textwrap.dedent("""\
        threads: [T0, count]
        trees:
          - {name: count, kind: allreduce, members: all}
        """)
    with pytest.raises(PathmapError, match="app.yaml:3: trees\\[0\\].name: tree count has a thread's name"):
        generate(*inputs(app=app, mapping="rule: block\n"))
