"""Histogram reductions (MRNet): a scope stage that counts a field's values per group in log2 buckets, merged up the tree."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import trace
from .catalogue import Catalogue

FIELDS = ("duration", "nbytes", "arg")   # duration: t_end - t_start, ns
MAX_BUCKET = 64                          # the bucket of the greatest u64 value (bucket_of)
_PASSED = trace.SUMMARY | trace.SYSTEM | trace.CLASS   # records that are not events: passed on as they are


def bucket_of(values: np.ndarray) -> np.ndarray:
    """Each value's log2 bucket: 0 for 0, k for 2**(k-1) <= v < 2**k (1 for 1, 2 for 2-3, 3 for 4-7...)."""
    values = np.asarray(values, dtype=np.uint64)
    out = np.zeros(len(values), dtype=np.int64)
    nonzero = values > 0
    # floor(log2(v)) + 1 without float rounding near powers of two: frexp's exponent is exact.
    out[nonzero] = np.frexp(values[nonzero].astype(np.float64))[1]
    # A float64 rounds values above 2**53 up to the next power of two at worst: step back where it did.
    big = nonzero & (values >= np.uint64(1 << 53))
    if big.any():
        out[big] = [int(v).bit_length() for v in values[big].tolist()]
    return out


def bounds(bucket: int) -> tuple[int, int]:
    """The least and greatest value of a bucket."""
    return (0, 0) if bucket == 0 else (1 << (bucket - 1), (1 << bucket) - 1)


def reducer(field: str, groups: np.ndarray):
    """The `histogram:FIELD@GROUP` stage as a function of a record batch: per group (`groups`,
    a code per collector id) and op, one record per log2 bucket of FIELD (flag trace.HISTOGRAM,
    the op, `element` the bucket, `arg` its count, at most 2**32 - 1; `collector` the group's
    least collector id, so that a join above finds the group again; t_start the least and t_end
    the greatest of its events'). A HISTOGRAM record coming in counts as `arg` values in its
    bucket, so the stage merges histograms at every join; summaries, system and class records
    pass through unchanged."""

    def reduce(records: np.ndarray) -> np.ndarray:
        passed = (records["flags"] & _PASSED) != 0
        mine = records[~passed]
        if not len(mine):
            return records
        merged = (mine["flags"] & trace.HISTOGRAM) != 0
        if field == "duration":
            values = np.where(mine["t_end"] > mine["t_start"], mine["t_end"] - mine["t_start"], 0)
        else:
            values = mine[field]
        bucket = np.where(merged, mine["element"], bucket_of(values)).astype(np.int64)
        count = np.where(merged, mine["arg"], 1).astype(np.uint64)
        key = groups[mine["collector"]].astype(np.int64) << 24 | mine["op"].astype(np.int64) << 8 | bucket
        uniq, inverse = np.unique(key, return_inverse=True)
        out = np.zeros(len(uniq), dtype=trace.DTYPE)
        out["flags"] = trace.HISTOGRAM
        out["op"] = (uniq >> 8) & 0xFFFF
        out["element"] = uniq & 0xFF
        out["arg"] = np.minimum(np.bincount(inverse, weights=count.astype(np.float64), minlength=len(uniq)),
                                0xFFFFFFFF)
        collector = np.full(len(uniq), 0xFFFFFFFF, dtype=np.uint32)
        np.minimum.at(collector, inverse, mine["collector"])
        t_start = np.full(len(uniq), np.iinfo(np.uint64).max, dtype=np.uint64)
        np.minimum.at(t_start, inverse, mine["t_start"])
        t_end = np.zeros(len(uniq), dtype=np.uint64)
        np.maximum.at(t_end, inverse, mine["t_end"])
        out["collector"], out["t_start"], out["t_end"] = collector, t_start, t_end
        return trace.concat([records[passed], out]) if passed.any() else out

    return reduce


@dataclass(frozen=True)
class Histogram:
    """One group's histogram of one op: {bucket: count} (see `bounds`)."""

    group: str
    op: str
    buckets: dict[int, int]

    @property
    def count(self) -> int:
        return sum(self.buckets.values())


def decode(records: np.ndarray, catalogue: Catalogue, group: str) -> list[Histogram]:
    """The histograms a `histogram:FIELD@GROUP` scope delivered, by group (named as the catalogue
    names it) and op, in order."""
    mine = records[(records["flags"] & trace.HISTOGRAM) != 0]
    names, column = catalogue.names(group), catalogue.column(group)
    out: dict[tuple, dict[int, int]] = {}
    for cid, op, bucket, count in zip(mine["collector"].tolist(), mine["op"].tolist(), mine["element"].tolist(),
                                      mine["arg"].tolist()):
        key = (str(names[column[cid]]), trace.OP_NAMES.get(op, str(op)))
        buckets = out.setdefault(key, {})
        buckets[bucket] = buckets.get(bucket, 0) + count
    return [Histogram(g, op, dict(sorted(b.items()))) for (g, op), b in sorted(out.items())]
