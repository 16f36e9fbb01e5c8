"""Records a consumer leaves out, and why: the one check of a batch of trace records against the catalogue."""

from __future__ import annotations

import logging

import numpy as np

from . import trace
from .catalogue import Catalogue
from .classes import RANGE
from .histogram import MAX_BUCKET

# Anyone who may write an element may write into a trace element, so records are data to check,
# never facts: each consumer (a scope's joins, on nodes and in the monitor, and every reader of an
# archive) keeps only the records that pass `check`, and counts the others by reason.
UNKNOWN_COLLECTOR = "collector id out of range"
BAD_TIMES = "time out of range (past 2**62 ns, or an end before its start)"
NO_OP = "op 0 in an event (no collector writes it: a class record's member run)"
NOT_ON_CLOCK = "time outside its clock (before its node started, or after the record was read)"
STAGE_FLAGS = "a scope stage's flags (class, histogram, summary) in a trace element"
BAD_CLASS = "class members or part out of range"
BAD_BUCKET = "histogram bucket out of range"
NOT_RECORDS = "not whole 36-byte trace records (an element of another template under a trace element's name)"
NOT_INTEGERS = "fields out of their ranges, or not numbers"   # an archive's rows (eventspace.archive)
REASONS = frozenset({UNKNOWN_COLLECTOR, BAD_TIMES, NO_OP, NOT_ON_CLOCK, STAGE_FLAGS, BAD_CLASS, BAD_BUCKET,
                     NOT_RECORDS, NOT_INTEGERS})

LATEST_NS = 1 << 62   # no clock reads this: 146 years of a node's monotonic clock (archives store below 2**63)
_STAGE_FLAGS = trace.CLASS | trace.HISTOGRAM | trace.SUMMARY

log = logging.getLogger("eventspace.ignored")   # the `eventspace` command prints it on stderr


class Ignored(dict):
    """How many records were left out, by reason (one of this module's reasons). A plain dict, so
    that it travels in a join's reply as it is."""

    def add(self, reason: str, count: int) -> None:
        if count:
            self[reason] = self.get(reason, 0) + int(count)

    def merge(self, other) -> None:
        """Count in another tally (a child join's, or a dict from the wire: only REASONS count, so
        that nothing else ever reaches a log line). TypeError or ValueError for counts that are
        not numbers."""
        for reason, count in other.items():
            if reason in REASONS and int(count) > 0:
                self.add(reason, count)

    def lines(self, what: str = "records") -> list[str]:
        """`12 records ignored: collector id out of range`, one per reason."""
        return [f"{count:,} {what if count != 1 else what.rstrip('s')} ignored: {reason}"
                for reason, count in self.items()]

    def tell(self, told: set[str], where: str, what: str = "records") -> None:
        """Log each reason not in `told` yet (and add it there): a consumer says so once."""
        for reason, line in zip(list(self), self.lines(what)):
            if reason not in told:
                told.add(reason)
                log.warning("%s: %s", where, line)


def check(records: np.ndarray, catalogue: Catalogue, *, from_rings: bool = False,
          clock: tuple[int, int, np.ndarray] | None = None) -> tuple[np.ndarray, Ignored]:
    """(the records of `records` that may be read, what was left out by reason): see `verdict`;
    a batch with nothing to leave out is returned as it is."""
    keep, ignored = verdict(records, catalogue, from_rings=from_rings, clock=clock)
    return (records if keep is None else records[keep]), ignored


def verdict(records: np.ndarray, catalogue: Catalogue, *, from_rings: bool = False,
            clock: tuple[int, int, np.ndarray] | None = None) -> tuple[np.ndarray | None, Ignored]:
    """(which records may be read: a boolean mask, or None for all of them; what was left out by reason).

    A record is kept when its collector is one of the catalogue's (ids 1 to its collectors and
    system elements), its times are below LATEST_NS with t_end >= t_start (a collector reads
    the clock before and after), an event's op is not 0 (operation codes start at 1; a class
    stage marks its member runs with op 0), and a class or histogram record's members and
    buckets are in range (a class's member run `arg`..`nbytes` within the pathmap's threads or
    nodes, its part within its element classes or duration classes; a histogram's bucket at
    most MAX_BUCKET).
    `from_rings`: the records were read from trace elements, which collectors and system
    samplers write, never a scope stage: a class, histogram or summary flag there was forged.
    `clock`: (started, now, timed here) where records were read on the node whose clock timed
    them: each record of a collector marked in `timed here` (a bool per collector id) must start
    at or after `started` (the node's start) and end at or before `now` (when it was read), both
    on that clock. Numpy masks over the batch.
    """
    if not len(records):
        return None, Ignored()
    cid, flags = records["collector"], records["flags"]
    t_start, t_end = records["t_start"], records["t_end"]
    ids = len(catalogue.entries) + len(catalogue.system)
    bad_id = (cid == 0) | (cid > ids)
    bad_time = (t_end < t_start) | (t_end >= LATEST_NS)
    if clock is not None:
        started, now, here = clock
        off_clock = ~bad_id & here[np.where(bad_id, 0, cid)] & ((t_start < started) | (t_end > now))
    else:
        off_clock = np.zeros(len(records), dtype=bool)
    derived = (flags & _STAGE_FLAGS) != 0
    no_op = ~derived & (records["op"] == 0)
    forged = derived if from_rings else np.zeros(len(records), dtype=bool)
    bad_class = np.zeros(len(records), dtype=bool)
    bad_bucket = bad_class
    if derived.any():
        members = max(len(catalogue.threads), len(catalogue.system))
        is_class = (flags & trace.CLASS) != 0
        is_range = records["op"] == RANGE
        first, last, part = records["arg"], records["nbytes"], records["element"]
        bad_class = is_class & np.where(is_range, (first > last) | (last >= members), part > max(ids, MAX_BUCKET))
        bad_bucket = ((flags & trace.HISTOGRAM) != 0) & (part > MAX_BUCKET)
    bad = bad_id | bad_time | off_clock | no_op | forged | bad_class | bad_bucket
    if not bad.any():
        return None, Ignored()
    ignored = Ignored()
    left = bad.copy()
    for reason, mask in ((UNKNOWN_COLLECTOR, bad_id), (BAD_TIMES, bad_time), (NOT_ON_CLOCK, off_clock),
                         (NO_OP, no_op), (STAGE_FLAGS, forged), (BAD_CLASS, bad_class), (BAD_BUCKET, bad_bucket)):
        ignored.add(reason, np.count_nonzero(mask & left))
        left &= ~mask
    return ~bad, ignored


def decoded(data: bytes, catalogue: Catalogue, ignored: Ignored, *, from_rings: bool = False,
            clock: tuple[int, int, np.ndarray] | None = None) -> np.ndarray:
    """The records of a packed batch that `check` keeps; what it leaves out is counted into
    `ignored`, and a batch that is not whole trace records is left out entirely (NOT_RECORDS)."""
    if len(data) % trace.SIZE:
        ignored.add(NOT_RECORDS, max(1, len(data) // trace.SIZE))
        return trace.empty()
    records, left = check(trace.decode(data), catalogue, from_rings=from_rings, clock=clock)
    if left:
        ignored.merge(left)
    return records
