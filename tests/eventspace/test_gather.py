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
