"""Blocks of trace records as a recording keeps them: columns, delta-coded, compressed one block at a time.

A recording (a node's recording file, a flight recorder's window, an archive's `blocks` table) is
a sequence of blocks. Each is a 36-byte header and a payload, all integers little-endian:

    offset  size  field
    0       4     magic  b"EVB1"
    4       1     kind   1 records, 2 note (a JSON object)
    5       1     codec  0 stored, 1 zlib, 2 zstd (the payload's compression)
    6       2     zero
    8       4     count  records in the block (0 for a note)
    12      8     first  records of this recording before the block (its first record's number)
    20      4     raw    bytes of the payload once decompressed (count x 36 for records)
    24      4     size   bytes of the payload as stored, right after the header
    28      4     CRC-32 of the stored payload (zlib.crc32)
    32      4     CRC-32 of header bytes 0..31

A records payload, decompressed, is eight columns one after the other, each `count` values of
its field: op (u16), flags (u16), collector (u32), element (u32), arg as the difference from the
previous record's arg (u32, modulo 2**32; the first from 0), nbytes (u32), t_start as the
difference from the previous record's t_start (int64, zigzag-coded as u64: (d << 1) ^ (d >> 63);
the first from 0) and t_end - t_start (u64, modulo 2**64). A column of w-byte values is stored
as w byte planes: every value's byte 0, then every value's byte 1, and so on. Repeated fields
and small differences become runs of equal bytes, which zlib and zstd shrink to about 2 bytes a
record for an MPI program's calls (36 raw). Every field is kept exactly: decoding gives back the
36-byte tuples that were encoded.

The codec is zstd where the `zstandard` package is installed (`pip install 'eventspace[zstd]'`),
else zlib from the standard library; each block says which, so a reader needs only what wrote it.
A damaged stream (a run killed in the middle of a write, a disk that filled, bytes changed) is
read block by block: a block whose header or payload fails its CRC, or that is cut short, is
skipped and reported (`Damage`, with the records it held when its header can still be read), and
reading resumes at the next good header; `first` tells how many records a skipped stretch held.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from . import trace

MAGIC = b"EVB1"
HEADER = struct.Struct("<4sBBHIQIIII")
assert HEADER.size == 36

RECORDS, NOTE = 1, 2
STORED, ZLIB, ZSTD = 0, 1, 2
CODEC_NAMES = {STORED: "stored", ZLIB: "zlib", ZSTD: "zstd"}

MAX_COUNT = 1 << 20            # records one block may hold (36 MiB decoded): a reader refuses more
MAX_NOTE = 16 << 20            # bytes a note may hold decoded
ZLIB_LEVEL = 1                 # zlib's fastest: within 10% of level 6's size on these columns, 2x faster
ZSTD_LEVEL = 3

# The columns: field, width in bytes, how it is coded (see the module docstring).
_COLUMNS = (("op", 2, "plain"), ("flags", 2, "plain"), ("collector", 4, "plain"), ("element", 4, "plain"),
            ("arg", 4, "delta"), ("nbytes", 4, "plain"), ("t_start", 8, "zigzag"), ("t_end", 8, "duration"))
_UNSIGNED = {2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}


class BlockError(ValueError):
    """A block that cannot be made (too many records, a note too large)."""


def _zstd():
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard


def default_codec() -> int:
    """ZSTD where the zstandard package is installed, else ZLIB."""
    return ZSTD if _zstd() is not None else ZLIB


class Encoder:
    """Makes blocks with one codec (`default_codec()` unless told), keeping its compressor between
    blocks. Not shared between threads: each writer has its own."""

    def __init__(self, codec: int | None = None):
        self.codec = default_codec() if codec is None else codec
        if self.codec == ZSTD:
            zstandard = _zstd()
            if zstandard is None:
                raise BlockError("the zstd codec needs the zstandard package: pip install 'eventspace[zstd]'")
            self._compress = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress
        elif self.codec == ZLIB:
            self._compress = lambda data: zlib.compress(data, ZLIB_LEVEL)
        elif self.codec == STORED:
            self._compress = bytes
        else:
            raise BlockError(f"no codec {self.codec}; codecs are {CODEC_NAMES}")

    def records(self, records: np.ndarray, first: int) -> bytes:
        """One block of `records` (a trace.DTYPE array, at most MAX_COUNT), numbered from `first`."""
        count = len(records)
        if count > MAX_COUNT:
            raise BlockError(f"a block holds at most {MAX_COUNT} records, not {count}")
        return self._block(RECORDS, count, first, columns(records))

    def note(self, what: dict, first: int) -> bytes:
        """One note block: `what` as JSON (at most MAX_NOTE bytes), after `first` records."""
        data = json.dumps(what, separators=(",", ":")).encode()
        if len(data) > MAX_NOTE:
            raise BlockError(f"a note holds at most {MAX_NOTE} bytes, not {len(data)}")
        return self._block(NOTE, 0, first, data)

    def _block(self, kind: int, count: int, first: int, raw: bytes) -> bytes:
        return packed(kind, self.codec, count, first, len(raw), self._compress(raw))


def packed(kind: int, codec: int, count: int, first: int, raw: int, payload: bytes) -> bytes:
    """A block's bytes: its header (checks included), then `payload` as stored."""
    head = struct.pack("<4sBBHIQIII", MAGIC, kind, codec, 0, count, first, raw, len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload


def columns(records: np.ndarray) -> bytes:
    """The uncompressed payload of a records block (see the module docstring)."""
    records = np.ascontiguousarray(records, dtype=trace.DTYPE)
    count = len(records)
    planes = []
    for name, width, coding in _COLUMNS:
        values = records[name].astype(_UNSIGNED[width], copy=True)
        if coding == "delta" and count:
            values[1:] -= records[name][:-1]
        elif coding == "zigzag" and count:
            values[1:] -= records[name][:-1]
            signed = values.view(np.int64)
            values = ((signed << 1) ^ (signed >> 63)).view(np.uint64)
        elif coding == "duration":
            values -= records["t_start"]
        planes.append(values.view(np.uint8).reshape(count, width).T.tobytes())
    return b"".join(planes)


def records_of(raw: bytes, count: int) -> np.ndarray:
    """The records (trace.DTYPE) a decompressed records payload of `count` records holds.
    ValueError if its size is not count x 36."""
    if len(raw) != count * trace.SIZE:
        raise ValueError(f"a payload of {count} records is {count * trace.SIZE} bytes, not {len(raw)}")
    out = np.empty(count, dtype=trace.DTYPE)
    planes = np.frombuffer(raw, dtype=np.uint8)
    at = 0
    for name, width, coding in _COLUMNS:
        column = np.ascontiguousarray(planes[at:at + width * count].reshape(width, count).T).view(_UNSIGNED[width])
        column = column.reshape(count)
        at += width * count
        if coding == "delta":
            column = np.cumsum(column, dtype=np.uint32)
        elif coding == "zigzag":
            column = np.cumsum((column >> np.uint64(1)) ^ (np.uint64(0) - (column & np.uint64(1))), dtype=np.uint64)
        elif coding == "duration":
            column = column + out["t_start"]
        out[name] = column
    return out


@dataclass(frozen=True)
class Block:
    """One whole block: where it starts in its stream (`offset`), its header's fields, and its
    stored payload."""

    offset: int
    kind: int
    codec: int
    count: int
    first: int
    raw: int
    payload: bytes

    @property
    def length(self) -> int:
        """Its bytes in the stream, header included."""
        return HEADER.size + len(self.payload)

    def encoded(self) -> bytes:
        """The block's bytes, as they were in its stream."""
        return packed(self.kind, self.codec, self.count, self.first, self.raw, self.payload)

    def data(self) -> bytes:
        """The payload decompressed (ValueError if it is not what the header says)."""
        if self.codec == STORED:
            data = self.payload
        elif self.codec == ZLIB:
            inflate = zlib.decompressobj()
            data = inflate.decompress(self.payload, self.raw)
            if inflate.unconsumed_tail:
                raise ValueError(f"the payload holds more than the {self.raw} bytes its header says")
        elif self.codec == ZSTD:
            zstandard = _zstd()
            if zstandard is None:
                raise ValueError("its codec is zstd, and the zstandard package is not installed "
                                 "(pip install 'eventspace[zstd]')")
            data = zstandard.ZstdDecompressor().decompress(self.payload, max_output_size=self.raw)
        else:
            raise ValueError(f"unknown codec {self.codec}")
        if len(data) != self.raw:
            raise ValueError(f"the payload holds {len(data)} bytes, not the {self.raw} its header says")
        return data

    def records(self) -> np.ndarray:
        """A records block's records. ValueError if it cannot be decoded."""
        try:
            return records_of(self.data(), self.count)
        except (zlib.error, MemoryError) as exc:
            raise ValueError(str(exc)) from None
        except Exception as exc:   # zstandard.ZstdError
            raise ValueError(f"{type(exc).__name__}: {exc}") from None

    def note(self) -> dict:
        """A note block's JSON object. ValueError if it is not one."""
        try:
            value = json.loads(self.data())
        except (zlib.error, UnicodeDecodeError) as exc:
            raise ValueError(str(exc)) from None
        except ValueError:
            raise
        except Exception as exc:   # zstandard.ZstdError
            raise ValueError(f"{type(exc).__name__}: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError("a note is a JSON object")
        return value


@dataclass(frozen=True)
class Damage:
    """A stretch of a stream that is not a whole, good block: `offset` and `length` in bytes,
    `why`, and the records it held where a header said (`records`, else None)."""

    offset: int
    length: int
    why: str
    records: int | None = None


def header_of(data, at: int) -> tuple | None:
    """The header fields at `at` if a good header is there (magic, CRC, sane sizes), else None."""
    if len(data) - at < HEADER.size:
        return None
    fields = HEADER.unpack_from(data, at)
    magic, kind, codec, _, count, first, raw, size, _, crc = fields
    if magic != MAGIC or zlib.crc32(bytes(data[at:at + HEADER.size - 4])) != crc:
        return None
    if kind == RECORDS and (count > MAX_COUNT or raw != count * trace.SIZE):
        return None
    if kind == NOTE and (count or raw > MAX_NOTE):
        return None
    if kind not in (RECORDS, NOTE) or codec not in CODEC_NAMES:
        return None
    return fields


def scan(data) -> Iterator[Block | Damage]:
    """The blocks of a stream (bytes, a memoryview, an mmap), in order, with a Damage for each
    stretch that is not a good block. A Block's payload has passed its CRC; whether it decodes is
    for `Block.records` and `Block.note` to say."""
    end = len(data)
    at = 0
    while at < end:
        fields = header_of(data, at)
        if fields is None:
            resync = _next_header(data, at + 1)
            if resync is None:
                cut = end - at < HEADER.size and bytes(data[at:at + 4]) == MAGIC[:min(4, end - at)]
                yield Damage(at, end - at, "a block cut short (its header is incomplete)" if cut
                             else "bytes that are not a block, to the end")
                return
            yield Damage(at, resync - at, "a damaged block (its header fails its check)")
            at = resync
            continue
        _, kind, codec, _, count, first, raw, size, payload_crc, _ = fields
        start = at + HEADER.size
        if start + size > end:
            yield Damage(at, end - at, "a block cut short (the stream ends inside it)", count)
            return
        payload = bytes(data[start:start + size])
        if zlib.crc32(payload) != payload_crc:
            yield Damage(at, HEADER.size + size, "a damaged block (its payload fails its check)", count)
        else:
            yield Block(at, kind, codec, count, first, raw, payload)
        at = start + size


def _next_header(data, at: int) -> int | None:
    """The offset of the next good header at or after `at`, or None."""
    finder = data.find if hasattr(data, "find") else bytes(data).find
    while True:
        at = finder(MAGIC, at)
        if at < 0:
            return None
        if header_of(data, at) is not None:
            return at
        at += 1
