"""MPI's non-overtaking rule as records come (eventspace.mpi.matching.MessageMatcher): the pairs of any
batches are those of all the records at once, also when nonblocking receives complete out of order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from eventspace.mpi import encoding as e
from eventspace.mpi.matching import MessageMatcher, channel_ends, end_positions, message_pairs, post_rows
from mpitrace import MpiTrace


def batched_pairs(records, catalogue, cuts) -> list[tuple[int, int]]:
    """message_pairs, with the records fed to a MessageMatcher in batches cut at `cuts` (and finished)."""
    collectors = e.Collectors(catalogue)
    matcher = MessageMatcher(np.dtype(np.int64))
    found = []
    bounds = [0, *sorted(cuts), len(records)]
    for lo, hi in zip(bounds, bounds[1:]):
        batch = records[lo:hi]
        sends, receives = end_positions(batch, collectors)
        op, flags = batch["op"], batch["flags"]
        cid = collectors.index(batch["collector"])
        posted = np.isin(op, [e.IRECV, e.IMRECV])
        ring, t = cid, batch["t_start"].astype(np.int64)
        posts, closes = (post_rows(ring[posted & (flags & e.REQUEST == 0)], t[posted & (flags & e.REQUEST == 0)]),
                         post_rows(ring[posted & (flags & e.REQUEST != 0)], t[posted & (flags & e.REQUEST != 0)]))
        s, r = matcher.add(channel_ends(batch, sends, collectors, True), sends + lo,
                           channel_ends(batch, receives, collectors, False), receives + lo, posts, closes)
        found += zip(s.tolist(), r.tolist())
    s, r = matcher.finish()
    found += zip(s.tolist(), r.tolist())
    return sorted(found)


def exchange() -> MpiTrace:
    """Three ranks: Irecvs of one channel waited for in the opposite order, blocking receives
    posted after them, sends from any rank, messages never received."""
    run = MpiTrace(3)
    for step in range(4):
        at = 10.0 * step
        first, second = run.post(0, 1, at, at + 0.1), run.post(0, 1, at + 0.2, at + 0.3)
        run.send(1, 0, at + 0.5, at + 0.6)
        run.send(1, 0, at + 0.7, at + 0.8)
        run.send(2, 0, at + 0.9, at + 1.0, tag=step)
        run.recv(0, 2, at + 1.1, at + 1.2, tag=step)          # posted while both Irecvs are open
        run.wait(0, [second], at + 1.3, at + 1.4, op=e.WAIT)
        run.wait(0, [first], at + 1.5, at + 1.6, op=e.WAIT)
        run.send(2, 1, at + 2.0, at + 2.1, tag=99)            # never received
    return run


def test_a_receive_posted_first_gets_the_first_message_though_it_completes_last():
    run = exchange()
    records = run.records()
    pairs = message_pairs(records, run.catalogue)
    assert len(pairs) == 12
    for s, r in pairs:   # non-overtaking: each send to the receive posted in the same order
        if records[s]["element"] == 0 and records[r]["flags"] & e.REQUEST:
            first_send = records[s]["t_start"] % 10_000_000 == 500_000
            first_posted = records[r]["t_start"] % 10_000_000 == 0
            assert first_send == first_posted


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(exchange().rows)), max_size=10))
def test_the_pairs_of_any_batches_are_the_pairs_of_all_the_records_at_once(cuts):
    run = exchange()
    records = run.records()
    assert batched_pairs(records, run.catalogue, cuts) == message_pairs(records, run.catalogue)
