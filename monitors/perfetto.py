"""Perfetto / Chrome trace-event JSON: a process per node, a track per thread, flow arrows from moves to observes."""

from __future__ import annotations

import bisect
import itertools
import json
import os
from pathlib import Path

import numpy as np

from eventspace import system, trace
from eventspace.catalogue import Catalogue
from paths.atomicfile import replacing

from .slices import READ, collector_args, flows, record_args, slice_name
from .tracks import UNKNOWN_NODE, Layout, layout, with_nodes

CATEGORY = "eventspace"   # every slice and flow: a flow binds to a slice of its own category
# Records a JSON trace is made of at most by `eventspace archive export`: the whole document is built
# in memory (about 1.6 KB a record), and Perfetto's UI does not open a JSON trace much larger;
# OUT.pftrace, Perfetto's own format, is streamed and takes any number.
MAX_JSON_RECORDS = 1_000_000
FLOW_NAME = "tuple"


class InvalidTrace(ValueError):
    """A trace dict that breaks the trace-event format's rules (a bug: the exporter never writes one)."""


def to_perfetto(records: np.ndarray, catalogue: Catalogue, *, title: str | None = None, progress=None) -> dict:
    """The trace-event JSON object (`{"traceEvents": [...], ...}`) for `records` (trace.DTYPE).

    Layout (see monitors.tracks): one process per node (pid 1, 2, ... in catalogue order), one
    thread track per application thread and one per element or tree for events no thread owns,
    each named by `M` metadata; tids are unique over the whole trace and above every pid.
    Slices that would not nest on their track go to an overflow lane of the same track.

    A record is an `X` slice named by its op (`move [error]` for an ERROR record), with args
    collector, role, element or tree, path, index (move, observe) or arg, nbytes. Timestamps
    are microseconds from the earliest t_start (`otherData.t0_ns`), each in the middle of its
    nanosecond, so that ts * 1000 truncated is the record's nanosecond. Each `move` gets a flow
    arrow to every observe that read its tuple, and each MPI send one to the receive that got
    its message (`slices.flows`; flow ids count from 1): `s` at the move's (send's) start, and
    `f` (`bp: "e"`) on a `read` instant where the observe (receive) returned, so that no arrow
    points back to an observe that began blocking before the move. `title`
    (default: the pathmap's name) goes in `otherData.title`.

    A system summary record (trace.SYSTEM) is not a slice but a value of a counter of its
    node's process (`C` at its interval's start, `args: {"value": v}`), named and scaled by
    eventspace.system (`cpu user (cores)`, `T3 cpu system (cores)`, `rss (bytes)`, `messages
    in /s`, ...); a node with only counters gets a process of its own after the others.

    `progress`, if given, is called with each track's number of records as its events are made,
    and the number of records in all.
    """
    records = np.asarray(records, dtype=trace.DTYPE)
    title = catalogue.pathmap.name if title is None else title
    t0 = int(records["t_start"].min()) if len(records) else 0
    samples, records = system.split(records)
    counters, values = system.series(samples, catalogue)
    # Each time sits in the middle of its nanosecond, so that a reader truncating ts * 1000 (see
    # _ns) gets the record's own nanoseconds back rather than one less.
    ts = [(int(s) - t0 + 0.5) / 1000.0 for s in records["t_start"].tolist()]
    dur = [(max(int(e) - int(s), 0) + 0.5) / 1000.0
           for s, e in zip(records["t_start"].tolist(), records["t_end"].tolist())]
    # Nest by the nanoseconds a reader will see.
    starts = [_ns(t) for t in ts]
    ends = [s + _ns(d) for s, d in zip(starts, dur)]
    lay = with_nodes(layout(records, catalogue, starts, ends), (node or UNKNOWN_NODE for node, _ in counters))
    pid_of = {node: i for i, node in enumerate(lay.nodes, 1)}
    tid_of = [len(lay.nodes) + 1 + i for i in range(len(lay.tracks))]

    events: list[dict] = _metadata(lay, pid_of, tid_of)
    arrows = flows(records, catalogue)

    entries = catalogue.entries
    rows = records.tolist()   # tuples in trace.FIELDS order: plain ints are much faster to read
    by_track: list[list[int]] = [[] for _ in lay.tracks]
    for i, t in enumerate(lay.of.tolist()):
        by_track[t].append(i)
    for t, members in enumerate(by_track):
        pid, tid = pid_of[lay.tracks[t].node], tid_of[t]
        # Parents before children at one start, and each slice's flow events right after it, so
        # that a reader binding a flow to the innermost open slice binds it to this one (and an
        # `f` to the `read` instant just before it).
        for i in sorted(members, key=lambda i: (starts[i], -ends[i], i)):
            op, flags, cid, _, arg, nbytes, _, _ = rows[i]
            entry = entries[cid - 1] if 1 <= cid <= len(entries) else None
            events.append(_slice(op, flags, cid, arg, nbytes, entry, ts[i], dur[i], pid, tid))
            for fid in arrows.starting(i):
                events.append({"ph": "s", "name": FLOW_NAME, "cat": CATEGORY, "id": fid,
                               "ts": ts[i], "pid": pid, "tid": tid})
            ending = arrows.ending(i)
            if ending:
                # At the slice's end as a reader sees it (start + duration, in whole nanoseconds).
                read = (starts[i] + _ns(dur[i]) + 0.5) / 1000.0
                events.append({"ph": "i", "s": "t", "name": READ, "cat": CATEGORY, "ts": read,
                               "pid": pid, "tid": tid})
                for fid in ending:
                    events.append({"ph": "f", "bp": "e", "name": FLOW_NAME, "cat": CATEGORY, "id": fid,
                                   "ts": read, "pid": pid, "tid": tid})
        if progress is not None:
            progress(len(members), len(records))
    for (node, name), value, t in zip(counters, values.tolist(), samples["t_start"].tolist()):
        events.append({"ph": "C", "name": name, "cat": CATEGORY, "ts": (t - t0 + 0.5) / 1000.0,
                       "pid": pid_of[node or UNKNOWN_NODE], "args": {"value": value}})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"title": str(title), "t0_ns": str(t0), "events": str(len(records))},
    }


def write_perfetto(path: str | os.PathLike, records: np.ndarray, catalogue: Catalogue, *,
                   title: str | None = None, progress=None) -> dict:
    """Write `to_perfetto(...)` to `path` (for ui.perfetto.dev or chrome://tracing) and return it.

    The file is checked with `validate` first (InvalidTrace if it breaks a rule, a bug) and
    written whole or not at all (a temporary file renamed into place); FileNotFoundError if its
    directory does not exist, OSError if it cannot be written.
    """
    doc = to_perfetto(records, catalogue, title=title, progress=progress)
    problems = validate(doc)
    if problems:
        raise InvalidTrace(f"refusing to write an invalid trace to {path}: " + "; ".join(problems[:5]))
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path.parent}: no such directory; create it or write the trace elsewhere")
    with replacing(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    return doc


def validate(doc) -> list[str]:
    """What in a trace-event document (the JSON Object form, or a bare event list) breaks the
    format's rules; empty if nothing does. Checks: every event has `ph`; `X` slices have name,
    numeric ts and dur >= 0, integer pid and tid; `C` counters a name, an integer pid, numeric
    ts and numeric args; `M` metadata names a process or thread with
    `args.name`; flow events (`s`, `t`, `f`) have an id, and each flow (cat, name, id) has
    exactly one start and at least one end, each inside a slice of its track (an `f` without
    `bp: "e"` needs a slice starting at or after it); on each (pid, tid), slices nest or do not
    overlap, compared in the nanoseconds Perfetto reads (ts * 1000, truncated).
    """
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return ["no event list: expected {\"traceEvents\": [...]} or a JSON array of events"]
    problems: list[str] = []
    slices: dict[tuple, list[tuple[int, int, int]]] = {}
    flows: dict[tuple, dict[str, list[tuple[int, tuple, int]]]] = {}
    for n, ev in enumerate(events):
        where = f"event {n}"
        if not isinstance(ev, dict) or not isinstance(ev.get("ph"), str):
            problems.append(f"{where}: not an object with a string `ph`")
            continue
        ph = ev["ph"]
        if ph == "M":
            problems.extend(_check_metadata(ev, where))
            continue
        if ph == "C":
            problems.extend(_check_counter(ev, where))
            continue
        if not _is_int(ev.get("pid")) or not _is_int(ev.get("tid")):
            problems.append(f"{where} ({ph}): pid and tid must be integers")
            continue
        if not _is_number(ev.get("ts")) or ev["ts"] < 0:
            problems.append(f"{where} ({ph}): ts must be a number >= 0, got {ev.get('ts')!r}")
            continue
        track = (ev["pid"], ev["tid"])
        if ph == "X":
            if not isinstance(ev.get("name"), str):
                problems.append(f"{where} (X): no name")
            if not _is_number(ev.get("dur")) or ev["dur"] < 0:
                problems.append(f"{where} (X): dur must be a number >= 0, got {ev.get('dur')!r}")
                continue
            start = _ns(ev["ts"])
            slices.setdefault(track, []).append((start, start + _ns(ev["dur"]), n))
        elif ph in ("s", "t", "f"):
            if ev.get("id") is None:
                problems.append(f"{where} ({ph}): a flow event needs an id")
                continue
            key = (ev.get("cat"), ev.get("name"), str(ev["id"]))
            mode = "e" if ph != "f" or ev.get("bp") == "e" else "next"
            flows.setdefault(key, {"s": [], "t": [], "f": []})[ph].append((_ns(ev["ts"]), track, n, mode))
        elif ph not in ("B", "E", "i", "I", "C", "b", "e", "n", "R"):
            problems.append(f"{where}: unknown phase {ph!r}")

    for track, spans in slices.items():
        stack: list[tuple[int, int, int]] = []
        for start, end, n in sorted(spans, key=lambda s: (s[0], -s[1], s[2])):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and stack[-1][1] < end:
                problems.append(f"event {n}: slice [{start}, {end}] ns on pid/tid {track} overlaps "
                                f"event {stack[-1][2]} [{stack[-1][0]}, {stack[-1][1]}] without nesting")
                continue
            stack.append((start, end, n))

    # Per track: slice starts in order, and the latest end among the slices up to each one.
    reach: dict[tuple, tuple[list[int], list[int]]] = {}
    for track, spans in slices.items():
        ordered = sorted(spans)
        reach[track] = ([s for s, _, _ in ordered], list(itertools.accumulate((e for _, e, _ in ordered), max)))
    for key, phases in flows.items():
        if len(phases["s"]) != 1:
            problems.append(f"flow {key[2]} ({key[0]}/{key[1]}): {len(phases['s'])} starts, need exactly 1")
        if not phases["f"]:
            problems.append(f"flow {key[2]} ({key[0]}/{key[1]}): no end (`f`)")
        for ph in ("s", "t", "f"):
            for at, track, n, mode in phases[ph]:
                starts, latest_end = reach.get(track, ([], []))
                if mode == "e":   # inside a slice: one starting at or before it ends at or after it
                    k = bisect.bisect_right(starts, at)
                    bound = k > 0 and latest_end[k - 1] >= at
                else:             # the next slice: one starts at or after it
                    bound = bool(starts) and starts[-1] >= at
                if not bound:
                    problems.append(f"event {n} ({ph}, flow {key[2]}): binds to no slice on pid/tid {track}")
    return problems


def _slice(op: int, flags: int, cid: int, arg: int, nbytes: int, entry, ts: float, dur: float,
           pid: int, tid: int) -> dict:
    args = collector_args(cid, entry) | record_args(op, flags, arg, nbytes)
    event = {"ph": "X", "name": slice_name(op, flags), "cat": CATEGORY, "ts": ts, "dur": dur, "pid": pid,
             "tid": tid, "args": args}
    if flags & trace.ERROR:
        event["cname"] = "terrible"   # trace viewer's reserved red
    return event


def _metadata(lay: Layout, pid_of: dict[str, int], tid_of: list[int]) -> list[dict]:
    events = []
    for node, pid in pid_of.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": node}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
    for i, track in enumerate(lay.tracks):
        pid, tid = pid_of[track.node], tid_of[i]
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": track.label}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": i}})
    return events


def _check_counter(ev: dict, where: str) -> list[str]:
    args = ev.get("args")
    if not isinstance(ev.get("name"), str) or not _is_int(ev.get("pid")):
        return [f"{where} (C): a counter needs a name and an integer pid"]
    if not _is_number(ev.get("ts")) or ev["ts"] < 0:
        return [f"{where} (C): ts must be a number >= 0, got {ev.get('ts')!r}"]
    if not isinstance(args, dict) or not args or not all(_is_number(v) for v in args.values()):
        return [f"{where} (C {ev['name']}): args must hold numbers"]
    return []


def _check_metadata(ev: dict, where: str) -> list[str]:
    name, args = ev.get("name"), ev.get("args")
    if not _is_int(ev.get("pid")):
        return [f"{where} (M): pid must be an integer"]
    if not isinstance(args, dict):
        return [f"{where} (M {name}): args must be an object"]
    if name in ("process_name", "thread_name", "process_labels"):
        if not isinstance(args.get("name" if name != "process_labels" else "labels"), str):
            return [f"{where} (M {name}): args.name must be a string"]
    elif name in ("process_sort_index", "thread_sort_index"):
        if not _is_int(args.get("sort_index")):
            return [f"{where} (M {name}): args.sort_index must be an integer"]
    else:
        return [f"{where} (M): unknown metadata {name!r}"]
    if name.startswith("thread_") and not _is_int(ev.get("tid")):
        return [f"{where} (M {name}): tid must be an integer"]
    return []


def _ns(microseconds: float) -> int:
    """Nanoseconds as Perfetto reads a JSON time in microseconds: times 1000, truncated. Slices
    are laid out by these values, so that what nests here nests in the viewer too."""
    return int(microseconds * 1000.0)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
