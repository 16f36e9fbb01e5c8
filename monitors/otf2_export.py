"""OTF2 export through the optional `otf2` package: a location per track, a region per operation."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import numpy as np

from eventspace import system, trace
from eventspace.catalogue import Catalogue
from eventspace.clock import WallClock

from .tracks import layout

INSTALL_HINT = "pip install eventspace[otf2]"
ANCHOR = "traces.otf2"   # the file OTF2 readers open, inside the export directory


class Otf2Unavailable(RuntimeError):
    """The `otf2` package is not installed."""


def available() -> bool:
    """Whether the `otf2` package can be imported."""
    try:
        import otf2  # noqa: F401
    except ImportError:
        return False
    return True


def write_otf2(directory: str | os.PathLike, records: np.ndarray, catalogue: Catalogue, *,
               title: str | None = None, recorded: WallClock | None = None, progress=None) -> Path:
    """Write `records` (trace.DTYPE) as an OTF2 archive in `directory`; return its anchor file.

    The system tree is `title` (default: the pathmap's name) > node, with one location group
    (process) per node. The locations are the tracks of monitors.tracks (a thread, or an element
    or tree on a node, plus overflow lanes where events would not nest), laid out by the
    records' own nanoseconds. Each record is an Enter/Leave pair of the region named by its op
    (collectives get OTF2's collective region roles), with attributes collector, role, element,
    tree, arg (the tuple index for move and observe), nbytes and error; timestamps are the
    records' nanoseconds (timer resolution 1e9) and never decrease on a location.

    The clock properties date the recording, not the export: the global offset is the earliest
    timestamp, and its wall-clock time (`realtime_timestamp`, ns since the epoch) comes from
    `recorded`, the monitor's clock read against the wall clock while the events were recorded
    (GetEventMon and the archive keep one). Without it the wall-clock time is OTF2's UNDEFINED.

    Otf2Unavailable if `otf2` is not installed; FileExistsError if `directory` already holds an
    OTF2 archive (nothing is overwritten). System summary records (trace.SYSTEM) are not written.
    `progress`, if given, is called with each location's number of records once they are
    written, and the number of records in all.
    """
    try:
        import otf2
    except ImportError:
        raise Otf2Unavailable(f"OTF2 export needs the otf2 package: {INSTALL_HINT}") from None
    directory = Path(directory)
    if (directory / ANCHOR).exists() or (directory / "traces").exists():
        raise FileExistsError(f"{directory} already holds an OTF2 archive; give a new directory")
    # System summary records are metrics, not regions: they are left out (the Perfetto traces show them).
    _, records = system.split(np.asarray(records, dtype=trace.DTYPE))
    title = catalogue.pathmap.name if title is None else title
    starts = records["t_start"].tolist()
    ends = [max(e, s) for s, e in zip(starts, records["t_end"].tolist())]
    lay = layout(records, catalogue, starts, ends)
    entries = catalogue.entries
    roles = _region_roles(otf2)

    with otf2.writer.open(str(directory), timer_resolution=1_000_000_000) as archive:
        defs = archive.definitions
        root = defs.system_tree_node(str(title), class_name="machine")
        groups = {}
        for node in lay.nodes:
            tree_node = defs.system_tree_node(node, class_name="node", parent=root)
            groups[node] = defs.location_group(node, system_tree_parent=tree_node)
        locations = [defs.location(track.label, group=groups[track.node]) for track in lay.tracks]
        attr = {
            "collector": defs.attribute("collector", "event collector id", otf2.Type.UINT32),
            "role": defs.attribute("role", "where the collector sits", otf2.Type.STRING),
            "element": defs.attribute("element", "tuple element", otf2.Type.STRING),
            "tree": defs.attribute("tree", "collective tree", otf2.Type.STRING),
            "arg": defs.attribute("arg", "tuple index (move, observe) or count", otf2.Type.UINT32),
            "nbytes": defs.attribute("nbytes", "payload bytes", otf2.Type.UINT32),
            "error": defs.attribute("error", "1 if the operation raised", otf2.Type.UINT8),
        }
        regions: dict[int, object] = {}

        def region(op: int):
            if op not in regions:
                name = trace.OP_NAMES.get(op, f"op {op}")
                regions[op] = defs.region(name, paradigm=otf2.Paradigm.USER,
                                          region_role=roles.get(name, otf2.RegionRole.FUNCTION))
            return regions[op]

        by_location: list[list[int]] = [[] for _ in lay.tracks]
        for i, t in enumerate(lay.of.tolist()):
            by_location[t].append(i)
        for t, members in enumerate(by_location):
            writer = archive.event_writer_from_location(locations[t])
            open_: list[tuple[int, object]] = []   # (end, region) of entered, not yet left
            for i in sorted(members, key=lambda i: (starts[i], -ends[i], i)):
                while open_ and open_[-1][0] <= starts[i]:
                    end, reg = open_.pop()
                    writer.leave(end, reg)
                r = records[i]
                reg = region(int(r["op"]))
                writer.enter(starts[i], reg, _attributes(attr, r, entries))
                open_.append((ends[i], reg))
            while open_:
                end, reg = open_.pop()
                writer.leave(end, reg)
            if progress is not None:
                progress(len(members), len(records))
        _date(archive, records, recorded, otf2)
    return directory / ANCHOR


def _date(archive, records: np.ndarray, recorded: WallClock | None, otf2) -> None:
    """Make the archive's clock properties carry the recording's wall-clock time.

    The otf2 writer stamps the wall clock of the moment the first event is written (the export)
    as the time of the global offset, through `_realtime_timestamp` (seconds, multiplied by 1e9
    when the definitions are written at close). Overwriting it is the only way the package
    offers; a Fraction keeps the nanoseconds exact.
    """
    if not len(records):
        return   # no events: the writer records no offset and an undefined wall-clock time
    if recorded is None:
        realtime = otf2.Undefined.TIMESTAMP.value
    else:
        realtime = recorded.realtime(int(records["t_start"].min()))
    archive._realtime_timestamp = Fraction(realtime, 1_000_000_000)


def _attributes(attr: dict, r, entries) -> dict:
    cid = int(r["collector"])
    out = {attr["collector"]: cid, attr["arg"]: int(r["arg"]), attr["nbytes"]: int(r["nbytes"]),
           attr["error"]: 1 if int(r["flags"]) & trace.ERROR else 0}
    if 1 <= cid <= len(entries):
        entry = entries[cid - 1]
        out[attr["role"]] = entry.role
        if entry.element:
            out[attr["element"]] = entry.element
        if entry.tree:
            out[attr["tree"]] = entry.tree
    return out


def _region_roles(otf2) -> dict[str, object]:
    role = otf2.RegionRole
    return {"reduce": role.COLL_ALL2ONE, "gather": role.COLL_ALL2ONE, "allreduce": role.COLL_ALL2ALL,
            "broadcast": role.COLL_ONE2ALL, "barrier": role.BARRIER}
