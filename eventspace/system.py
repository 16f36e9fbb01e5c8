"""System summary records: every node server samples its process's CPU, memory and communication per interval, as trace tuples."""

from __future__ import annotations

import os
import resource
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from . import trace
from .catalogue import SYSTEM_ROLE, Catalogue
from .space import NodeSpace

INTERVAL = 0.1                               # seconds between samples
INTERVAL_ENV = "EVENTSPACE_SYSTEM_INTERVAL"  # seconds, read when a node server starts
SAMPLES_KEPT = 200                           # samples a node's system element keeps (20 s at 100 ms)
ON_AT_START = True                           # whether a node samples before anyone switches it
COST = "eventspace.system.cost"              # hosted: () -> [samples taken, CPU ns the sampler spent on them]

# The metrics (a SYSTEM record's `op`; names in trace.METRICS). CPU times and counts are what the
# interval [t_start, t_end] added; RSS is the resident set at t_end.
CPU_USER, CPU_SYSTEM, RSS, VOLUNTARY_CTX, INVOLUNTARY_CTX, MSGS_IN, BYTES_IN, MSGS_OUT, BYTES_OUT = range(64, 73)
PROCESS_METRICS = (CPU_USER, CPU_SYSTEM, RSS, VOLUNTARY_CTX, INVOLUNTARY_CTX, MSGS_IN, BYTES_IN, MSGS_OUT,
                   BYTES_OUT)
THREAD_METRICS = (CPU_USER, CPU_SYSTEM)     # also sampled per application thread
assert all(trace.METRICS[m] for m in PROCESS_METRICS)

_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")   # /proc's CPU times count clock ticks
_PAGE = os.sysconf("SC_PAGE_SIZE")
_U32 = 0xFFFFFFFF


class SystemSampler:
    """The system summary sampler of one node server (an `eventspace.node_services` service).

    Every `interval` seconds (INTERVAL, or $EVENTSPACE_SYSTEM_INTERVAL when the node started) it
    appends one sample to the node's system element (the catalogue's `system_of(node)`, a binary
    trace element keeping SAMPLES_KEPT samples): a record per metric of the whole process
    (PROCESS_METRICS: CPU user and system time and context switches from getrusage, which sums
    the process's threads at microsecond precision; RSS from /proc/self/statm; the messages
    and bytes the node server received and sent, pastset.TupleServer.traffic) and per running
    application thread (THREAD_METRICS, from /proc/self/task/TID/stat, in clock ticks of 10 ms).

    A record has flag trace.SYSTEM, the metric as `op`, the system element's id as `collector`,
    `element` 0 for the process or 1 + the thread's index in the pathmap's threads, its value
    split over `arg` (low 32 bits) and `nbytes` (high), and the interval in `t_start`, `t_end`
    (ns, the node's clock). It is switched like a collector (`eventspace space switch on|off
    --view role:system`); switched on again, its first sample only sets the baseline. What it
    costs is counted (the CPU time of its thread while sampling) and answered by the hosted
    call COST.
    """

    KEY = "eventspace.system"

    def __init__(self, node, interval: float = INTERVAL, on: bool = ON_AT_START):
        space = NodeSpace.of(node)
        self.node = node
        self.interval = interval
        self.entry = space.catalogue.system_of(node.name)
        self._thread_index = {name: i for i, (name, _) in enumerate(space.catalogue.threads, 1)}
        per_sample = len(PROCESS_METRICS) + len(THREAD_METRICS) * len(node.pathmap.threads_on(node.name))
        element = node.server.enter(self.entry.trace, trace.FORMAT, keep=SAMPLES_KEPT * per_sample)
        self._append = element.appender(single_writer=True)   # only the sampler's thread writes
        space.recorded(element)
        page, self._at = space.enrol(self.entry.id)
        page.switches[self._at] = on
        self._switches = page.switches
        self._clock = space.clock
        self._statm = os.open("/proc/self/statm", os.O_RDONLY)
        self._stat_fds: dict[int, int] = {}    # thread id -> its /proc stat, kept open (pread is cheap)
        self._last: tuple | None = None        # (t, process values) of the last sample
        self._last_threads: dict[int, tuple[int, int]] = {}   # thread id -> (user ns, system ns)
        self.samples = self.cpu_ns = 0
        node.server.host(COST, lambda: [self.samples, self.cpu_ns], inline=True)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"eventspace-system-{node.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        due = time.monotonic()
        while True:
            due += self.interval
            late = time.monotonic() - due
            if late > self.interval:   # stopped or starved: sample on from now, not in a burst
                due += late
            if self._closing.wait(max(0.0, due - time.monotonic())):
                return
            if self._switches[self._at]:
                started = time.thread_time_ns()
                self.sample()
                self.cpu_ns += time.thread_time_ns() - started
                self.samples += 1
            else:
                self._last = None

    def sample(self) -> int:
        """Take one sample and append its records (none for the first: it sets the baseline);
        how many it appended."""
        now = self._clock()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        rss = int(os.pread(self._statm, 128, 0).split()[1]) * _PAGE
        values = (int(usage.ru_utime * 1e9), int(usage.ru_stime * 1e9), rss, usage.ru_nvcsw, usage.ru_nivcsw,
                  *self.node.server.traffic())
        threads = self._read_threads()
        last, self._last = self._last, (now, values)
        last_threads, self._last_threads = self._last_threads, {tid: times for _, tid, times in threads}
        if last is None:
            return 0
        then, before = last
        append, cid, flags = self._append, self.entry.id, trace.SYSTEM
        for metric, value, old in zip(PROCESS_METRICS, values, before):
            value = value if metric == RSS else max(0, value - old)
            append(metric, flags, cid, 0, value & _U32, value >> 32, then, now)
        written = len(PROCESS_METRICS)
        for index, tid, times in threads:
            old = last_threads.get(tid)
            if old is None:
                continue   # a thread that started since the last sample: its baseline
            for metric, value, was in zip(THREAD_METRICS, times, old):
                value = max(0, value - was)
                append(metric, flags, cid, index, value & _U32, value >> 32, then, now)
            written += len(THREAD_METRICS)
        return written

    def _read_threads(self) -> list[tuple[int, int, tuple[int, int]]]:
        """(thread index, thread id, (user ns, system ns)) of each running application thread."""
        out = []
        running = self.node.thread_ids()
        fds = self._stat_fds
        for name, tid in running.items():
            fd = fds.get(tid)
            try:
                if fd is None:
                    fd = fds[tid] = os.open(f"/proc/self/task/{tid}/stat", os.O_RDONLY)
                # Fields after the command's closing parenthesis: state is [0], utime [11], stime [12].
                fields = os.pread(fd, 1024, 0).rsplit(b")", 1)[1].split()
            except OSError:   # it ended between the listing and the read
                continue
            out.append((self._thread_index[name], tid, (int(fields[11]) * _TICK_NS, int(fields[12]) * _TICK_NS)))
        live = set(running.values())
        for tid in [t for t in fds if t not in live]:
            os.close(fds.pop(tid))
        return out

    def close(self) -> None:
        self._closing.set()
        self._thread.join(timeout=2)
        for fd in (self._statm, *self._stat_fds.values()):
            os.close(fd)
        self._stat_fds.clear()


def start_sampler(node) -> None:
    """Entry point (eventspace.node_services): every node server samples itself from its start."""
    if not node.pathmap.instrument.system:   # `instrument: {system: false}`
        return
    interval = os.environ.get(INTERVAL_ENV)
    node.services[SystemSampler.KEY] = SystemSampler(node, float(interval) if interval else INTERVAL)


# -- reading samples back --------------------------------------------------------------------------

def values(records: np.ndarray) -> np.ndarray:
    """The value of each SYSTEM record (uint64: `arg` + `nbytes` << 32)."""
    return records["arg"].astype(np.uint64) | (records["nbytes"].astype(np.uint64) << np.uint64(32))


def rates(records: np.ndarray) -> np.ndarray:
    """Each SYSTEM record in the unit a display shows: CPU time as cores busy (seconds per second),
    counts per second, RSS in bytes."""
    value = values(records).astype(np.float64)
    seconds = np.maximum(records["t_end"].astype(np.int64) - records["t_start"].astype(np.int64), 1) / 1e9
    cpu = (records["op"] == CPU_USER) | (records["op"] == CPU_SYSTEM)
    return np.where(records["op"] == RSS, value, np.where(cpu, value / 1e9, value) / seconds)


SERIES = {CPU_USER: "cpu user (cores)", CPU_SYSTEM: "cpu system (cores)", RSS: "rss (bytes)",
          VOLUNTARY_CTX: "voluntary context switches /s", INVOLUNTARY_CTX: "involuntary context switches /s",
          MSGS_IN: "messages in /s", BYTES_IN: "bytes in /s", MSGS_OUT: "messages out /s",
          BYTES_OUT: "bytes out /s"}


def series_name(metric: int, thread: str | None) -> str:
    """What a counter track of `metric` is called: `cpu user (cores)`, or `T3 cpu user (cores)`."""
    name = SERIES.get(metric, trace.OP_NAMES.get(metric, f"metric {metric}"))
    return f"{thread} {name}" if thread else name


def series(records: np.ndarray, catalogue: Catalogue) -> tuple[list[tuple[str | None, str]], np.ndarray]:
    """For each SYSTEM record, the counter it belongs to, (node, `series_name`; node None for a
    collector id the catalogue does not know), and its value as `rates` gives it."""
    out = []
    for cid, op, element in zip(records["collector"].tolist(), records["op"].tolist(), records["element"].tolist()):
        try:
            node = catalogue[cid].node
        except KeyError:
            node = None
        out.append((node, series_name(op, catalogue.thread_of(element))))
    return out, rates(records)


def split(records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the SYSTEM records, the others) of a batch."""
    system = (records["flags"] & trace.SYSTEM) != 0
    return records[system], records[~system]


@dataclass(frozen=True)
class NodeSample:
    """One node's system summary over one interval [t_start, t_end] (ns, the records' clock):
    CPU as cores busy (user, system), RSS in bytes at the end, context switches, messages and
    bytes per second, and each sampled application thread's CPU (user, system) in cores."""

    node: str
    t_start: int
    t_end: int
    cpu_user: float = 0.0
    cpu_system: float = 0.0
    rss_bytes: float = 0.0
    voluntary_ctx: float = 0.0
    involuntary_ctx: float = 0.0
    msgs_in: float = 0.0
    bytes_in: float = 0.0
    msgs_out: float = 0.0
    bytes_out: float = 0.0
    threads: dict[str, tuple[float, float]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return dict(self.__dict__, threads={t: list(v) for t, v in self.threads.items()})


_FIELD = {CPU_USER: "cpu_user", CPU_SYSTEM: "cpu_system", RSS: "rss_bytes", VOLUNTARY_CTX: "voluntary_ctx",
          INVOLUNTARY_CTX: "involuntary_ctx", MSGS_IN: "msgs_in", BYTES_IN: "bytes_in", MSGS_OUT: "msgs_out",
          BYTES_OUT: "bytes_out"}


def samples(records: np.ndarray, catalogue: Catalogue) -> list[NodeSample]:
    """The samples among `records` (others are skipped), one NodeSample per node and interval,
    in order of interval end."""
    records, _ = split(records)
    if not len(records):
        return []
    shown = rates(records)
    grouped: dict[tuple[str, int], dict] = {}
    for r, value in zip(records.tolist(), shown.tolist()):
        op, _, cid, element, _, _, t_start, t_end = r
        try:
            entry = catalogue[cid]
        except KeyError:
            continue
        if entry.role != SYSTEM_ROLE:
            continue
        sample = grouped.setdefault((entry.node, t_end), {"node": entry.node, "t_start": t_start, "t_end": t_end,
                                                          "threads": {}})
        if element:
            thread = catalogue.thread_of(element)
            if thread is not None and op in THREAD_METRICS:
                user, system = sample["threads"].get(thread, (0.0, 0.0))
                sample["threads"][thread] = (value, system) if op == CPU_USER else (user, value)
        elif op in _FIELD:
            sample[_FIELD[op]] = value
    return [NodeSample(**s) for s in sorted(grouped.values(), key=lambda s: (s["t_end"], s["node"]))]


def newest(records: np.ndarray, catalogue: Catalogue) -> dict[str, NodeSample]:
    """The newest sample of each node among `records`, by node."""
    return {s.node: s for s in samples(records, catalogue)}
