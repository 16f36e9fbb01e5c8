"""Attacks on the compiled collector (eventspace/collector_c/): values it read from Python objects
without checking them. Each reproducer runs in a process of its own (a node, or `python -c`), since
on the unfixed code it ends that process with SIGSEGV; the hypothesis fuzz of the same entry points
runs in this process (tests/eventspace/test_compiled_fuzz.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from runs import ENV, REPO
from server_attacks import Bystander

from eventspace import trace
from eventspace.catalogue import Catalogue
from paths import Pathmap, launch

# A valid pathmap: thread T0 moves into `s` through a convert stage whose function is numpy.int64
# (a move's index comes back as a numpy integer), and into `w` through a user wrapper that hands
# back the indices of moves and observes as numpy integers; event collectors at every source and
# sink (the sources see what the stages return).
NUMPY_PATHMAP = """\
name: numpy-results
allow_modules: [numpy, programs]
nodes: {A: {host: 127.0.0.1}}
threads: {T0: {node: A}}
elements:
  s: {node: A, template: '=Q', keep: 10}
  w: {node: A, template: '=Q', keep: 10}
stages:
  s/element: {type: element, node: A, params: {element: s}}
  w/element: {type: element, node: A, params: {element: w}}
  T0/s/convert: {type: convert, node: A, params: {fn: 'numpy:int64'}}
  T0/w/numpy: {type: 'programs:NumpyIndices', node: A}
paths:
  T0/s: {thread: T0, element: s, stages: [T0/s/convert, s/element]}
  T0/w: {thread: T0, element: w, stages: [T0/w/numpy, w/element]}
instrument:
  collectors:
    - {at: [source, sink]}
"""


STALL_S = 1.0   # "not stalled", for the bystander: ten times the 100 ms it may wait, which load cannot break
ROUNDS = 200    # of numpy_moves: the attack lasts while a bystander moves on the node


def numpy_run(run_dir, pure: bool):
    """(what the program returned, every trace element's records with their times zeroed, what a
    bystander client of the node saw meanwhile) of programs:numpy_moves on NUMPY_PATHMAP, its node
    running the pure or the compiled collector."""
    pm = Pathmap.loads(NUMPY_PATHMAP)
    with launch(pm, run_dir=run_dir, env={**ENV, "EVENTSPACE_PURE": "1" if pure else "0"}) as run:
        with Bystander(run.endpoints["A"]) as bystander:
            results = run.run("programs:numpy_moves", {"rounds": ROUNDS}, timeout=60)
            seen = bystander.finish()
        records = {}
        for entry in Catalogue(pm):
            recs = trace.decode(run.client("A").element(entry.trace).read_range(0, 1 << 40)[1]).copy()
            recs["t_start"], recs["t_end"] = 0, 0
            records[entry.trace] = recs.tolist()
    return results, records, seen


def test_a_path_that_returns_numpy_integers_keeps_its_node_and_records_what_pure_records(tmp_path):
    """Attack: a move whose index comes back as numpy.int64 (a convert stage `numpy:int64`, a user
    wrapper) sent the compiled collector's masking into unbounded recursion: SIGSEGV, node gone."""
    compiled_results, compiled_records, seen = numpy_run(tmp_path / "compiled", pure=False)
    pure_results, pure_records, _ = numpy_run(tmp_path / "pure", pure=True)
    last = 3 * ROUNDS - 3
    assert compiled_results == pure_results == {"T0": {"moved": [last, last + 1, last + 2] * 2,
                                                       "seen": [[i] for i in range(3)]}}
    assert compiled_records == pure_records
    move, observe = trace.OP_CODES["move"], trace.OP_CODES["observe"]
    # the source in front of `s`'s convert stage records the indices its numpy integers stood for:
    # the newest of the 3 * ROUNDS moves its trace element keeps
    indices = [arg for op, _, _, _, arg, *_ in pure_records["trace/1"]]
    assert len(indices) > 10 and indices == list(range(3 * ROUNDS - len(indices), 3 * ROUNDS))
    assert sorted({op for recs in pure_records.values() for op, *_ in recs}) == [move, observe]
    assert seen["errors"] == [] and seen["worst_s"] < STALL_S, seen


# A trace element in a process of its own, one state of its ring set from outside (SETUP), and the
# compiled and the pure appender each given a twin of it: prints what each did, as JSON.
APPEND = """\
import json, sys
from eventspace import _collector, trace
from pastset import TupleServer

def twin():
    element = TupleServer("attack").enter("t", trace.FORMAT, keep=4)
    for i in range(6):
        element.move((1, 0, 2, 3, i, 5, 6, 7))
{setup}
    return element

def outcome(make):
    element = twin()
    try:
        append = make(element)
        index = append(1, 0, 2, 3, 99, 5, 6, 7)
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    return ["ok", int(index), int(element._first), int(element._last), bytes(element._ring).hex()]

print(json.dumps({{"compiled": outcome(lambda e: _collector.RingAppender(e, True)),
                  "pure": outcome(lambda e: e.reference_appender(True))}}))
"""


def appended(setup: str) -> dict:
    """What the compiled and the pure appender did to a trace element whose state `setup` (lines
    run on `element`) changed."""
    script = APPEND.format(setup="".join(f"    {line}\n" for line in setup.splitlines()))
    env = {k: v for k, v in os.environ.items() if k != "EVENTSPACE_PURE"}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def test_a_ring_capacity_past_the_ring_is_refused_before_anything_is_written():
    """Attack: `_cap` = 2**62 made the size check (cap * 36 bytes) overflow to 0, and the append
    wrote 36 GB past the ring."""
    got = appended("element._cap = 2 ** 62\nelement._last = element._first = 10 ** 9")
    assert got["compiled"][0] == "ValueError" and "slots" in got["compiled"][1], got
    assert got["pure"][0] == "TemplateMismatch", got   # the pure append packs out of the ring: refused too


def test_a_negative_last_index_writes_the_slot_python_computes():
    """Attack: `_last` = -10**6 made the compiled append write 36 MB before the ring. The ring's
    slot is the cursor modulo its slots, in Python's sense, as the pure append computes it."""
    got = appended("element._last = -10 ** 6\nelement._first = -10 ** 6 - 8")
    assert got["compiled"] == got["pure"] and got["pure"][:4] == ["ok", -10 ** 6, -10 ** 6 + 1 - 4, -10 ** 6 + 1]


def test_cursors_that_are_numpy_integers_are_read_as_their_values():
    got = appended("import numpy\nelement._last = numpy.int64(element._last)\nelement._first = numpy.uint8(2)")
    assert got["compiled"] == got["pure"] and got["pure"][:4] == ["ok", 6, 3, 7]
