"""An MPI run's recording: each rank's recorder, the notes that let its files rebuild the run's catalogue, and its archive."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from pastset.terminal import counted

from .. import recording
from ..archive import ArchiveError
from ..catalogue import Catalogue
from ..clock import WallClock
from ..recorder import Recorder, RecordingFile, Spec, Window
from ..recording import ENDED_NORMALLY
from .generate import Communicator, node_name, run_pathmap



def recorder(spec: Spec, directory: str | None, rank: int, header: dict, say) -> Recorder:
    """Rank `rank`'s recorder: into its file in `directory` (--archive), or a window (--record
    last:...). OSError if its file cannot be made (one there already is never written over)."""
    sink = Window(spec.seconds, spec.nbytes) if spec.window else RecordingFile(
        recording.node_file(directory, node_name(rank)))
    return Recorder(sink, header, say=say)


def header(name: str, rank: int, hosts: list[str], clusters: dict[str, str], comms: list[Communicator],
           instrument: str, keep: int, offset_ns: int = 0) -> dict:
    """The first note of rank `rank`'s recording: what its records are of, and everything its
    run's pathmap is made from (`catalogue_of` makes it again from these notes alone)."""
    clock = WallClock.now()
    return {"recording": 1, "run": name, "node": node_name(rank), "clock": [clock.monotonic_ns + offset_ns,
                                                                           clock.realtime_ns],
            "mpi": {"rank": rank, "hosts": list(hosts), "clusters": dict(clusters), "instrument": instrument,
                    "keep": keep},
            "communicators": communicators(comms)}


def communicators(comms: list[Communicator]) -> list:
    """A note's form of the run's communicators (the note each rank adds when one is declared)."""
    return [[c.id, list(c.members), c.how] for c in comms]


def catalogue_of(notes: list[dict]) -> tuple[str, Catalogue, WallClock | None]:
    """(the run's name, its catalogue, the clock of its first rank's recording) from the notes of
    its ranks' recordings (the first one's header, the longest lists of hosts and of communicators
    any has: a spawned rank's header has the ranks before it). ValueError if they do not say (not
    an MPI run's recording)."""
    try:
        first = next(n for n in notes if "mpi" in n)
        mpi = first["mpi"]
        headers = [n["mpi"] for n in notes if "mpi" in n]
        comms = max((n["communicators"] for n in notes if "communicators" in n), key=len)
        pathmap = run_pathmap(str(first["run"]), [str(h) for h in max((h["hosts"] for h in headers), key=len)],
                              {str(k): str(v) for h in headers for k, v in h["clusters"].items()},
                              [Communicator(int(c[0]), tuple(int(m) for m in c[1]), str(c[2])) for c in comms],
                              str(mpi["instrument"]), int(mpi["keep"]))
        clock = first.get("clock")
        return str(first["run"]), Catalogue(pathmap), WallClock(int(clock[0]), int(clock[1])) if clock else None
    except (StopIteration, KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"the recording's notes do not describe an MPI run ({type(exc).__name__}: {exc})") from None


def build(directory, archive: str, meta: dict, catalogue: Catalogue | None = None, streams: dict | None = None,
          ended: str = "", closed: dict | None = None) -> recording.Built:
    """The archive at `archive` from the recording files in `directory` (`streams`: node -> bytes
    for ranks whose files are elsewhere), for the run whose catalogue it is (None: made from the
    files' own notes); `meta` and `ended` (how the run ended) kept in its meta table; `closed`, each
    rank's account (see eventspace.recording.build). The
    directory is removed once the archive is built. ArchiveError or OSError if it cannot be."""
    files = recording.node_files(directory)
    with contextlib.ExitStack() as stack:
        opened = {node: stack.enter_context(recording.opened(path)) for node, path in files.items()}
        opened.update(streams or {})
        opened = dict(sorted(opened.items(), key=lambda item: _rank_order(item[0])))
        if catalogue is None:
            notes = [note for stream in opened.values() for note in recording.notes(stream)]
            name, catalogue, clock = catalogue_of(notes)
            ended = ended or ending(notes, list(opened))
        else:
            name, clock = catalogue.pathmap.name, None   # the clock: the first rank's header note
        built = recording.build(archive, catalogue, opened, clock=clock,
                                meta={"run": name, **meta, "ended": ended or ENDED_NORMALLY}, closed=closed)
    recording.remove_directory(directory)
    return built


def ending(notes: list[dict], nodes: list[str], how: str = "") -> str:
    """How a run ended, from its ranks' last notes (and `how`, what the launcher saw)."""
    said = {}
    for note in notes:
        closed = note.get("closed")
        if isinstance(closed, dict):
            said.setdefault(str(closed.get("ended", "")), None)
    unclosed = len(nodes) - sum(1 for note in notes if isinstance(note.get("closed"), dict))
    parts = [how] if how else []
    parts += [text for text in said if text]
    if unclosed > 0:
        parts.append(f"{counted(unclosed, 'rank')} did not close {'its' if unclosed == 1 else 'their'} recording "
                     "(killed, or ended by MPI's abort)")
    return "; ".join(parts) or ENDED_NORMALLY


def build_recording(directory, archive: str, pathmap_file: str | None = None) -> recording.Built:
    """The archive of the recording in `directory`, built by hand: an MPI run's catalogue is made
    from its files' notes, a PATHS run's from `pathmap_file`. The directory is removed once built.
    ValueError if neither says what the records are of; ArchiveError or OSError if it cannot be built."""
    files = recording.node_files(directory)
    if not files:
        raise ValueError(f"{directory}: no recording files (NODE{recording.SUFFIX}) of yours there")
    with contextlib.ExitStack() as stack:
        notes = [n for p in files.values() for n in recording.notes(stack.enter_context(recording.opened(p)))]
    if pathmap_file is None:
        return build(directory, archive, {}, ended=ending(notes, list(files)))
    from paths import Pathmap

    with contextlib.ExitStack() as stack:
        streams = {node: stack.enter_context(recording.opened(path)) for node, path in files.items()}
        built = recording.build(archive, Catalogue(Pathmap.load(pathmap_file)), streams,
                                meta={"ended": ending(notes, list(files))})
    recording.remove_directory(directory)
    return built


def build_after_job(directory, archive: str, how: str, say) -> None:
    """What `eventspace mpirun` does once the job has ended without its rank 0 building the
    archive (an abort, a signal, a rank killed): build it from what reached the disk, and say so."""
    if not Path(directory).is_dir():
        return
    if not recording.node_files(directory):
        with contextlib.suppress(OSError):
            os.rmdir(directory)
        return
    try:
        files = recording.node_files(directory)
        with contextlib.ExitStack() as stack:
            notes = [n for p in files.values() for n in recording.notes(stack.enter_context(recording.opened(p)))]
        built = build(directory, archive, {}, ended=ending(notes, list(files), how))
    except (ArchiveError, OSError, ValueError) as exc:
        say(f"the archive {archive} could not be built ({exc}); the recording stays in {directory} "
            f"(`eventspace archive build {directory} F.sqlite` builds it)")
        return
    say(recording.closing_line(archive, built, "rank"))


def _rank_order(node: str) -> tuple:
    return (0, int(node[1:])) if node[1:].isdigit() else (1, node)
