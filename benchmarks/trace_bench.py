"""Trace size and write time: Perfetto's native .pftrace against the JSON trace, from the same records.

Run: `python benchmarks/trace_bench.py [--archive A.sqlite | --duration 30] [--rounds 2]`.

The records are the demo's (`eventspace demo`, as `make demo` runs it: the wind tunnel on
pathmaps/windtunnel-4node.yaml under three monitors): by default the demo runs here for
`--duration` seconds with getevent writing an archive, which keeps every event streamed; or
`--archive` names one written before (`eventspace demo --trace demo.sqlite`). Both writers then
write the same records, in alternating order (J P P J ...), and the table gives the median
write time of each (wall clock) and the pftrace's over the JSON's, round by round; the CPU
time of each is printed too (it suffers less from other work on the machine). Sizes are the
files' sizes.

A second table times the encoding of the pftrace's TrackEvent packets (its bulk): the writer's
own wire-format encoding against building and serializing the same packets through the protos'
message objects (checked to give the same bytes), per packet.

Targets: the pftrace is at most 1/5 of the JSON's size, and not slower to write.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from timing import Figure, report

from monitors.archive import Archive
from monitors.perfetto import write_perfetto
from monitors.pftrace import _events, _Strings, write_pftrace
from monitors.slices import tuple_flows
from monitors.tracks import layout

SAMPLE = 100_000   # records whose packets the encoding comparison builds both ways


def demo_archive(directory: Path, duration: float) -> Path:
    """Run the demo with getevent writing an archive in `directory`; the archive's path."""
    from rich.console import Console

    from monitors.demo import run_demo

    out = directory / "demo.sqlite"
    with open(os.devnull, "w") as quiet:
        run_demo(duration, out, console=Console(file=quiet))
    return out


def write_times(records, catalogue, recorded, directory: Path, rounds: int) -> tuple[list[Figure], dict]:
    json_out, pf_out = directory / "trace.json", directory / "trace.pftrace"
    figures = {"json write": Figure("json write"), "pftrace write": Figure("pftrace write", peer="json write")}
    writers = {"json write": lambda: write_perfetto(json_out, records, catalogue),
               "pftrace write": lambda: write_pftrace(pf_out, records, catalogue, recorded=recorded)}
    cpu: dict[str, list[float]] = {name: [] for name in figures}
    for r in range(rounds):
        for name in (("json write", "pftrace write") if r % 2 == 0 else ("pftrace write", "json write")):
            started, started_cpu = time.perf_counter(), time.process_time()
            writers[name]()
            figures[name].rounds.append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - started_cpu)
    sizes = {"records": len(records), "json_bytes": json_out.stat().st_size, "pftrace_bytes": pf_out.stat().st_size}
    sizes["ratio"] = sizes["pftrace_bytes"] / sizes["json_bytes"]
    sizes["cpu_seconds"] = {name: statistics.median(times) for name, times in cpu.items()}
    return list(figures.values()), sizes


def encoding_times(records, catalogue) -> list[Figure]:
    """Per packet: the writer's encoding of the first SAMPLE records' TrackEvent packets (with its
    sorting of the events, so it is the upper bound), and the same packets through message objects
    (decoded from the writer's bytes, rebuilt field by field)."""
    records = records[:SAMPLE]
    starts = records["t_start"].astype(np.int64)
    ends = np.maximum(records["t_end"].astype(np.int64), starts)
    lay = layout(records, catalogue, starts, ends)
    pairs = tuple_flows(records, catalogue)
    strings = _Strings(records, catalogue)

    def hand():
        return list(_events(records, starts, ends, lay, pairs, strings, int(starts.min())))

    encoded = hand()
    decoded = [pb.TracePacket.FromString(p) for p in encoded]
    fields = [(p.timestamp, p.track_event) for p in decoded]

    def objects():
        out = []
        for timestamp, e in fields:
            packet = pb.TracePacket(timestamp=timestamp, trusted_packet_sequence_id=1, sequence_flags=2)
            event = packet.track_event
            for a in e.debug_annotations:
                kind = a.WhichOneof("value")
                event.debug_annotations.add(name_iid=a.name_iid, **{kind: getattr(a, kind)})
            event.type = e.type
            if e.HasField("name_iid"):
                event.name_iid = e.name_iid
            event.track_uuid = e.track_uuid
            event.flow_ids.extend(e.flow_ids)
            event.terminating_flow_ids.extend(e.terminating_flow_ids)
            out.append(packet.SerializeToString())
        return out

    assert objects() == encoded, "the two encodings differ"
    figures = {"packet, hand-encoded": Figure("packet, hand-encoded"),
               "packet, message objects": Figure("packet, message objects", peer="packet, hand-encoded")}
    for _ in range(3):
        for name, fn in (("packet, hand-encoded", hand), ("packet, message objects", objects)):
            started = time.perf_counter()
            fn()
            figures[name].rounds.append((time.perf_counter() - started) / len(encoded))
    return list(figures.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", type=Path, help="records from this archive instead of a demo run")
    parser.add_argument("--duration", type=float, default=30.0, help="the demo's seconds (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="writes of each format (default %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        source = args.archive or demo_archive(directory, args.duration)
        with Archive.open(source) as archive:
            records, catalogue, recorded = archive.records(), archive.catalogue, archive.info.clock
        figures, sizes = write_times(records, catalogue, recorded, directory, args.rounds)
    print(f"{sizes['records']:,} records: JSON {sizes['json_bytes']:,} bytes, pftrace {sizes['pftrace_bytes']:,} "
          f"bytes ({sizes['ratio']:.3f} of the JSON's, {1 / sizes['ratio']:.1f}x smaller)")
    print("CPU seconds per write (median): " + ", ".join(f"{name} {s:.1f}" for name, s in sizes["cpu_seconds"].items()))
    report("trace write time, same records", figures,
           {"pftrace write": ("not slower than json", lambda f, ratio: ratio is not None and ratio <= 1.0)},
           "trace_bench.json", unit="s",
           extra={"sizes": sizes, "size_target": "pftrace <= 1/5 of json", "size_met": sizes["ratio"] <= 0.2,
                  "source": str(args.archive or f"demo, {args.duration:g} s")})
    report("TrackEvent packet encoding", encoding_times(records, catalogue), {}, "trace_encoding_bench.json")


if __name__ == "__main__":
    main()
