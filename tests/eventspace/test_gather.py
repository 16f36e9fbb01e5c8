"""Gather joins' plumbing: joining record batches."""

import struct

import numpy as np

from eventspace import trace


def batch(*collectors):
    return trace.decode(b"".join(struct.pack(trace.FORMAT, 1, 0, c, 0, 0, 0, c, c + 1) for c in collectors))


def test_concat_keeps_every_record_in_order():
    joined = trace.concat([batch(1, 2), batch(), batch(3)])
    assert joined.dtype == trace.DTYPE and joined["collector"].tolist() == [1, 2, 3]
    assert np.array_equal(trace.concat([batch(4)]), batch(4))
    assert len(trace.concat([])) == 0


def test_a_batch_forwarded_whole_is_the_bytes_it_came_as_and_any_other_view_its_own_records():
    data = b"".join(struct.pack(trace.FORMAT, 1, 0, c, 0, 0, 0, c, c + 1) for c in range(6))
    records = trace.decode(data)
    assert trace.encode(records) is data   # a join forwards its children's batch as it came
    for view in (records[1:4], records[::2], records[::-1], records[records["collector"] > 2]):
        assert trace.encode(view) == b"".join(data[36 * c:36 * c + 36] for c in view["collector"])
    assert trace.encode(records.copy()) == data
