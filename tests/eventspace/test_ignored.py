"""The one check of trace records against the catalogue (eventspace.ignored): what each reason leaves out,
what it keeps, and that whatever a batch holds, what it keeps is safe for every stage to read."""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from eventspace import ignored, trace
from eventspace.catalogue import Catalogue
from eventspace.classes import RANGE
from eventspace.ignored import Ignored, check, decoded
from eventspace.stages import ScopeStage, compile_stages
from paths import Instrument, Selector
from runs import FOUR_NODES, pathmap_for, ring_app

MOVE = trace.OP_CODES["move"]
U32, U64 = 2**32 - 1, 2**64 - 1


@pytest.fixture(scope="module")
def catalogue():
    pm = pathmap_for(ring_app(12), FOUR_NODES, shape="per-node", name="checked")
    pm = dataclasses.replace(pm, instrument=Instrument(collectors=(Selector(at=("source",)),))).validate()
    return Catalogue(pm)


def batch(*rows):
    return np.array(list(rows), dtype=trace.DTYPE)


def test_genuine_records_are_kept_as_they_are(catalogue):
    records = batch(*[(MOVE, 0, e.id, e.element_id, i, 8, 1000 + i, 2000 + i) for i, e in enumerate(catalogue.entries)])
    kept, left = check(records, catalogue, from_rings=True)
    assert kept is records and left == {}


@pytest.mark.parametrize("row, reason", [
    ((MOVE, 0, 0, 0, 0, 0, 1, 2), ignored.UNKNOWN_COLLECTOR),
    ((MOVE, 0, U32, 0, 0, 0, 1, 2), ignored.UNKNOWN_COLLECTOR),
    ((MOVE, 0, 1, 0, 0, 0, 5, 4), ignored.BAD_TIMES),
    ((0, 0, 1, 0, 0, 0, 1, 2), ignored.NO_OP),
    ((0, trace.SYSTEM, 1, 0, 0, 0, 1, 2), ignored.NO_OP),
    ((MOVE, 0, 1, 0, 0, 0, 1, 2**63 - 1), ignored.BAD_TIMES),
    ((MOVE, 0, 1, 0, 0, 0, U64, U64), ignored.BAD_TIMES),
    ((RANGE, trace.CLASS, 1, 0, 0, U32, 1, 2), ignored.BAD_CLASS),
    ((RANGE, trace.CLASS, 1, 0, 5, 4, 1, 2), ignored.BAD_CLASS),
    ((MOVE, trace.CLASS, 1, U32, 3, 2, 1, 2), ignored.BAD_CLASS),
    ((MOVE, trace.HISTOGRAM, 1, 65, 3, 0, 1, 2), ignored.BAD_BUCKET),
])
def test_each_reason_leaves_its_record_out(catalogue, row, reason):
    good = (MOVE, 0, 1, 0, 0, 0, 1, 2)
    kept, left = check(batch(good, row, good), catalogue)
    assert left == {reason: 1} and len(kept) == 2 and kept.tolist() == [good, good]


def test_stage_records_are_forged_in_a_trace_element_but_not_from_a_join(catalogue):
    rows = [(RANGE, trace.CLASS, 1, 0, 0, 11, 1, 2), (MOVE, trace.HISTOGRAM, 1, 64, 3, 0, 1, 2),
            (MOVE, trace.SUMMARY, 1, 0, 9, 0, 1, 2)]
    assert check(batch(*rows), catalogue)[1] == {}
    kept, left = check(batch(*rows), catalogue, from_rings=True)
    assert left == {ignored.STAGE_FLAGS: 3} and not len(kept)


def test_a_batch_that_is_not_whole_records_is_left_out(catalogue):
    left = Ignored()
    assert not len(decoded(b"\0" * (trace.SIZE * 3 + 8), catalogue, left))
    assert left == {ignored.NOT_RECORDS: 3}
    assert left.lines() == [f"3 records ignored: {ignored.NOT_RECORDS}"]


def test_only_known_reasons_are_counted_from_a_reply():
    """A child join's reply names its reasons: whatever else one says never reaches a log line."""
    tally = Ignored()
    tally.merge({"made up\nscope x: 1 record ignored: nothing": 5, ignored.UNKNOWN_COLLECTOR: 2,
                 ignored.BAD_TIMES: -3})
    assert tally == {ignored.UNKNOWN_COLLECTOR: 2}
    with pytest.raises((TypeError, ValueError)):
        tally.merge({ignored.BAD_TIMES: "many"})


def test_a_reason_is_told_once(catalogue, caplog):
    told: set[str] = set()
    for _ in range(3):
        Ignored({ignored.UNKNOWN_COLLECTOR: 12}).tell(told, "scope x")
    assert [r.getMessage() for r in caplog.records] == [f"scope x: 12 records ignored: {ignored.UNKNOWN_COLLECTOR}"]


STAGES = ["latest", "reduce:max_t_end@thread", "reduce:count@node", "reduce:min:arg@element", "histogram:nbytes@node",
          "histogram:duration@thread", "classes:ops@thread", "classes:durations@node", "filter:op == move", "sort:t_end"]
fields = st.tuples(st.integers(0, 2**16 - 1), st.integers(0, 2**16 - 1), st.integers(0, U32), st.integers(0, U32),
                   st.integers(0, U32), st.integers(0, U32), st.integers(0, U64), st.integers(0, U64))
small = st.tuples(st.sampled_from([0, MOVE, 2, 3]), st.sampled_from([0, trace.CLASS, trace.HISTOGRAM, trace.SUMMARY,
                                                                      trace.SYSTEM, trace.ERROR | trace.TREE]),
                  st.integers(0, 120), st.integers(0, 70), st.integers(0, 20), st.integers(0, 20),
                  st.integers(0, 3000), st.integers(0, 3000))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.one_of(fields, small), max_size=40), stage=st.sampled_from(STAGES))
@example(rows=[(RANGE, trace.CLASS, 1, 0, 0, 3, 1, 2)], stage="classes:ops@thread")   # member runs without counts
@example(rows=[(0, 0, 1, 0, 0, 0, 0, 0)], stage="classes:durations@node")   # an event of op 0: read as a member run
def test_whatever_a_batch_holds_what_is_kept_every_stage_reads(catalogue, rows, stage):
    kept, _ = check(batch(*rows) if rows else trace.empty(), catalogue)
    out = compile_stages([ScopeStage.parse(stage)], catalogue)(kept)
    assert out.dtype == trace.DTYPE
    assert check(out, catalogue)[1] == {}, "a stage made a record the check leaves out"
