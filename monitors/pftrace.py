"""Perfetto's native trace format (.pftrace): interned TrackEvent packets, streamed in compressed bundles."""

from __future__ import annotations

import itertools
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

from eventspace import system, trace
from eventspace.catalogue import Catalogue
from eventspace.clock import WallClock
from paths.atomicfile import replacing

from .slices import READ, FlowIds, collector_args, flows, record_args, slice_name
from .tracks import UNKNOWN_NODE, Layout, layout, with_nodes

SEQUENCE = 1          # trusted_packet_sequence_id: one writer, one sequence of packets
DELTA_CLOCK = 64      # a sequence-scoped incremental clock: a timestamp is the step from the one before
# Packets reach the file in deflate-compressed bundles (TracePacket.compressed_packets, as Perfetto's
# tracing service writes them), each well under the format's 512 KB: 256 KiB of packets at most.
BUNDLE = 256 * 1024

_MONOTONIC = pb.BUILTIN_CLOCK_MONOTONIC
_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE

# Kinds of event, in the order they are written at one timestamp: slices that end there close
# before slices that begin there open, and instants come last (a record that took no time is an
# instant: a slice cannot end before it begins at one timestamp). A `read` instant (where a flow
# ends) follows every other instant, so that a flow starting and ending at one nanosecond starts first.
# Counter values (system summary records) come last.
_END, _BEGIN, _INSTANT, _READ, _COUNTER = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class PftraceSummary:
    """What `write_pftrace` wrote: `slices` (one per record), `tracks` (thread, element, tree and
    overflow tracks), `processes` (one per node), `flows` (move -> observe and MPI send -> receive
    arrows), `nbytes` (the file's size in bytes), `counters` (values on counter tracks: system
    summary records)."""

    path: Path
    slices: int
    tracks: int
    processes: int
    flows: int
    nbytes: int
    counters: int = 0


def write_pftrace(path: str | os.PathLike, records: np.ndarray, catalogue: Catalogue, *,
                  recorded: WallClock | None = None, progress=None) -> PftraceSummary:
    """Write `records` (trace.DTYPE) as a Perfetto protobuf trace (for ui.perfetto.dev).

    Tracks are monitors.tracks's, as in the JSON trace: a process per node (pid and track uuid
    1, 2, ... in display order) and a thread track per thread, element or tree, and overflow lane
    (tid and track uuid above every pid), named and explicitly ordered. A record is a slice
    (SLICE_BEGIN and SLICE_END; an INSTANT if it took no time) named by its op (`move [error]`
    for an ERROR record), with the JSON trace's args as debug annotations: collector, role, tree,
    element, path, then index, arg or summary_of, nbytes, error. Each move starts a flow
    (`flow_ids`: 1, 2, ... as in the JSON trace) to every observe that read its tuple, and each
    MPI send one to the receive that got its message; the flow ends (`terminating_flow_ids`) on a
    `read` instant where the observe (receive) returned, not at its start.

    A system summary record (trace.SYSTEM) is a value (TYPE_COUNTER, `double_counter_value`) at
    its interval's start on a counter track of its node's process, one track per metric and
    thread, named and scaled by eventspace.system (`cpu user (cores)`, `T3 cpu system (cores)`,
    `rss (bytes)`, `messages in /s`, ...); a node with only counters gets a process of its own.

    Timestamps are the records' nanoseconds on CLOCK_MONOTONIC (the monitor's clock, declared
    the trace's primary clock); the clock snapshot at the first timestamp adds CLOCK_REALTIME if
    `recorded` says when the events happened. Every packet is on one sequence: its first packet
    interns every name, annotation name and string, and each event's timestamp is the step
    from the event before on an incremental clock, so events come in timestamp order.

    Packets are written as they are built (nothing holds the whole trace: what is held of the
    records are numpy columns, and the Python values of one chunk of events at a time), to a
    temporary file renamed into place: `path` is written whole or not at all. `progress`, if
    given, is called as they go with the number of events just written and how many there are
    in all. FileNotFoundError if its directory does not exist, OSError if it cannot be written.
    """
    records = np.asarray(records, dtype=trace.DTYPE)
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path.parent}: no such directory; create it or write the trace elsewhere")
    t0 = int(records["t_start"].min()) if len(records) else 0
    samples, records = system.split(records)
    starts = records["t_start"].astype(np.int64)
    ends = np.maximum(records["t_end"].astype(np.int64), starts)
    series, values = system.series(samples, catalogue)
    series = [(node or UNKNOWN_NODE, name) for node, name in series]
    lay = with_nodes(layout(records, catalogue, starts, ends), (node for node, _ in series))
    arrows = flows(records, catalogue)
    # Counter tracks after the thread tracks, one per (node, series), in the order they first come.
    counter_uuid = {key: _track_uuid(lay, len(lay.tracks)) + i for i, key in enumerate(dict.fromkeys(series))}
    counters = (samples["t_start"].astype(np.int64), np.array([counter_uuid[k] for k in series], dtype=np.int64),
                values)

    with replacing(path, "wb") as f:
        strings = _Strings(records, catalogue)
        header = (packet.SerializeToString() for packet in _header(strings, lay, t0, recorded, counter_uuid))
        events = _events(records, starts, ends, lay, arrows, strings, t0, counters, progress)
        _write_bundles(StreamingTraceProtoBuilder(f), itertools.chain(header, events))
        f.flush()
        nbytes = os.fstat(f.fileno()).st_size
    return PftraceSummary(path, len(records), len(lay.tracks), len(lay.nodes), arrows.count, nbytes, len(samples))


def _write_bundles(builder: StreamingTraceProtoBuilder, packets: Iterable[bytes]) -> None:
    """Gather serialized packets into compressed bundles of at most BUNDLE bytes (never splitting
    a packet) as they come, and write each bundle as one packet through the official builder."""
    pending: list[bytes] = []
    size = 0
    for packet in packets:
        # Framed as field 1 (`packet`) of a Trace, as a Trace message holds it.
        n = len(packet)
        framed = b"\x0a" + (_SMALL[n] if n < _SMALLEST_LONG else _varint(n)) + packet
        if size + len(framed) > BUNDLE and pending:
            builder.write_packet(pb.TracePacket(compressed_packets=zlib.compress(b"".join(pending))))
            pending, size = [], 0
        pending.append(framed)
        size += len(framed)
    if pending:
        builder.write_packet(pb.TracePacket(compressed_packets=zlib.compress(b"".join(pending))))


class _Strings:
    """The interned strings of one trace (event names, annotation names and string values, each
    numbered from 1), and each collector's own annotations, encoded once: everything an event
    refers to is interned in the first packet, before any event."""

    def __init__(self, records: np.ndarray, catalogue: Catalogue):
        entries = catalogue.entries
        self.kinds = sorted(set(zip(records["op"].tolist(), records["flags"].tolist())))
        names = [slice_name(op, flags) for op, flags in self.kinds] + [READ]
        self.names = {name: iid for iid, name in enumerate(dict.fromkeys(names), 1)}
        self.keys: dict[str, int] = {}
        self.values: dict[str, int] = {}
        # A collector's args are the same on each of its records: encoded once, copied after.
        self.collector: dict[int, bytes] = {}
        for cid in sorted(set(records["collector"].tolist())):
            entry = entries[cid - 1] if 1 <= cid <= len(entries) else None
            self.collector[cid] = b"".join(
                _field(4, self._annotation(key, value).SerializeToString())
                for key, value in collector_args(cid, entry).items())
        # A record's own args: their names depend on its op and flags only.
        self.record_keys = {kind: [self._key(k) for k in record_args(*kind, 0, 0)] for kind in self.kinds}

    def interned(self) -> pb.InternedData:
        out = pb.InternedData()
        for name, iid in self.names.items():
            out.event_names.add(iid=iid, name=name)
        for key, iid in self.keys.items():
            out.debug_annotation_names.add(iid=iid, name=key)
        for value, iid in self.values.items():
            out.debug_annotation_string_values.add(iid=iid, str=value.encode())
        return out

    def _key(self, name: str) -> int:
        return self.keys.setdefault(name, len(self.keys) + 1)

    def _annotation(self, key: str, value) -> pb.DebugAnnotation:
        out = pb.DebugAnnotation(name_iid=self._key(key))
        if isinstance(value, int):
            out.uint_value = value
        else:
            out.string_value_iid = self.values.setdefault(value, len(self.values) + 1)
        return out


def _header(strings: _Strings, lay: Layout, t0: int, recorded: WallClock | None,
            counters: dict[tuple[str, str], int]) -> list[pb.TracePacket]:
    """The packets before the events: interned strings and the incremental clock as the default
    (the sequence's incremental state), the clock snapshot, and the track descriptors (processes,
    thread tracks, and the `counters` tracks, by (node, name): uuid)."""
    first = pb.TracePacket(trusted_packet_sequence_id=SEQUENCE, sequence_flags=_CLEARED | _NEEDS_STATE)
    first.trace_packet_defaults.timestamp_clock_id = DELTA_CLOCK
    first.interned_data.CopyFrom(strings.interned())

    clocks = _on_monotonic(t0)
    clocks.clock_snapshot.primary_trace_clock = _MONOTONIC
    clocks.clock_snapshot.clocks.add(clock_id=_MONOTONIC, timestamp=t0)
    clocks.clock_snapshot.clocks.add(clock_id=DELTA_CLOCK, timestamp=t0, is_incremental=True)
    if recorded is not None:
        clocks.clock_snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_REALTIME, timestamp=recorded.realtime(t0))

    root = _on_monotonic(t0)   # the root track (uuid 0): processes and threads in the order given
    root.track_descriptor.uuid = 0
    root.track_descriptor.process_ordering = pb.TrackDescriptor.PROCESS_ORDERING_EXPLICIT
    root.track_descriptor.thread_ordering = pb.TrackDescriptor.THREAD_ORDERING_EXPLICIT
    packets = [first, clocks, root]
    pids = {node: pid for pid, node in enumerate(lay.nodes, 1)}
    for node, pid in pids.items():
        packet = _on_monotonic(t0)
        packet.track_descriptor.uuid = packet.track_descriptor.sibling_order_rank = pid
        packet.track_descriptor.process.pid = pid
        packet.track_descriptor.process.process_name = node
        packets.append(packet)
    for i, track in enumerate(lay.tracks):
        packet = _on_monotonic(t0)
        tid = _track_uuid(lay, i)
        packet.track_descriptor.uuid = tid
        packet.track_descriptor.sibling_order_rank = i
        packet.track_descriptor.thread.pid = pids[track.node]
        packet.track_descriptor.thread.tid = tid
        packet.track_descriptor.thread.thread_name = track.label
        packets.append(packet)
    for rank, ((node, name), uuid) in enumerate(counters.items()):
        packet = _on_monotonic(t0)
        packet.track_descriptor.uuid = uuid
        packet.track_descriptor.parent_uuid = pids[node]
        packet.track_descriptor.name = name
        packet.track_descriptor.sibling_order_rank = len(lay.tracks) + rank
        packet.track_descriptor.counter.SetInParent()
        packets.append(packet)
    return packets


def _on_monotonic(t: int) -> pb.TracePacket:
    # Timestamped on the monotonic clock itself, not as a step of the incremental one.
    return pb.TracePacket(trusted_packet_sequence_id=SEQUENCE, timestamp=t, timestamp_clock_id=_MONOTONIC)


def _track_uuid(lay: Layout, track: int) -> int:
    """A track's uuid, also its tid: above every node's pid, as the JSON trace's tids are."""
    return len(lay.nodes) + 1 + track


def _events(records, starts, ends, lay: Layout, arrows: FlowIds, strings: _Strings, t0: int, counters,
            progress=None) -> Iterator[bytes]:
    """Every record's events, in timestamp order, as serialized TrackEvent packets: a BEGIN and an
    END per record (an INSTANT if it took no time), a `read` INSTANT where each observe that
    ends a flow returned, and a COUNTER value per system record (`counters`: times, track
    uuids, values)."""
    n = len(records)
    # Each record's place in the order its track opens slices: by start, longest first, then position.
    index = np.arange(n)
    opened = np.empty(n, dtype=np.int64)
    opened[np.lexsort((index, -ends, starts, lay.of))] = index
    instant = ends == starts
    slices = np.flatnonzero(~instant)
    reads = arrows.readers
    counter_at, counter_uuid, counter_values = counters
    # The event arrays are as narrow as they may be: a trace may hold tens of millions of events.
    positions = np.int32 if max(n, len(counter_at)) < 2**31 else np.int64
    record = np.concatenate([index, slices, reads, np.arange(len(counter_at))]).astype(positions)
    kind = np.concatenate([np.where(instant, _INSTANT, _BEGIN), np.full(len(slices), _END),
                           np.full(len(reads), _READ), np.full(len(counter_at), _COUNTER)]).astype(np.int8)
    at = np.concatenate([starts, ends[slices], ends[reads], counter_at])
    events = len(record) - len(counter_at)
    # At one time on one track, slices open outermost first (ENDs at one time close alike).
    uuid = np.concatenate([_track_uuid(lay, 0) + lay.of[record[:events]], counter_uuid])
    order = np.lexsort((np.concatenate([opened[record[:events]], np.zeros(len(counter_at), np.int64)]),
                        uuid, kind, at))
    steps = np.diff(at[order], prepend=t0)

    collector, record_keys = strings.collector, strings.record_keys
    names = {op_flags: _varint(strings.names[slice_name(*op_flags)]) for op_flags in strings.kinds}
    read = _varint(strings.names[READ])
    tracks = {t: b"\x58" + _varint(t) for t in set(uuid[:events].tolist())}
    # An END packet is its timestamp and a part that is the same for every END on its track.
    end_of = {t: _ON_SEQUENCE + _field(11, _END_EVENT + _varint(t)) + _NEEDS_STATE_FLAG for t in tracks}
    counter_values = counter_values.tolist()
    # A record's own annotations by its kind: the key parts of index (or arg) and nbytes, and error.
    keys = {op_flags: (_KEY[iids[0]], _KEY[iids[1]], _true(iids[2]) if len(iids) > 2 else b"")
            for op_flags, iids in record_keys.items()}
    varint, small, long = _varint, _SMALL, _SMALLEST_LONG
    for i, k, track, step, (op, flags, cid, arg, nbytes), flowing in _in_chunks(
            records, record, kind, uuid, steps, order, arrows, progress):
        if k == _COUNTER:
            yield pb.TracePacket(timestamp=step, trusted_packet_sequence_id=SEQUENCE, sequence_flags=_NEEDS_STATE,
                                 track_event=pb.TrackEvent(type=pb.TrackEvent.TYPE_COUNTER, track_uuid=track,
                                                           double_counter_value=counter_values[i])
                                 ).SerializeToString()
            continue
        step = small[step] if step < long else varint(step)
        if k == _END:
            yield b"\x40" + step + end_of[track]
        else:
            if k == _READ:
                event = _INSTANT_EVENT + read + tracks[track] + _flow_ids(_TERMINATING_FLOW, arrows.ending(i))
            else:
                arg_key, nbytes_key, error = keys[op, flags]
                arg = small[arg] if arg < long else varint(arg)
                nbytes = small[nbytes] if nbytes < long else varint(nbytes)
                event = b"".join((
                    collector[cid], b"\x22", small[3 + len(arg)], arg_key, arg,
                    b"\x22", small[3 + len(nbytes)], nbytes_key, nbytes, error,
                    _BEGIN_EVENT if k == _BEGIN else _INSTANT_EVENT, names[op, flags], tracks[track],
                    _flow_ids(_FLOW, arrows.starting(i)) if flowing else b""))
            yield b"\x40" + step + _ON_SEQUENCE + b"\x5a" + varint(len(event)) + event + _NEEDS_STATE_FLAG


def _in_chunks(records, record, kind, uuid, steps, order, arrows: FlowIds, progress, size: int = 1 << 16):
    """(i, kind, track, step, (op, flags, collector, arg, nbytes) of record i, whether it starts a
    flow) of each event in `order`, made a chunk at a time from the numpy columns, so that the
    Python values of only one chunk exist at once; `progress(n, total)` (if given) is told of each
    chunk's n events, of `total`."""
    fields = [records[f] for f in ("op", "flags", "collector", "arg", "nbytes")]
    for lo in range(0, len(order), size):
        chunk = order[lo:lo + size]
        which, kinds = record[chunk], kind[chunk]
        if len(records):
            of_record = np.where(kinds < _COUNTER, which, 0)
            values = zip(*(f[of_record].tolist() for f in fields))
            flowing = (arrows.starts(of_record) & (kinds < _READ)).tolist()
        else:   # counters alone
            values, flowing = itertools.repeat((0,) * 5), itertools.repeat(False)
        yield from zip(which.tolist(), kinds.tolist(), uuid[chunk].tolist(), steps[lo:lo + size].tolist(), values,
                       flowing)
        if progress is not None:
            progress(len(chunk), len(order))


# The protobuf wire format of the TrackEvent packets, written by hand: they are nearly all of a
# trace, and encoding each through the protos' message objects takes several times as long
# (tests/monitors/test_pftrace.py checks every packet against the protos' own encoding). Fields
# come in field-number order, as the protos write them. TracePacket: timestamp = 8,
# trusted_packet_sequence_id = 10, track_event = 11, sequence_flags = 13. TrackEvent:
# debug_annotations = 4, type = 9, name_iid = 10, track_uuid = 11, flow_ids = 47 (fixed64),
# terminating_flow_ids = 48 (fixed64). DebugAnnotation: name_iid = 1, bool_value = 2, uint_value = 3.
_ON_SEQUENCE = b"\x50" + bytes([SEQUENCE])
_NEEDS_STATE_FLAG = b"\x68" + bytes([_NEEDS_STATE])
_BEGIN_EVENT = b"\x48" + bytes([pb.TrackEvent.TYPE_SLICE_BEGIN]) + b"\x50"      # + name_iid
_INSTANT_EVENT = b"\x48" + bytes([pb.TrackEvent.TYPE_INSTANT]) + b"\x50"        # + name_iid
_END_EVENT = b"\x48" + bytes([pb.TrackEvent.TYPE_SLICE_END]) + b"\x58"          # + track_uuid
_FLOW, _TERMINATING_FLOW = b"\xf9\x02", b"\x81\x03"                             # tags of fields 47, 48
_SMALLEST_LONG = 1 << 14   # varints of smaller values (one or two bytes) are looked up, not built
_SMALL = [bytes([v]) if v < 0x80 else bytes([v & 0x7F | 0x80, v >> 7]) for v in range(_SMALLEST_LONG)]


def _varint(value: int) -> bytes:
    if value < _SMALLEST_LONG:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


# A uint annotation with key iid k (< 128) is b"\x22", its length, _KEY[k], and the value's varint.
_KEY = [b"\x08" + bytes([k]) + b"\x18" for k in range(0x80)]


def _true(key: int) -> bytes:
    """A bool annotation with key iid `key`, true."""
    return _field(4, b"\x08" + _varint(key) + b"\x10\x01")


def _flow_ids(tag: bytes, ids) -> bytes:
    return b"".join(tag + struct.pack("<Q", fid) for fid in ids)
