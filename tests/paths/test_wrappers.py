"""The built-in wrapper types on real paths (one node, in this process), and a user wrapper."""

import pytest

from paths import Context, NodeServer, Pathmap, PathmapError
from paths import operation as op

PATHMAP = """\
name: wrappers
allow_modules: [programs]
nodes: {A: {host: 127.0.0.1}}
threads: {T0: {node: A}, T1: {node: A}}
elements:
  e: {node: A, template: [int, bytes]}
  f: {node: A, template: [int, str]}
stages:
  e/element: {type: element, node: A, params: {element: e}}
  f/element: {type: element, node: A, params: {element: f}}
  T0/e/count: {type: 'programs:Count', node: A}
  T0/e/buffer: {type: buffer, node: A, params: {size: 3}}
  T0/e/filter: {type: filter, node: A, params: {where: f0 % 2 == 0}}
  T0/f/sort: {type: sort, node: A, params: {key: 0}}
  T1/f/convert: {type: convert, node: A, params: {fn: 'programs:double_items'}}
paths:
  T0/e: {thread: T0, element: e, stages: [T0/e/count, T0/e/buffer, T0/e/filter, e/element]}
  T1/e: {thread: T1, element: e, stages: [e/element]}
  T0/f: {thread: T0, element: f, stages: [T0/f/sort, f/element]}
  T1/f: {thread: T1, element: f, stages: [T1/f/convert, f/element]}
"""


@pytest.fixture
def node(monkeypatch, closing):
    """Node A of PATHMAP, in this process; closed at teardown."""
    from runs import ENV

    monkeypatch.syspath_prepend(ENV["PYTHONPATH"])
    return closing(NodeServer(Pathmap.loads(PATHMAP), "A"))


def test_buffer_batches_moves_and_flushes_before_other_operations(node):
    t0, t1 = Context(node, "T0", {}), Context(node, "T1", {})
    e = t0.path("e")
    assert e.move((0, b"a")) is None and e.move((2, b"b")) is None     # held in the buffer
    assert t1.path("e").last() == 0
    assert e.move((4, b"c")) == 2                                      # the third flushes all three
    assert t1.path("e").last() == 3
    e.move((6, b"d"))
    assert e.last() == 4                                               # any other operation flushes first
    assert node.stages["T0/e/count"].seen == {op.MOVE: 4, op.LAST: 1}


def test_filter_drops_moves_whose_tuple_does_not_match(node):
    e = Context(node, "T0", {}).path("e")
    for i in range(6):
        e.move((i, b"x"))                                              # odd numbers never reach e
    node.stages["T0/e/buffer"].close()
    assert [v for v, _ in Context(node, "T1", {}).path("e").read_range(0, 10)[1]] == [0, 2, 4]


def test_sort_orders_batches_and_convert_applies_an_allowed_function(node):
    t0, t1 = Context(node, "T0", {}), Context(node, "T1", {})
    for value in (5, 1, 3):
        t1.path("f").move((value, f"v{value}"))
    assert t0.path("f").latest(3) == (0, [(1, "v1"), (3, "v3"), (5, "v5")])
    assert t1.path("f").read_range(0, 3) == (0, [(10, "v5"), (2, "v1"), (6, "v3")])


def test_a_user_wrapper_from_a_module_not_allowed_is_refused():
    text = PATHMAP.replace("allow_modules: [programs]", "allow_modules: [json]")
    with pytest.raises(PathmapError, match="module 'programs' is not listed in allow_modules"):
        Pathmap.loads(text)
