"""The archive: every event a scope streams, kept in an SQLite file and queryable later."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

import numpy as np

from . import trace
from .catalogue import SYSTEM_ROLE, Catalogue, Entry, TreeLayout
from .clock import WallClock
from .ignored import NOT_INTEGERS, Ignored, verdict

FORMAT = "eventspace-archive"
VERSION = 1
RESERVED = ("format", "version", "pathmap", "created", "tuples", "discarded", "clock_monotonic_ns",
            "clock_realtime_ns", "threads", "trees")
_INT64_MAX = 2**63 - 1
PULLS_DTYPE = np.dtype([("at_ns", "i8"), ("seconds", "f8"), ("tuples", "i8"), ("bytes_in", "i8"), ("discarded", "i8")])

# The record's own fields as stored (SQLite integers are signed 64-bit: times must stay below 2**63).
_EVENT_FIELDS = trace.FIELDS
# Names denormalised from the catalogue, so that queries need no join.
_NAME_FIELDS = ("op_name", "role", "thread", "node", "element_name", "tree")
_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE events (seq INTEGER PRIMARY KEY, "
    + ", ".join(f"{f} INTEGER NOT NULL" for f in _EVENT_FIELDS) + ", "
    + ", ".join(f"{f} TEXT" for f in _NAME_FIELDS) + ")",
    "CREATE INDEX events_thread ON events (thread)",
    "CREATE INDEX events_element ON events (element_name)",
    "CREATE INDEX events_t_start ON events (t_start)",
)
# One row per pull that appended events (Archive.append's `pull`): the recording scope's own figures.
_PULLS = ("CREATE TABLE IF NOT EXISTS pulls (seq INTEGER PRIMARY KEY, at_ns INTEGER NOT NULL, "
          "seconds REAL NOT NULL, tuples INTEGER NOT NULL, bytes_in INTEGER NOT NULL, discarded INTEGER NOT NULL)")
_PULL_FIELDS = ("at_ns", "seconds", "tuples", "bytes_in", "discarded")
# The tables an archive is read through, with the columns read (a file may be anything: a view or a
# virtual table in their place could compute forever, so each must be a plain table).
_TABLES = {"meta": ("key", "value"), "events": ("seq", *_EVENT_FIELDS),
           "catalogue": tuple(f.name for f in dataclasses.fields(Entry))}
_OPTIONAL_TABLES = {"pulls": ("seq", *_PULL_FIELDS)}   # archives from before pulls were kept have none
# Each field's greatest value as a trace record holds it (times: as SQLite does, below 2**63).
_LARGEST = {"op": 0xFFFF, "flags": 0xFFFF, "collector": 0xFFFFFFFF, "element": 0xFFFFFFFF, "arg": 0xFFFFFFFF,
            "nbytes": 0xFFFFFFFF, "t_start": _INT64_MAX, "t_end": _INT64_MAX}
_ROW = np.dtype([("seq", np.int64)] + [(f, np.int64) for f in _EVENT_FIELDS])   # a row as SQLite gives it
BATCH = 16384   # rows read at a time: what a reader holds of the table, whatever its size

_HINT = ("tables: events (seq, " + ", ".join(_EVENT_FIELDS + _NAME_FIELDS) + "), catalogue (one row per "
         "collector and system element), pulls (seq, at_ns, seconds, tuples, bytes_in, discarded), meta (key, "
         "value); e.g. SELECT thread, count(*) FROM events GROUP BY thread")


class ArchiveError(Exception):
    """An archive file that cannot be used as asked: missing, not an archive, written for other
    collectors, opened read-only, or a query that fails. The message names the file and what to do."""


@dataclass(frozen=True)
class ArchiveInfo:
    """An archive's meta table: the pathmap its collectors come from, when it was created
    (ISO 8601, UTC), tuples appended, tuples discarded before they were read, free-form
    key/values (`extra`), and `clock`: the monitor's clock against the wall clock, read when the
    archive was created, which dates its events (None in archives written before it was kept)."""

    path: str
    pathmap: str
    created: str
    tuples: int
    discarded: int
    extra: dict[str, str]
    clock: WallClock | None = None


@dataclass(frozen=True)
class PullFigures:
    """One pull of the scope that recorded an archive: when it ended (`at_ns`, the monitor's
    clock, as the events), the seconds it took and the bytes it brought in."""

    at_ns: int
    seconds: float
    bytes_in: int


@dataclass(frozen=True)
class ArchivedPathmap:
    """What an archive keeps of a pathmap: its name."""

    name: str


class ArchivedCatalogue(Catalogue):
    """A catalogue rebuilt from an archive's `catalogue` table and meta: the same collectors,
    system elements, threads and tree layouts as the pathmap's; of the pathmap itself only its
    name (`pathmap.name`). Archives written before threads and trees were kept have none."""

    def __init__(self, name: str, entries: tuple[Entry, ...], system: tuple[Entry, ...] = (),
                 threads: tuple[tuple[str, str], ...] = (), trees: dict[str, TreeLayout] | None = None):
        # Catalogue's lookups need only these and `pathmap.name`.
        self.pathmap = ArchivedPathmap(name)
        self.entries = tuple(entries)
        self.system = tuple(system)
        self.threads = tuple(threads)
        self.trees = dict(trees or {})

    @property
    def name(self) -> str:
        return self.pathmap.name


class Archive:
    """An SQLite file of trace records: table `events` (one row per record, in append order,
    with thread, node, element and tree names alongside), `catalogue` (one row per collector)
    and `meta` (see ArchiveInfo).

    `Archive(path, catalogue)` opens `path` for appending, creating it if needed; an existing
    file must be an archive of the same collectors (ArchiveError otherwise, and the file is
    left as it was). `Archive.open(path)` opens one read-only. Queries always go through a
    read-only connection, so they cannot change the file. One writer per file; the methods of
    one Archive may be called from several threads.

    A file is checked before it is read, since it may be anything: its tables (meta, events,
    catalogue, and pulls where there is one) must be tables, not views, with their columns,
    and its catalogue and meta must make sense (ArchiveError naming what is wrong otherwise).
    Records are read a batch at a time (`batches`), never the table at once, and each row
    must be a trace record the catalogue accepts (eventspace.ignored); the others are left
    out, counted in `ignored` and said once on the `eventspace.ignored` logger.
    """

    def __init__(self, path, catalogue: Catalogue):
        self.path = Path(path)
        self.readonly = False
        self._reader_db: sqlite3.Connection | None = None
        # Held around every use of a connection (sqlite3 objects are not thread-safe).
        self._lock = threading.Lock()
        name = catalogue.pathmap.name
        if self.path.is_dir():
            raise ArchiveError(f"{self.path} is a directory; give a file name for the archive")
        if self.path.exists() and self.path.stat().st_size:
            existing = Archive.open(self.path)
            try:
                stored = existing.catalogue
            finally:
                existing.close()
            if stored.name != name or (stored.entries, stored.system) != (catalogue.entries, catalogue.system):
                raise ArchiveError(f"{self.path} is an archive of pathmap {stored.name} with other "
                                   f"collectors than {name}'s; write to a new file")
            self._db = _connect(self.path, readonly=False)
            try:
                _try_a_write(self._db)
                with self._db:
                    self._db.execute(_PULLS)   # archives from before pulls were kept
            except sqlite3.Error as exc:
                self._db.close()
                if "readonly" in str(exc):
                    raise ArchiveError(f"{self.path} is read-only, so events cannot be appended to it; make it "
                                       "writable (chmod u+w), or write to a new file") from None
                raise ArchiveError(f"{self.path}: cannot append to this archive ({exc}); check that the file and "
                                   "its directory are writable, or write to a new file") from None
        else:
            db = None
            try:
                db = self._db = _connect(self.path, readonly=False)
                self._create(name, catalogue)
            except sqlite3.Error as exc:
                if db is not None:
                    db.close()
                raise ArchiveError(f"{self.path}: cannot create an archive ({exc}); check that the "
                                   "directory exists and is writable") from None
        self.catalogue = ArchivedCatalogue(name, catalogue.entries, catalogue.system, catalogue.threads,
                                           catalogue.trees)
        self._names = _name_columns(self.catalogue)
        self._has_pulls = True
        self.ignored = Ignored()
        self._told: set[str] = set()

    @classmethod
    def open(cls, path) -> Archive:
        """An existing archive, read-only (its file is never written). ArchiveError if the file is
        missing, unreadable or not an archive."""
        self = cls.__new__(cls)
        self.path = Path(path)
        self.readonly = True
        self._lock = threading.Lock()
        if not self.path.exists():
            raise ArchiveError(f"{self.path}: no such file; give the path of an archive "
                               "(an SQLite file written by eventspace.archive.Archive)")
        if self.path.is_dir():
            raise ArchiveError(f"{self.path} is a directory, not an archive file")
        try:
            self._db = _connect(self.path, readonly=True)
        except sqlite3.Error as exc:
            raise ArchiveError(f"{self.path}: cannot open ({exc}); check the file's permissions") from None
        self._reader_db = self._db
        try:
            self.catalogue = self._load_catalogue()
        except BaseException:
            self._db.close()
            raise
        self._names = _name_columns(self.catalogue)
        self.ignored = Ignored()
        self._told: set[str] = set()
        return self

    # -- writing ------------------------------------------------------------------------------

    def append(self, records, discarded: int = 0, pull: PullFigures | None = None) -> int:
        """Append a batch in one transaction and return how many records it held; add
        `discarded` (records lost before they were read, as a stream pull reports) to the count,
        and with `pull`, a row of the pull's own figures to `pulls` (see `pulls()`).

        `records` is a trace.DTYPE array (or packed trace bytes). Every record is kept, even one
        of a collector the catalogue does not know (its names stay NULL); a system record's
        thread is the one its `element` names. ValueError for times at or above 2**63 ns,
        TypeError for anything that is not trace records, ArchiveError if the archive was opened
        read-only.
        """
        if self.readonly:
            raise ArchiveError(f"{self.path} was opened read-only (Archive.open); use Archive(path, catalogue) to append")
        records = _as_records(records)
        if discarded < 0:
            raise ValueError(f"discarded counts records, it cannot be negative ({discarded})")
        if len(records) and max(int(records["t_start"].max()), int(records["t_end"].max())) > _INT64_MAX:
            raise ValueError("a record's time is at or above 2**63 ns, which SQLite cannot store")
        columns = [records[f].tolist() for f in _EVENT_FIELDS]
        cids = columns[_EVENT_FIELDS.index("collector")]
        ops = columns[_EVENT_FIELDS.index("op")]
        names = self._names
        none = (None,) * (len(_NAME_FIELDS) - 1)
        rows = [
            (*values, trace.OP_NAMES.get(op), *names.get(cid, none))
            for *values, op, cid in zip(*columns, ops, cids)
        ]
        thread = len(_EVENT_FIELDS) + _NAME_FIELDS.index("thread")
        for i in np.flatnonzero((records["flags"] & trace.SYSTEM) != 0).tolist():
            row = rows[i]
            rows[i] = (*row[:thread], self.catalogue.thread_of(int(records["element"][i])), *row[thread + 1:])
        placeholders = ", ".join("?" * (len(_EVENT_FIELDS) + len(_NAME_FIELDS)))
        with self._lock, self._db:
            self._db.executemany(
                f"INSERT INTO events ({', '.join(_EVENT_FIELDS + _NAME_FIELDS)}) VALUES ({placeholders})", rows)
            self._db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = 'tuples'", (len(rows),))
            self._db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = 'discarded'",
                             (int(discarded),))
            if pull is not None:
                self._db.execute("INSERT INTO pulls (at_ns, seconds, tuples, bytes_in, discarded) VALUES (?, ?, ?, ?, ?)",
                                 (int(pull.at_ns), float(pull.seconds), len(rows), int(pull.bytes_in), int(discarded)))
        return len(rows)

    def extend(self, catalogue: Catalogue) -> int:
        """Take the collectors `catalogue` adds after the archive's own (a run whose pathmap grew
        while it ran, as an MPI run's does with each communicator); how many it added. Records of
        them appended from now on carry their names. The system elements, numbered after the
        collectors, are renumbered as `catalogue` numbers them (a growing run samples none, so
        no record names their old ids). ArchiveError if `catalogue` does not begin with the
        archive's collectors, or the archive was opened read-only."""
        if self.readonly:
            raise ArchiveError(f"{self.path} was opened read-only (Archive.open); use Archive(path, catalogue) to write")
        known = self.catalogue.entries
        if tuple(catalogue.entries[:len(known)]) != known:
            raise ArchiveError(f"{self.path}: the new catalogue does not begin with the archive's "
                               f"{len(known)} collectors; write to a new file")
        new = tuple(catalogue.entries[len(known):])
        if new:
            fields = dataclasses.fields(Entry)
            with self._lock, self._db:
                self._db.execute("DELETE FROM catalogue WHERE role = ?", (SYSTEM_ROLE,))
                self._db.executemany(f"INSERT INTO catalogue VALUES ({', '.join('?' * len(fields))})",
                                     [dataclasses.astuple(e) for e in new + catalogue.system])
            old = self.catalogue
            self.catalogue = ArchivedCatalogue(old.name, known + new, catalogue.system, old.threads, old.trees)
            self._names = _name_columns(self.catalogue)
        return len(new)

    def set_meta(self, key: str, value) -> None:
        """Store a free-form key/value in the meta table (the value as text); ValueError for the
        keys the archive keeps itself (RESERVED)."""
        if self.readonly:
            raise ArchiveError(f"{self.path} was opened read-only (Archive.open); use Archive(path, catalogue) to write")
        if key in RESERVED:
            raise ValueError(f"meta key {key!r} is kept by the archive itself ({', '.join(RESERVED)})")
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (str(key), str(value)))

    # -- reading ------------------------------------------------------------------------------

    @property
    def info(self) -> ArchiveInfo:
        with self._lock:
            meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        clock = None
        if "clock_monotonic_ns" in meta and "clock_realtime_ns" in meta:
            clock = WallClock(int(meta["clock_monotonic_ns"]), int(meta["clock_realtime_ns"]))
        return ArchiveInfo(str(self.path), meta["pathmap"], meta["created"], int(meta["tuples"]),
                           int(meta["discarded"]), {k: v for k, v in meta.items() if k not in RESERVED}, clock)

    def __len__(self) -> int:
        """Rows in `events`."""
        with self._lock:
            return self._db.execute("SELECT count(*) FROM events").fetchone()[0]

    def records(self, progress=None) -> np.ndarray:
        """Every stored record that may be read (see `batches`) as a trace.DTYPE array, in append
        order: 36 bytes a record, read a batch at a time. `progress`, if given, is called with
        each batch's number of records and the number of rows in all."""
        rows = len(self)
        out = np.empty(rows, dtype=trace.DTYPE)   # filled in place: the records are held once
        filled = 0
        for _, records in self.batches():
            if filled + len(records) > len(out):   # rows appended since they were counted
                out = np.concatenate([out[:filled], np.empty(len(records), dtype=trace.DTYPE)])
            out[filled:filled + len(records)] = records
            filled += len(records)
            if progress is not None:
                progress(len(records), rows)
        return out[:filled] if filled < len(out) else out

    def batches(self, order: str = "seq", size: int = BATCH):
        """The stored records, `size` rows at a time, as (seq, records): their rows' seq (int64)
        and a trace.DTYPE array, in the order of `order` (`seq`, append order; `t_start`; or
        `t_end`, then seq: SQLite sorts on disk, not in this process). A row that is not a
        trace record the catalogue accepts is left out and counted in `ignored` (see the
        class); the reasons are said once, when the reading ends. ArchiveError if the file
        turns out to be damaged."""
        if order not in ("seq", "t_start", "t_end"):
            raise ValueError(f"records come by seq, t_start or t_end, not {order!r}")
        sql = f"SELECT seq, {', '.join(_EVENT_FIELDS)} FROM events ORDER BY {order}{', seq' if order != 'seq' else ''}"
        largest = np.array([_INT64_MAX] + [_LARGEST[f] for f in _EVENT_FIELDS], dtype=np.int64)
        # A connection of its own, so that the cursor stays open between batches (a sort by t_end
        # is made once) while the archive's other methods go on.
        db = None
        try:
            db = _connect(self.path, readonly=True)
            cursor = db.execute(sql)
            while rows := cursor.fetchmany(size):
                try:
                    columns = np.fromiter(rows, dtype=_ROW, count=len(rows)).view(np.int64).reshape(len(rows), -1)
                except (TypeError, ValueError, OverflowError):   # a text, blob or null among them
                    whole = [row for row in rows if all(type(v) is int for v in row)]
                    columns = np.array(whole, dtype=object).astype(np.int64, casting="unsafe") if whole else \
                        np.empty((0, len(largest)), dtype=np.int64)
                in_range = ((columns >= 0) & (columns <= largest)).all(axis=1)
                if len(columns) < len(rows) or not in_range.all():
                    self.ignored.add(NOT_INTEGERS, len(rows) - int(np.count_nonzero(in_range)))
                    columns = columns[in_range]
                records = np.empty(len(columns), dtype=trace.DTYPE)
                for i, name in enumerate(_EVENT_FIELDS, 1):
                    records[name] = columns[:, i]
                keep, left = verdict(records, self.catalogue)
                if keep is None:
                    yield columns[:, 0], records
                else:
                    self.ignored.merge(left)
                    yield columns[:, 0][keep], records[keep]
        except sqlite3.Error as exc:
            raise ArchiveError(f"{self.path} is a damaged EventSpace archive ({exc}); its events "
                               "cannot be read") from None
        finally:
            if db is not None:
                db.close()
            self.ignored.tell(self._told, f"archive {self.path}", "rows")

    def pulls(self) -> np.ndarray:
        """The recording scope's pulls, in order: a structured array of at_ns (when each ended,
        the events' clock), seconds, tuples, bytes_in, discarded; empty for an archive written
        without them. Rows whose figures are not numbers are left out."""
        numbers = " AND ".join(f"typeof({f}) IN ('integer', 'real')" for f in _PULL_FIELDS)
        with self._lock:
            if not self._has_pulls:
                return np.empty(0, dtype=PULLS_DTYPE)
            try:
                rows = self._db.execute(f"SELECT {', '.join(_PULL_FIELDS)} FROM pulls WHERE {numbers} "
                                        "ORDER BY seq").fetchall()
            except sqlite3.Error as exc:
                raise ArchiveError(f"{self.path} is a damaged EventSpace archive ({exc})") from None
        try:
            return np.array(rows, dtype=PULLS_DTYPE) if rows else np.empty(0, dtype=PULLS_DTYPE)
        except (OverflowError, ValueError):
            raise ArchiveError(f"{self.path} is a damaged EventSpace archive (a pull's figures are out of "
                               "range)") from None

    def query(self, sql: str, parameters=()) -> tuple[tuple[str, ...], list[tuple]]:
        """(column names, rows) of one SQL statement, run read-only. ArchiveError naming the file
        and the tables for SQL that does not run (a syntax error, an unknown column, a write)."""
        with self._lock:
            if self._reader_db is None:
                self._reader_db = _connect(self.path, readonly=True)
            try:
                cursor = self._reader_db.execute(sql, parameters)
                columns = tuple(d[0] for d in cursor.description or ())
                return columns, cursor.fetchall()
            except sqlite3.Error as exc:
                why = "queries cannot change an archive" if "readonly" in str(exc) else str(exc)
                raise ArchiveError(f"{self.path}: query failed: {why}; {_HINT}") from None

    def close(self) -> None:
        with self._lock:
            if self._reader_db is not None and self._reader_db is not self._db:
                self._reader_db.close()
            self._reader_db = None
            self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    def _create(self, name: str, catalogue: Catalogue) -> None:
        fields = dataclasses.fields(Entry)
        columns = ", ".join(_column(f) for f in fields)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        # Events are appended on the monitor's monotonic clock: this pairing dates them for exports.
        clock = WallClock.now()
        with self._db:
            for statement in (*_SCHEMA, _PULLS):
                self._db.execute(statement)
            self._db.execute(f"CREATE TABLE catalogue ({columns})")
            self._db.executemany(
                f"INSERT INTO catalogue VALUES ({', '.join('?' * len(fields))})",
                [dataclasses.astuple(e) for e in catalogue.entries + catalogue.system])
            trees = {tree: {"members": list(t.members), "fan_in": t.fan_in} for tree, t in catalogue.trees.items()}
            self._db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                ("format", FORMAT), ("version", str(VERSION)), ("pathmap", name), ("created", now),
                ("tuples", "0"), ("discarded", "0"), ("clock_monotonic_ns", str(clock.monotonic_ns)),
                ("clock_realtime_ns", str(clock.realtime_ns)), ("threads", json.dumps(catalogue.threads)),
                ("trees", json.dumps(trees))])

    def _load_catalogue(self) -> ArchivedCatalogue:
        what = "an SQLite file written by eventspace.archive.Archive"
        try:
            self._has_pulls = self._check_tables(what)
            meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            raise ArchiveError(f"{self.path} is not an EventSpace archive ({exc}); give {what}") from None
        if meta.get("format") != FORMAT:
            raise ArchiveError(f"{self.path} is not an EventSpace archive (its meta table has no "
                               f"format={FORMAT}); give {what}")
        try:
            version = int(meta.get("version", 0))
        except (TypeError, ValueError):
            version = -1
        if version > VERSION:
            raise ArchiveError(f"{self.path} is archive version {meta['version']}, newer than this "
                               f"EventSpace reads ({VERSION}); upgrade EventSpace")
        try:
            if version < 1 or not all(_is_count(meta.get(key)) for key in ("tuples", "discarded")):
                raise ValueError("its meta table's version, tuples or discarded is not a count")
            if "clock_monotonic_ns" in meta or "clock_realtime_ns" in meta:
                if not all(_is_count(meta.get(key)) for key in ("clock_monotonic_ns", "clock_realtime_ns")):
                    raise ValueError("its meta table's clock is not two counts of nanoseconds")
            cursor = self._db.execute(f"SELECT {', '.join(_TABLES['catalogue'])} FROM catalogue ORDER BY id")
            names = [d[0] for d in cursor.description]
            every = tuple(_entry(dict(zip(names, row))) for row in cursor.fetchall())
            if [e.id for e in every] != list(range(1, len(every) + 1)):
                raise ValueError("its catalogue's ids are not 1, 2, 3, ...")
            threads = tuple(_thread(t) for t in json.loads(meta.get("threads", "[]")))
            trees = {str(tree): _tree_layout(t) for tree, t in json.loads(meta.get("trees", "{}")).items()}
            str(meta["pathmap"])
        except (sqlite3.Error, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise ArchiveError(f"{self.path} is a damaged EventSpace archive ({exc}); "
                               "its events cannot be read") from None
        entries = tuple(e for e in every if e.role != SYSTEM_ROLE)
        return ArchivedCatalogue(meta["pathmap"], entries, tuple(e for e in every if e.role == SYSTEM_ROLE),
                                 threads, trees)

    def _check_tables(self, what: str) -> bool:
        """ArchiveError unless meta, events and catalogue (and pulls, if there is one) are plain
        tables with the columns they are read by; whether there is a pulls table."""
        names = {**_TABLES, **_OPTIONAL_TABLES}
        found = {name: (kind, sql or "") for kind, name, sql in self._db.execute(
            f"SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view') AND name IN "
            f"({', '.join('?' * len(names))})",
            tuple(names)).fetchall()}
        for name, columns in names.items():
            if name not in found:
                if name in _OPTIONAL_TABLES:
                    continue
                raise ArchiveError(f"{self.path} is not an EventSpace archive (an SQLite database without a {name} "
                                   f"table); give {what}")
            kind, sql = found[name]
            if kind != "table" or sql.lstrip().upper().startswith("CREATE VIRTUAL"):
                raise ArchiveError(f"{self.path} is not an EventSpace archive: its {name} is a "
                                   f"{'virtual table' if kind == 'table' else kind}, not a table (reading it "
                                   f"could compute without end); give {what}")
            have = {row[1] for row in self._db.execute(f"PRAGMA table_info({name})").fetchall()}
            lacking = [c for c in columns if c not in have]
            if lacking:
                raise ArchiveError(f"{self.path} is not an EventSpace archive: its {name} table has no column "
                                   f"{', '.join(lacking)}; give {what}")
        return "pulls" in found


def _is_count(value) -> bool:
    """Whether a meta value is a whole number >= 0 (as text)."""
    return isinstance(value, str) and value.isdigit() and len(value) <= 19


def _entry(row: dict) -> Entry:
    """A catalogue row as an Entry; TypeError if a field is not of its type."""
    for f in dataclasses.fields(Entry):
        value = row[f.name]
        wanted = int if f.type in ("int", int) else str
        if not (isinstance(value, wanted) or (value is None and "None" in str(f.type))):
            raise TypeError(f"its catalogue's {f.name} {value!r} is not a{'n' if wanted is int else ''} "
                            f"{wanted.__name__}")
    return Entry(**row)


def _thread(pair) -> tuple[str, str]:
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, str) for v in pair)):
        raise TypeError(f"its meta table's threads hold {pair!r}, not [thread, node]")
    return pair[0], pair[1]


def _tree_layout(layout) -> TreeLayout:
    members, fan_in = layout["members"], layout["fan_in"]
    if not (isinstance(members, list) and all(isinstance(m, str) for m in members) and isinstance(fan_in, dict)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in fan_in.values())):
        raise TypeError("its meta table's trees are not {members: [thread, ...], fan_in: {stage: n >= 1}}")
    return TreeLayout(tuple(members), {str(k): v for k, v in fan_in.items()})


def _try_a_write(db: sqlite3.Connection) -> None:
    """Write to the archive and roll it back: SQLite opens a file it may not write (read-only, or
    immutable) without a word, and says so only at the first write, when events would be lost.
    The file is left as it was."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("UPDATE meta SET value = value WHERE key = 'tuples'")
    finally:
        db.execute("ROLLBACK")


def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
    if readonly:
        # mode=ro: SQLite never writes the file (nor creates it) through this connection.
        return sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False)
    return sqlite3.connect(path, check_same_thread=False)


def _column(field: dataclasses.Field) -> str:
    kind = "INTEGER" if field.type in ("int", int) else "TEXT"
    required = field.type in ("int", "str", int, str)
    key = " PRIMARY KEY" if field.name == "id" else ""
    return f"{field.name} {kind}{' NOT NULL' if required else ''}{key}"


def _name_columns(catalogue: Catalogue) -> dict[int, tuple]:
    """Collector id -> (role, thread, node, element name, tree name), as the events table stores them."""
    return {e.id: (e.role, e.thread, e.node, e.element if not e.flags & trace.TREE else None, e.tree)
            for e in catalogue.entries + catalogue.system}


def _as_records(records) -> np.ndarray:
    if isinstance(records, (bytes, bytearray, memoryview)):
        return trace.decode(records)
    if isinstance(records, np.ndarray) and records.dtype.names == trace.DTYPE.names:
        return records.astype(trace.DTYPE, copy=False)
    raise TypeError(f"an archive stores trace records (a trace.DTYPE array or packed bytes), "
                    f"got {type(records).__name__}")
