"""A node's recorder: its trace elements read on a thread of its own process and kept in blocks, on disk or in a window."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import threading
from dataclasses import dataclass

from pastset import PastSetError
from paths import rundir

from . import blocks, trace
from .hosted import RECORD_FLUSH, RECORD_WINDOW

DUMP_CHUNK = 4 << 20          # bytes of a recording one RECORD_WINDOW reply carries at most
# The recorder reads its rings rarely, and a lot at a time: what it costs a program is the same (about
# 120 ns a record, most of it compression), but a program that times short stretches (OSU's message
# sizes) meets it less often: waking every 0.25 s, or every 32,768 records spilled, took a quarter off
# osu_bw's 8 KiB bandwidth, waking every second or every 262,144 records nothing measurable.
INTERVAL = 1.0                 # seconds between the recorder's reads of its rings
BLOCK_RECORDS = 32768          # records a block holds at most (about 1.2 MB before compression)
NEVER = 1 << 62                # the drain bound of a ring nobody records: no append reaches it
SPILL_WAKES = 8 * BLOCK_RECORDS * trace.SIZE   # spilled bytes (9.4 MB) that wake the recorder before its interval


def drain_bound(unread: int, keep: int) -> int:
    """The index whose append calls a ring's spill, `unread` its first record not read yet: half way
    round its `keep`. Between a thread's append at the bound and its spill, other threads of the
    process may append (the spill waits for the GIL, or for the recorder's lock); the other half of
    the ring takes their records, where a bound at the ring's last free slot let the first of them
    overwrite a record not read yet."""
    return unread + (keep - 1) // 2


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class Spec:
    """What a run records: everything (`all`, into per-node files, built into an archive when the
    run ends), or a flight recorder (`last:30s`, `last:64MiB`: a bounded window per node, kept in
    memory and dumped on demand). `seconds` and `nbytes` bound the window (None: no such bound)."""

    text: str
    seconds: float | None = None
    nbytes: int | None = None

    @property
    def window(self) -> bool:
        return self.text != "all"

    @classmethod
    def parse(cls, text: str) -> Spec:
        """`all`, `last:Ns` (also ms, min), or `last:N` with B, KiB, MiB or GiB. ValueError, naming
        the forms, for anything else."""
        if text == "all":
            return cls("all")
        match = re.fullmatch(r"last:(\d+(?:\.\d+)?)(ms|s|min|B|KiB|MiB|GiB)", text.strip())
        if match is None:
            raise ValueError(f"--record {text!r}: give last:SECONDS (last:30s, last:500ms, last:5min) or "
                             "last:SIZE (last:64MiB, last:512KiB, last:1GiB)")
        value, unit = float(match.group(1)), match.group(2)
        if value <= 0:
            raise ValueError(f"--record {text!r}: the window must be longer than 0")
        seconds = {"ms": 1e-3, "s": 1.0, "min": 60.0}.get(unit)
        if seconds is not None:
            return cls(text, seconds=value * seconds)
        return cls(text, nbytes=int(value * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]))


@dataclass(frozen=True)
class Counts:
    """A recorder's account: records its collectors `made` (appended to its rings since they were
    watched), `written` (into its file or window) and `discarded` (made but never written: a ring
    that wrapped before it was read, or a file that could not take them), with why it stopped
    writing early (`stopped`, "" if it did not). made = written + discarded once it is closed."""

    made: int
    written: int
    discarded: int
    stopped: str = ""

    def wire(self) -> list:
        return [self.made, self.written, self.discarded, self.stopped]

    def closed(self, ended: str) -> dict:
        """The account as a recording's last note holds it (`ended`: how the recording ended)."""
        return {"ended": ended, "made": self.made, "written": self.written, "discarded": self.discarded,
                "stopped": self.stopped}


class RecordingFile:
    """Where a node's recording goes on disk: a new file (never one that exists, never through a link,
    readable by this user alone), appended a whole block at a time. A write that fails (a full disk,
    a file size limit) cuts the file back to its last whole block and stops the file: `failed` says
    why, and the recorder counts what it could not write as discarded."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._fd = rundir.open_exclusive(self.path)
        self.size = 0
        self.failed = ""

    def write(self, data: bytes, newest: int | None = None) -> bool:
        """Append `data` (a block; `newest`, its records' latest end, is the window's concern) whole;
        False if it cannot (then nothing of it stays in the file). Once a write has failed, only notes
        are tried (`newest` None: a recording's last note, its counts, is worth the try)."""
        if self._fd < 0 or (self.failed and newest is not None):
            return False
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            self.failed = self.failed or exc.strerror or str(exc)
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size)   # freeing space needs none
            return False
        self.size += len(data)
        return True

    def sync(self) -> None:
        with contextlib.suppress(OSError):
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


class Window:
    """A flight recorder's window: the newest blocks of records, within `seconds` of the newest
    record's end or within `nbytes`, and every note. Dumped whole (`dump`); what falls out of the
    window is no loss (the recorder keeps only the window, as asked)."""

    def __init__(self, seconds: float | None = None, nbytes: int | None = None):
        self.seconds, self.nbytes = seconds, nbytes
        self.failed = ""
        self._notes: list[bytes] = []
        self._blocks: collections.deque = collections.deque()   # (block, newest t_end)
        self._held = 0
        self._newest = 0
        self._mutex = threading.Lock()   # held while the window changes or is copied

    def write(self, data: bytes, newest: int | None = None) -> bool:
        with self._mutex:
            if newest is None:
                self._notes.append(data)
                return True
            self._blocks.append((data, newest))
            self._held += len(data)
            self._newest = max(self._newest, newest)
            horizon = None if self.seconds is None else self._newest - int(self.seconds * 1e9)
            while len(self._blocks) > 1 and ((self.nbytes is not None and self._held > self.nbytes)
                                             or (horizon is not None and self._blocks[0][1] < horizon)):
                self._held -= len(self._blocks.popleft()[0])
        return True

    def dump(self) -> tuple[bytes, int]:
        """(every note, then the window's blocks, as one stream; the newest record's end, ns)."""
        with self._mutex:
            return b"".join(self._notes) + b"".join(data for data, _ in self._blocks), self._newest

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


class Recorder:
    """Everything a node's trace elements take, read on a thread of the node's own process and
    written a block at a time to `sink` (a RecordingFile, or a Window); no record crosses a
    process while the run goes on.

    Each watched trace element is a ring keeping its newest `keep` records. The recorder reads
    each ring every INTERVAL seconds (the TupleServer's batch read, in this process), from where
    it last stopped. A collector that can, calls the ring's spill (`watch`'s second value) on its
    own thread when an append reaches the ring's bound (half way round, `drain_bound`), long before
    an append could overwrite a record not read yet: the ring is read into the recorder's buffer
    there and then, so nothing is lost however fast the node runs (an MPI rank's collectors do),
    nor when several of its threads append at once. A ring that wraps before it is read loses the
    records it overwrote; they are counted as discarded (`counts`).

    The first block of a recording is a note (`header`: what it is of), and `note` adds more
    (an MPI rank notes each communicator it adopts); `close` writes a last note with the counts
    and how the recording ended. `say(line)` is told once, when the sink stops taking blocks.
    """

    def __init__(self, sink, header: dict, say=print, interval: float = INTERVAL,
                 block_records: int = BLOCK_RECORDS, codec: int | None = None):
        self.sink = sink
        self.interval = interval
        self.block_records = block_records
        self._say = say
        self._encoder = blocks.Encoder(codec)
        self._mutex = threading.Lock()       # held while rings, cursors, bounds or the buffer change
        self._rings: list[list] = []          # [element, cursor, cursor when watched, bounds, at]
        self._buffer: list[bytes] = []        # records read from rings, not written yet
        self._buffered = 0
        self._lost = 0                        # overwritten in a ring before they were read
        self._write = threading.Lock()        # held while blocks are made and written (in order)
        self.written = 0                      # records the sink took
        self.unwritten = 0                    # records the sink refused (its `failed` says why)
        self.closed: Counts | None = None        # the final account, once closed
        self.ended = ""                          # how the recording ended, once closed
        self._dumped: tuple[bytes | int, int] | None = None   # what a dump reads, chunk by chunk
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._write_note(header)
        self._thread = threading.Thread(target=self._run, name="eventspace-recorder", daemon=True)
        self._thread.start()

    # -- rings -----------------------------------------------------------------------------------

    def watch(self, element, bounds=None, at: int = 0):
        """Record `element` (a binary ring of trace records) from its next record on. For a
        collector that spills, `bounds[at]` is its drain bound (its slot of the node's collector
        table, eventspace.table.Page.bounds), which the recorder keeps: after an append returned
        index i >= bounds[at], the collector calls the spill() returned."""
        with self._mutex:
            cursor = element.last()
            ring = [element, cursor, cursor, bounds, at]
            if bounds is not None:
                bounds[at] = drain_bound(cursor, element.keep)
            self._rings.append(ring)
        return lambda: self._spill(ring)

    def _spill(self, ring) -> None:
        with self._mutex:
            self._read(ring)
            wake = self._buffered >= SPILL_WAKES
        if wake:
            self._wake.set()

    def _read(self, ring) -> None:
        element, cursor, _, bounds, at = ring
        try:
            start, data = element.read_range(cursor, element.last())
        except PastSetError:    # the element was deleted: nothing more comes from it
            if bounds is not None:
                bounds[at] = NEVER
            return
        self._lost += start - cursor
        if data:
            self._buffer.append(data)
            self._buffered += len(data)
        ring[1] = start + len(data) // trace.SIZE
        if bounds is not None:
            bounds[at] = drain_bound(ring[1], element.keep)

    def _take(self) -> bytes:
        with self._mutex:
            for ring in self._rings:
                self._read(ring)
            data = b"".join(self._buffer)
            self._buffer.clear()
            self._buffered = 0
        return data

    # -- writing ---------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if not self._stop.is_set():
                self.flush(sync=False)

    def flush(self, sync: bool = True) -> None:
        """Write everything the rings hold now (from any thread); with `sync`, to the disk itself."""
        with self._write:
            if self.closed is not None:
                return
            self._write_records(self._take())
            if sync:
                self.sink.sync()

    def _write_records(self, data: bytes) -> None:
        if not data:
            return
        records = trace.decode(data)
        for at in range(0, len(records), self.block_records):
            part = records[at:at + self.block_records]
            if self.sink.failed:
                self.unwritten += len(part)
                continue
            block = self._encoder.records(part, self.written)
            if self.sink.write(block, int(part["t_end"].max())):
                self.written += len(part)
            else:
                self.unwritten += len(part)
                self._say(f"recording stopped: {getattr(self.sink, 'path', 'the window')}: {self.sink.failed}; "
                          f"{self.written:,} events written")

    def note(self, what: dict) -> None:
        """A note after the records written so far (what a reader needs to know from here on)."""
        with self._write:
            if self.closed is None:
                self._write_records(self._take())
                self._write_note(what)

    def _write_note(self, what: dict) -> None:
        self.sink.write(self._encoder.note(what, self.written))

    def counts(self) -> Counts:
        """The account so far (see Counts)."""
        with self._mutex:
            made = 0
            for element, _, watched, _, _ in self._rings:
                with contextlib.suppress(PastSetError):
                    made += element.last() - watched
            lost = self._lost
        return Counts(made, self.written, lost + self.unwritten, self.sink.failed)

    def close(self, ended: str) -> Counts:
        """Stop, write the rest and a last note (`ended`: how the recording ended, and the counts);
        the final counts. Idempotent. The collectors should have stopped appending."""
        self._stop.set()
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._write:
            if self.closed is None:
                self._write_records(self._take())
                counts = self.counts()
                counts = Counts(counts.made, counts.written, counts.made - counts.written, counts.stopped)
                self.ended = ended
                self._write_note({"closed": counts.closed(ended)})
                self.sink.sync()
                self.sink.close()
                self.closed = counts
            with self._mutex:   # a collector that goes on appending no longer spills
                for _, _, _, bounds, at in self._rings:
                    if bounds is not None:
                        bounds[at] = NEVER
        return self.closed

    # -- asked from elsewhere ---------------------------------------------------------------------

    def host(self, server) -> None:
        """Answer RECORD_FLUSH and RECORD_WINDOW on `server` (this node's TupleServer)."""
        server.host(RECORD_FLUSH, self._flushed)
        server.host(RECORD_WINDOW, self._window)

    def _flushed(self) -> list:
        self.flush()
        return self.counts().wire()

    def _window(self, offset: int, most: int) -> list:
        """[the recording's bytes from `offset` (at most `most`), its total size, the newest record's
        end (ns), the window's seconds or 0]: a flight recorder's window, or what a file holds so far.
        Offset 0 writes out what the rings hold and takes a new copy; later offsets read that copy."""
        offset, most = int(offset), max(1, min(int(most), DUMP_CHUNK))
        if offset == 0 or self._dumped is None:
            self.flush(sync=False)
            # A window is copied whole (it is bounded); a file is read a chunk at a time, up to the
            # size it had when the dump began (what is appended meanwhile is the next dump's).
            self._dumped = self.sink.dump() if isinstance(self.sink, Window) else (self.sink.size, 0)
        data, newest = self._dumped
        seconds = getattr(self.sink, "seconds", None) or 0
        if isinstance(data, int):
            with open(self.sink.path, "rb") as f:
                f.seek(offset)
                return [f.read(max(0, min(most, data - offset))), data, newest, seconds]
        return [data[offset:offset + most], len(data), newest, seconds]
