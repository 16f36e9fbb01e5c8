"""A run's recording read back: the blocks its nodes wrote (files, or flight-recorder windows), built into an archive."""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np

from pastset import PastSetError
from pastset.terminal import counted
from paths import rundir
from paths.launch import ENDED_NORMALLY

from . import blocks
from .archive import BLOCKS, Archive, ArchiveError
from .catalogue import Catalogue
from .clock import WallClock
from .hosted import RECORD_WINDOW, RECORDING_ENVIRONMENT as ENVIRONMENT
from .ignored import Ignored, check
from .recorder import DUMP_CHUNK, Recorder, RecordingFile, Spec, Window

SUFFIX = ".rec"   # a node's recording file, in its run's recording directory: NODE.rec
# A PATHS collector does not spill its ring (an MPI rank's does): its node's recorder reads more often.
PATHS_INTERVAL = 0.1


def new_directory(run_dir, name: str) -> Path:
    """A new recording directory for run `name` in `run_dir` (`NAME.recording`, or `NAME.recording-2`, ...
    if one of that name is there: a directory another run left is never written into)."""
    for n in range(1, 10_000):
        path = Path(run_dir) / (f"{name}.recording" if n == 1 else f"{name}.recording-{n}")
        if rundir.create_dir(path):
            return path
    raise FileExistsError(f"{run_dir}: no free name for a recording directory of run {name}")


def node_file(directory, node: str) -> Path:
    """Where node `node` writes its recording in `directory` (a `/` in its name quoted)."""
    return Path(directory) / f"{quote(node, safe='')}{SUFFIX}"


def node_files(directory) -> dict[str, Path]:
    """node -> its recording file, for the files of this user's in `directory`."""
    found = {}
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(Path(directory).iterdir()):
            if path.name.endswith(SUFFIX) and rundir.own_file(path):
                found[unquote(path.name[:-len(SUFFIX)])] = path
    return found


def remove_directory(directory) -> None:
    """Remove a recording directory once its archive is built (this user's files in it, then it)."""
    for path in node_files(directory).values():
        rundir.remove(path)
    with contextlib.suppress(OSError):
        os.rmdir(directory)


@contextlib.contextmanager
def opened(path) -> Iterator[bytes | mmap.mmap]:
    """A recording file's bytes, mapped (read-only) while the block runs."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not size:
            yield b""
            return
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as data:
            yield data


def notes(stream) -> list[dict]:
    """The notes of a recording stream, in order (those that do not decode left out)."""
    found = []
    for block in blocks.scan(stream):
        if isinstance(block, blocks.Block) and block.kind == blocks.NOTE:
            with contextlib.suppress(ValueError):
                found.append(block.note())
    return found


@dataclass
class NodeAccount:
    """What one node's recording holds: records `read` back from good blocks, `lost` in damaged
    ones (`damage` says where and why), `left_out` (checked and refused, or outside a window), and
    its recorder's own account where it closed (`made`, `written`, `discarded`: None if it did not,
    a node killed, say) and how it `ended`."""

    node: str
    read: int = 0
    lost: int = 0
    left_out: int = 0
    made: int | None = None
    written: int | None = None
    discarded: int | None = None
    ended: str = "did not close its recording (killed, or ended by MPI's abort)"
    stopped: str = ""
    damage: list[str] = field(default_factory=list)

    def line(self) -> str:
        """`r1: made 200,000, written 200,000, discarded 0` (or what is known of it)."""
        if self.made is None:
            told = f"{self.read:,} events on disk; {self.ended}"
        else:
            told = f"made {self.made:,}, written {self.written:,}, discarded {self.discarded:,}"
        if self.stopped:
            told += f" (its recording stopped: {self.stopped})"
        if self.lost:
            told += f"; {self.lost:,} lost in damaged blocks"
        return f"{self.node}: {told}"

    def take(self, closed: dict) -> None:
        """Its recorder's own account (a recording's last note, or Counts.wire() as `closed`)."""
        self.made, self.written = int(closed["made"]), int(closed["written"])
        self.discarded, self.ended = int(closed["discarded"]), str(closed["ended"])
        self.stopped = str(closed.get("stopped") or "")

    def as_dict(self) -> dict:
        return {"read": self.read, "lost": self.lost, "left_out": self.left_out, "made": self.made,
                "written": self.written, "discarded": self.discarded, "ended": self.ended, "stopped": self.stopped,
                "damage": self.damage}


@dataclass
class Built:
    """An archive built from a recording: its path, the records it holds, each node's account,
    what was left out by reason (`ignored`), and the seconds it took."""

    path: str
    tuples: int
    nodes: dict[str, NodeAccount]
    ignored: Ignored
    seconds: float

    @property
    def discarded(self) -> int:
        return sum((a.discarded or 0) + a.lost for a in self.nodes.values())


def build(path, catalogue: Catalogue, streams: dict[str, object], *, clock: WallClock | None = None,
          meta: dict | None = None, since_ns: int | None = None, closed: dict | None = None) -> Built:
    """A new archive at `path` (layout BLOCKS) of every record in `streams` (node -> a recording
    stream: bytes or a mapped file), checked against `catalogue` (records no collector of it could
    have written are left out, counted and said once on the `eventspace.ignored` logger), with `meta` (key -> text)
    added. `since_ns`: keep only records that end at or after it (a flight recorder's window).
    `closed` (node -> a recorder's account as its last note holds it): for a recording whose last
    note did not reach its file (a full disk).

    A damaged stretch of a stream is skipped and accounted (the records its header names, or that
    the numbering of the blocks after it shows missing); everything after it is kept. Blocks are
    stored as they were written, unless some of their records are left out (then re-encoded):
    building costs about the reading of the blocks, well under a second per million records.
    ArchiveError if the archive cannot be made (the file exists, a directory that is not writable).
    """
    started = time.perf_counter()
    ignored = Ignored()
    accounts = {}
    encoder = blocks.Encoder()
    if clock is None:
        clock = next((c for c in map(_clock_of, streams.values()) if c is not None), None)
    with Archive(path, catalogue, layout=BLOCKS, clock=clock) as archive:
        for key, value in (meta or {}).items():
            archive.set_meta(key, value)
        for node, stream in streams.items():
            account = accounts[node] = NodeAccount(node)
            if node in (closed or {}):
                account.take(closed[node])   # the recording's own last note, if it has one, says the same
            archive.append_blocks(node, _kept(stream, catalogue, account, ignored, encoder, since_ns))
            archive.add_discarded((account.discarded or 0) + account.lost)
        archive.set_meta("recording", json.dumps({node: a.as_dict() for node, a in accounts.items()}))
        tuples = archive.info.tuples
    ignored.tell(set(), f"archive {path}")
    return Built(str(path), tuples, accounts, ignored, time.perf_counter() - started)


def as_records(stream) -> np.ndarray:
    """Every record of a recording stream's good blocks, in order (for tests and tools)."""
    found = [b.records() for b in blocks.scan(stream) if isinstance(b, blocks.Block) and b.kind == blocks.RECORDS]
    return np.concatenate(found) if found else np.empty(0, dtype=blocks.trace.DTYPE)


def _kept(stream, catalogue: Catalogue, account: NodeAccount, ignored: Ignored, encoder: blocks.Encoder,
          since_ns: int | None) -> Iterator[blocks.Block]:
    """The records blocks of `stream` to keep (see `build`), accounted in `account` as they are read."""
    expected = 0
    for block in blocks.scan(stream):
        if isinstance(block, blocks.Damage):
            account.damage.append(f"{block.why}: {block.length:,} bytes at {block.offset:,}"
                                  + (f", {block.records:,} records" if block.records is not None else ""))
            if block.records is not None:
                account.lost += block.records
                expected += block.records
            continue
        if block.first > expected:   # a stretch whose header was damaged held these
            account.lost += block.first - expected
        expected = max(expected, block.first + block.count)
        if block.kind == blocks.NOTE:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                closed = block.note().get("closed")
                if isinstance(closed, dict):
                    account.take(closed)
            continue
        try:
            records = block.records()
        except ValueError as exc:
            account.lost += block.count
            account.damage.append(f"a block that does not decode ({exc}): {block.count:,} records")
            continue
        account.read += len(records)
        kept, left = check(records, catalogue, from_rings=True)
        if since_ns is not None:
            kept = kept[kept["t_end"] >= since_ns]
        ignored.merge(left)
        account.left_out += len(records) - len(kept)
        if len(kept) == len(records):
            yield block
        elif len(kept):
            yield next(blocks.scan(encoder.records(kept, block.first)))
    if account.written is not None and account.written > expected:   # cut off after its last block
        account.lost += account.written - expected


def _clock_of(stream) -> WallClock | None:
    """The clock a recording's header note gives (its node's clock against the wall clock)."""
    for block in blocks.scan(stream):
        if isinstance(block, blocks.Block) and block.kind == blocks.NOTE:
            with contextlib.suppress(ValueError, TypeError, KeyError, IndexError):
                mono, real = block.note()["clock"]
                return WallClock(int(mono), int(real))
            return None
    return None


def windows(clients: dict, timeout: float = 10.0) -> tuple[dict[str, bytes], int | None, dict[str, str]]:
    """(node -> its recording so far: a flight recorder's window, or what its file holds; the
    earliest end a record of a time window keeps, ns, or None; node -> why it gave none), asked of
    every node behind `clients` (node -> pastset client) with the hosted RECORD_WINDOW."""
    streams, missing = {}, {}
    newest, seconds = 0, 0.0
    for node, client in clients.items():
        chunks, offset = [], 0
        try:
            while True:
                data, total, node_newest, node_seconds = client.call(RECORD_WINDOW, offset, DUMP_CHUNK, timeout=timeout)
                chunks.append(data)
                offset += len(data)
                if not data or offset >= total:
                    break
        except Exception as exc:   # a node not recording answers with its server's error; one gone, with ServerGone
            missing[node] = f"{type(exc).__name__}: {exc}"
            continue
        streams[node] = b"".join(chunks)
        newest, seconds = max(newest, int(node_newest)), max(seconds, float(node_seconds))
    return streams, (newest - int(seconds * 1e9) if seconds else None), missing


def dump(clients: dict, catalogue: Callable[[], Catalogue], path, meta: dict | None = None,
         timeout: float = 10.0) -> Built:
    """An archive at `path` of what every node behind `clients` has recorded so far (a flight
    recorder's window, trimmed to its time; or a recording file's records), asked of them now;
    `catalogue()` gives the run's catalogue, made only once a node has answered with a recording
    (a large run's takes seconds, and a run that records nothing is told at once). ArchiveError if
    none of them answers with a recording, or the archive cannot be made."""
    streams, since, missing = windows(clients, timeout)
    if not streams:
        raise ArchiveError("no node answered with a recording (" + "; ".join(
            f"{node}: {why}" for node, why in list(missing.items())[:3]) + "); was the run started with "
            "--record or --archive?")
    notes = {"dumped": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if missing:
        notes["missing"] = json.dumps(missing)
    return build(path, catalogue(), streams, since_ns=since, meta={**notes, **(meta or {})})


def dump_run(run_file, path=None, why: str = "") -> tuple[Path, Built]:
    """Dump a live run's recording (`dump`, asked of every node its run file names) into `path`
    (default: `dump_path`); (the path, what was built). `why` is kept as the archive's `ended`.
    ArchiveError if no node records, or the archive cannot be made."""
    import pastset

    path = Path(path) if path is not None else dump_path(run_file.name)
    pathmap = run_file.pathmap()   # its keys (the checked pathmap beside the snapshot: quick to load)
    clients = {node: pastset.connect(endpoint, security=pathmap.security.load())
               for node, endpoint in run_file.endpoints.items()}
    try:
        built = dump(clients, lambda: Catalogue(pathmap), path,
                     meta={"run": run_file.name, **({"ended": why} if why else {})})
    finally:
        for client in clients.values():
            client.close()
    return path, built


def dump_path(name: str, directory=".") -> Path:
    """A new file name for a dump of run `name`: `NAME.dump-YYYYmmdd-HHMMSS.sqlite` (-2, -3... if taken)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        path = Path(directory) / f"{name}.dump-{stamp}{'' if n == 1 else f'-{n}'}.sqlite"
        if not path.exists():
            return path
    raise FileExistsError(f"{directory}: no free name for a dump of {name}")


def closing_line(archive, built: Built, what: str = "node") -> str:
    """`archive F.sqlite: 200,000 events from 2 nodes, 0 discarded (A: made ..., written ..., discarded ...;
    ...); built in 0.05 s` (`what`: node, or rank)."""
    return (f"archive {archive}: {counted(built.tuples, 'event')} from {counted(len(built.nodes), what)}, "
            f"{built.discarded:,} discarded ({'; '.join(a.line() for a in built.nodes.values())}); "
            f"built in {built.seconds:.2f} s")


# -- the recording of a PATHS run: its nodes record, its launcher builds ---------------------------

class RunRecording:
    """What a PATHS run records (`eventspace run ... --archive F.sqlite`, or `--record last:30s`), for
    its launcher (paths.launch finds this class through the `eventspace.recording` entry point):
    `environment` tells the node processes (each records its own trace elements: NodeSpace),
    `ending` dumps a flight recorder's windows when the run ends otherwise than normally, while the
    nodes still serve, and `finish` builds the archive from the nodes' files once they have stopped.
    ValueError at once for an archive that exists or a window that does not parse."""

    def __init__(self, archive=None, record: str | None = None):
        if (archive is None) == (record is None):
            raise ValueError("record a run with --archive F.sqlite or with --record last:..., one of them")
        if archive is not None and os.path.exists(archive) and os.path.getsize(archive):
            raise ValueError(f"archive {archive} exists; give a new file (a recorded run's archive starts empty), "
                             "or remove it")
        self.archive = None if archive is None else os.fspath(archive)
        self.spec = Spec.parse(record or "all")
        self.directory: Path | None = None

    def environment(self, run_file) -> dict[str, str]:
        """The variables that make run `run_file`'s nodes record (a new recording directory for an archive)."""
        if not self.spec.window:
            self.directory = new_directory(run_file.directory, run_file.name)
        return {ENVIRONMENT: json.dumps({"spec": self.spec.text, "run": run_file.name,
                                         "dir": os.fspath(self.directory) if self.directory else None})}

    def ending(self, run, ended: str) -> list[str]:
        """Before the nodes stop: a flight recorder's windows dumped into a new archive when the run did
        not end normally (`ended` says how); the lines to tell."""
        if not self.spec.window or ended == ENDED_NORMALLY:
            return []
        path = dump_path(run.name)
        try:
            built = dump({node: run.client(node) for node in run.endpoints}, lambda: Catalogue(run.pathmap), path,
                         meta={"run": run.name, "ended": ended}, timeout=5)
        except (ArchiveError, OSError, PastSetError) as exc:   # the run is ending anyway: say why
            return [f"the flight recorder could not be dumped: {type(exc).__name__}: {exc}"]
        return [f"flight recorder ({self.spec.text}) dumped to {path}: {built.tuples:,} events from "
                f"{len(built.nodes)} nodes ({ended})"]

    def finish(self, run_file, pathmap, ended: str) -> list[str]:
        """Once the nodes have stopped: the archive built from their files (the directory removed);
        the lines to tell."""
        if self.directory is None or self.archive is None:
            return []
        try:
            with contextlib.ExitStack() as stack:
                streams = {node: stack.enter_context(opened(path)) for node, path in node_files(self.directory).items()}
                built = build(self.archive, Catalogue(pathmap), streams, meta={"run": run_file.name, "ended": ended})
        except (ArchiveError, OSError, ValueError) as exc:
            return [f"the archive {self.archive} could not be built ({exc}); the recording stays in {self.directory} "
                    f"(`eventspace archive build {self.directory} F.sqlite --pathmap P.yaml` builds it)"]
        remove_directory(self.directory)
        return [closing_line(self.archive, built)]


def node_recorder(node_name: str, clock_offset_ns: int = 0):
    """The recorder a PATHS node's environment asks for (ENVIRONMENT), or None: its file in the run's
    recording directory, or a flight recorder's window."""
    asked = os.environ.get(ENVIRONMENT)
    if not asked:
        return None
    settings = json.loads(asked)
    spec = Spec.parse(settings["spec"])
    now = WallClock.now()
    header = {"recording": 1, "run": settings.get("run"), "node": node_name,
              "clock": [now.monotonic_ns + clock_offset_ns, now.realtime_ns]}
    sink = Window(spec.seconds, spec.nbytes) if spec.window else RecordingFile(node_file(settings["dir"], node_name))
    return Recorder(sink, header, say=lambda line: print(f"node {node_name}: {line}", file=sys.stderr, flush=True),
                    interval=PATHS_INTERVAL)

