"""Node clocks: what collectors time with, and each node's offset from the monitor's, estimated NTP-style.

Two schemes (the pathmap's `clock.scheme`; `synchronise` picks): "direct", the monitor exchanges
with every node in turn; "tree", MRNet's two phases: each cluster's first node measures the rest
of its cluster (all clusters at once), then the monitor measures the first nodes, and a node's
offset is its first node's plus its own from that first node.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pastset import Fanout, PastSetError

from .hosted import CLOCK, CLOCK_CHILDREN


def monotonic_clock(offset_ns: int):
    """The node's clock: CLOCK_MONOTONIC in nanoseconds, shifted by `offset_ns` (for testing clock sync)."""
    if not offset_ns:
        return time.monotonic_ns
    base = time.monotonic_ns
    return lambda: base() + offset_ns


@dataclass(frozen=True)
class ClockEstimate:
    """A node's clock minus the monitor's, in nanoseconds (`offset_ns`), from the exchange with the
    least round trip (`delay_ns`); the error is at most half that delay. `drift` is the offset's
    change per second between two rounds (0.0 when only one was made)."""

    node: str
    offset_ns: int
    delay_ns: int
    drift: float = 0.0


def estimate(endpoints: dict[str, str], samples: int = 8, drift_after: float | None = None,
             timeout: float = 2.0) -> dict[str, ClockEstimate]:
    """Estimate every node's offset: `samples` exchanges each (t0 sent, t1 = t2 the node's clock,
    t3 received; offset = t1 - (t0 + t3) / 2), keeping the least-delay one. With `drift_after`
    seconds, a second round estimates drift. Raises PastSetError naming a node that does not answer.
    """
    fanout = Fanout(endpoints)
    try:
        first = {node: _best(fanout, node, samples, timeout) for node in endpoints}
        if drift_after is None:
            return {node: ClockEstimate(node, o, d) for node, (o, d, _) in first.items()}
        time.sleep(drift_after)
        out = {}
        for node in endpoints:
            offset2, delay2, at2 = _best(fanout, node, samples, timeout)
            offset1, _, at1 = first[node]
            drift = (offset2 - offset1) / ((at2 - at1) / 1e9) if at2 != at1 else 0.0
            out[node] = ClockEstimate(node, offset2, delay2, drift)
        return out
    finally:
        fanout.close()


def _best(fanout: Fanout, node: str, samples: int, timeout: float) -> tuple[int, int, int]:
    best = None
    for _ in range(max(1, samples)):
        t0 = time.monotonic_ns()
        query = fanout.round(timeout)
        reply = query.call(node, CLOCK)
        query.wait()
        t3 = time.monotonic_ns()
        if not reply.ok:
            raise PastSetError(f"node {node} does not answer clock queries: "
                               f"{reply.error if reply.error is not None else f'no reply within {timeout:g} s'}")
        delay = t3 - t0
        offset = reply.value - (t0 + t3) // 2
        if best is None or delay < best[1]:
            best = (offset, delay, (t0 + t3) // 2)
    return best


def synchronise(pathmap, endpoints: dict[str, str], scheme: str | None = None,
                timeout: float = 2.0) -> dict[str, ClockEstimate]:
    """Every node's offset from this process's clock, by `scheme` (default: the pathmap's
    `clock.scheme`) with its `clock.samples`. PastSetError naming a node that does not answer."""
    scheme = scheme or pathmap.clock.scheme
    samples = pathmap.clock.samples
    if scheme == "direct":
        return estimate(endpoints, samples, timeout=timeout)
    if scheme != "tree":
        raise ValueError(f"unknown clock scheme {scheme!r}; use direct or tree")
    cluster_of = {n.name: n.cluster for n in pathmap.nodes}
    return tree_estimate(endpoints, {node: cluster_of.get(node, node) for node in endpoints}, samples, timeout)


def tree_estimate(endpoints: dict[str, str], clusters: dict[str, str], samples: int = 8,
                  timeout: float = 2.0) -> dict[str, ClockEstimate]:
    """MRNet's two-phase estimate: in each cluster (`clusters`: node -> its cluster) the first
    node measures the others' offsets from its own clock (every cluster at once); then this
    process measures each first node's. A node's offset is the sum along its path, and so is its
    delay (the error is at most half of it). PastSetError naming the node that could not measure."""
    members: dict[str, list[str]] = {}
    for node in endpoints:
        members.setdefault(clusters[node], []).append(node)
    fronts = {group[0]: group[1:] for group in members.values()}
    fanout = Fanout(endpoints)
    try:
        longest = max((len(children) for children in fronts.values()), default=0)
        query = fanout.round(timeout * (1 + samples * longest))
        replies = {front: query.call(front, CLOCK_CHILDREN, children, samples, timeout)
                   for front, children in fronts.items() if children}
        query.wait()
        for front, reply in replies.items():
            if not reply.ok:
                raise PastSetError(f"node {front} could not measure its cluster's clocks: "
                                   f"{reply.error if reply.error is not None else 'no reply'}")
        top = {front: _best(fanout, front, samples, timeout) for front in fronts}
    finally:
        fanout.close()
    out = {}
    for front, (offset, delay, _) in top.items():
        out[front] = ClockEstimate(front, offset, delay)
        if front in replies:
            for child, (child_offset, child_delay) in replies[front].value.items():
                out[child] = ClockEstimate(child, offset + child_offset, delay + child_delay)
    return {node: out[node] for node in endpoints}


def relative_to(estimates: dict[str, ClockEstimate], reference: str) -> dict[str, int]:
    """Offsets relative to node `reference`'s clock instead of the monitor's."""
    base = estimates[reference].offset_ns
    return {node: e.offset_ns - base for node, e in estimates.items()}


@dataclass(frozen=True)
class WallClock:
    """The wall-clock time of one moment on the monitor's clock: `monotonic_ns` (CLOCK_MONOTONIC,
    the clock merged events are on) and `realtime_ns` (CLOCK_REALTIME, nanoseconds since the Unix
    epoch), read together. Exporters use it to say when a run was recorded."""

    monotonic_ns: int
    realtime_ns: int

    @classmethod
    def now(cls) -> WallClock:
        """Both clocks now: the wall clock read between two monotonic reads, paired with their middle."""
        before = time.monotonic_ns()
        realtime = time.time_ns()
        after = time.monotonic_ns()
        return cls((before + after) // 2, realtime)

    def realtime(self, monotonic_ns: int) -> int:
        """The wall-clock time (ns since the epoch) of `monotonic_ns` on the monitor's clock."""
        return self.realtime_ns + (int(monotonic_ns) - self.monotonic_ns)
