"""Reading a .pftrace back with the official protos, as a trace processor reads it (for the tests)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from monitors.pftrace import DELTA_CLOCK, SEQUENCE

MAX_BUNDLE = 512 * 1024   # the format's bound on one compressed_packets packet


@dataclass
class Slice:
    """A slice on track `track` (its uuid) from `ts` to `end` (ns), with its debug annotations."""

    track: int
    name: str
    ts: int
    end: int
    args: dict
    instant: bool = False


@dataclass
class Decoded:
    """A .pftrace read the way a trace processor reads it: packets in file order, interned
    strings and incremental timestamps resolved, slices rebuilt from BEGIN/END by a stack per track."""

    processes: dict          # uuid -> (pid, name)
    threads: dict            # uuid -> (pid, tid, name, rank)
    slices: list             # Slice, in the order they close (instants when they happen)
    flow_starts: dict        # flow id -> Slice
    flow_ends: dict          # flow id -> Slice
    times: list              # every event's time, in file order
    clocks: pb.ClockSnapshot
    bundles: int


def packets(path):
    """The packets inside the file's compressed bundles, checking that each bundle is under the
    format's bound and that each packet is encoded exactly as the protos encode it."""
    outer = pb.Trace.FromString(path.read_bytes())
    out = []
    for bundle in outer.packet:
        assert bundle.HasField("compressed_packets") and bundle.ByteSize() + 8 < MAX_BUNDLE
        raw = zlib.decompress(bundle.compressed_packets)
        inner = pb.Trace.FromString(raw)
        assert inner.SerializeToString() == raw, "a packet is not encoded as the protos encode it"
        out.extend(inner.packet)
    return out, len(outer.packet)


def decode(path) -> Decoded:
    read, bundles = packets(path)
    first = read[0]
    assert first.trusted_packet_sequence_id == SEQUENCE
    assert first.sequence_flags == (pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
                                    | pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)
    assert first.trace_packet_defaults.timestamp_clock_id == DELTA_CLOCK
    names = {e.iid: e.name for e in first.interned_data.event_names}
    keys = {e.iid: e.name for e in first.interned_data.debug_annotation_names}
    values = {e.iid: e.str.decode() for e in first.interned_data.debug_annotation_string_values}

    processes, threads, slices, starts, ends, times = {}, {}, [], {}, {}, []
    clocks, now = None, None
    stacks: dict[int, list[Slice]] = {}
    for packet in read[1:]:
        assert packet.trusted_packet_sequence_id == SEQUENCE
        if packet.HasField("clock_snapshot"):
            clocks = packet.clock_snapshot
            now = next(c.timestamp for c in clocks.clocks if c.clock_id == DELTA_CLOCK)
            continue
        if packet.HasField("track_descriptor"):
            d = packet.track_descriptor
            assert packet.timestamp_clock_id == pb.BUILTIN_CLOCK_MONOTONIC
            if d.HasField("process"):
                processes[d.uuid] = (d.process.pid, d.process.process_name)
            elif d.HasField("thread"):
                threads[d.uuid] = (d.thread.pid, d.thread.tid, d.thread.thread_name, d.sibling_order_rank)
            continue
        assert packet.HasField("track_event") and now is not None, "an event before the clock snapshot"
        assert packet.sequence_flags == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        assert not packet.HasField("timestamp_clock_id")   # the default: the incremental clock
        now += packet.timestamp
        times.append(now)
        event = packet.track_event
        stack = stacks.setdefault(event.track_uuid, [])
        if event.type == pb.TrackEvent.TYPE_SLICE_END:
            assert stack, f"an END with no open slice on track {event.track_uuid}"
            done = stack.pop()
            done.end = now
            slices.append(done)
            continue
        args = {}
        for a in event.debug_annotations:
            kind = a.WhichOneof("value")
            args[keys[a.name_iid]] = values[a.string_value_iid] if kind == "string_value_iid" else getattr(a, kind)
        s = Slice(event.track_uuid, names[event.name_iid], now, now, args, instant=event.type == pb.TrackEvent.TYPE_INSTANT)
        for fid in event.flow_ids:
            assert fid not in starts, f"flow {fid} starts twice"
            starts[fid] = s
        for fid in event.terminating_flow_ids:
            assert fid not in ends, f"flow {fid} ends twice"
            ends[fid] = s
        if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stack.append(s)
        else:
            assert event.type == pb.TrackEvent.TYPE_INSTANT
            slices.append(s)
    assert all(not stack for stack in stacks.values()), "slices left open"
    return Decoded(processes, threads, slices, starts, ends, times, clocks, bundles)
