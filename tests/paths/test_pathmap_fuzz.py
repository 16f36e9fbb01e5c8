"""Random mutations of a valid pathmap either load or raise PathmapError, never anything else."""

import copy
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paths import AppMap, ClusterMap, Pathmap, PathmapError, Placement

BASE = (Path(__file__).parent / "base.yaml").read_text()
LINES = BASE.splitlines(keepends=True)
DOC = yaml.safe_load(BASE)
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
# Characters that matter to YAML, plus some that matter to the pathmap.
ALPHABET = st.sampled_from(list(" \n\t:-[]{},#&*!|>'\"%@`?=/.0123456789abcdeABT_~<"))
# Enough examples to reach every section, few enough to keep each test under a second; a run
# with max_examples=4000 found nothing more.
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(FAST, max_examples=60)


def loads_or_pathmap_error(text: str) -> None:
    try:
        Pathmap.loads(text, source="fuzz.yaml")
    except PathmapError as exc:
        assert exc.problems, "a PathmapError names at least one problem"
        for problem in exc.problems:
            assert str(problem).startswith("fuzz.yaml")


@FAST
@given(st.data())
def test_text_mutations(data):
    lines = list(LINES)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        how = data.draw(st.sampled_from(["delete", "duplicate", "swap", "splice", "truncate"]))
        if how == "delete":
            del lines[i]
        elif how == "duplicate":
            lines.insert(i, lines[i])
        elif how == "swap":
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif how == "splice":
            line = lines[i]
            a = data.draw(st.integers(0, len(line)))
            b = data.draw(st.integers(a, len(line)))
            lines[i] = line[:a] + data.draw(st.text(ALPHABET, max_size=8)) + line[b:]
        else:
            lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
        if not lines:
            break
    loads_or_pathmap_error("".join(lines))


PLAIN = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70), st.floats(allow_nan=True),
                  st.text(max_size=12), st.sampled_from(["A", "B", "T0", "e01", "sum/root", "remote",
                                                         "=IQ", "int", "mylib:x", "all"]))
VALUES = st.recursive(PLAIN, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=8)


def places(value, at=()):
    """Every key path into a nested structure of dicts and lists."""
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from places(v, at + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from places(v, at + (i,))


@FEWER
@given(st.data())
def test_structure_mutations(data):
    doc = copy.deepcopy(DOC)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.sampled_from(list(places(doc))))
        if not at:
            doc = data.draw(VALUES)
            continue
        parent = doc
        for step in at[:-1]:
            parent = parent[step]
        how = data.draw(st.sampled_from(["replace", "delete", "rename"]))
        if how == "replace" or isinstance(parent, list):
            parent[at[-1]] = data.draw(VALUES)
        elif how == "delete":
            del parent[at[-1]]
        else:
            parent[data.draw(st.text(max_size=8))] = parent.pop(at[-1])
    loads_or_pathmap_error(yaml.dump(doc, Dumper=DUMPER, sort_keys=False))


@FAST
@given(VALUES, VALUES, VALUES)
def test_generator_inputs_of_any_shape(cluster, app, mapping):
    for model, value in ((ClusterMap, cluster), (AppMap, app), (Placement, mapping)):
        try:
            model.loads(yaml.dump(value, Dumper=DUMPER), source="in.yaml")
        except PathmapError as exc:
            assert exc.problems
