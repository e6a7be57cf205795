"""Records of a v2 batch read one at a time from a (possibly compressed) records section.

A record is ``length attributes timestampDelta offsetDelta keyLength key valueLength value
headers``; what the broker decides on (offset, timestamp, key, whether the value is null) is
in front of the value, so ``RecordHead`` stops there and the caller chooses what happens to
the rest: skip it, copy it verbatim to a sink (recompression, compaction), or read it (the
coordinators' loaders, which need values). Nothing larger than one record's key, or one
record the caller asked to read, is ever held; both are bounded and counted in the budget.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import crc32c

from strom.protocol.compression import (
    IN_FLIGHT,
    CorruptCompressedDataError,
    DecompressedStream,
    InFlightBudget,
    StreamCompressor,
)
from strom.protocol.record_batch import (
    ATTRIBUTES_POS,
    COMPRESSION_MASK,
    CRC_POS,
    CRC_START,
    HEADER_SIZE,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_POS,
    Buffer,
    RecordBatchHeader,
    parse_header,
    read_varint,
)

MAX_KEY_BYTES = 16 * 1024 * 1024  # a key is held while its record is decided on
MAX_READ_RECORD_BYTES = 64 * 1024 * 1024  # a record whose value a caller reads whole
RECORDS_COUNT_POS = HEADER_SIZE - 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


@dataclass(slots=True)
class RecordHead:
    """A record up to its value: ``prefix`` is its encoding up to there, ``rest`` the bytes after."""

    offset: int
    timestamp: int
    attributes: int
    key: bytes | None
    value_size: int  # -1: null value (a tombstone)
    prefix: bytes
    rest: int


@dataclass(slots=True)
class StreamedRecord:
    """A whole record, as the loaders use it (kafka-python's record has the same names)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


class RecordReader:
    """Iterates the records of one batch; between two records the caller may call ``copy_rest``,
    ``read_rest`` or nothing (the rest is skipped)."""

    def __init__(self, batch: Buffer, position: int = 0, budget: InFlightBudget = IN_FLIGHT) -> None:
        self.header: RecordBatchHeader = parse_header(batch, position)
        body = memoryview(batch)[position + HEADER_SIZE:self.header.end]
        self._stream = DecompressedStream(self.header.compression, body, budget)
        self._budget = budget
        self._pending = 0
        self._head: RecordHead | None = None

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stream.close()

    @property
    def decompressed_bytes(self) -> int:
        return self._stream.total

    def _varint(self, raw: bytearray) -> int:
        value = shift = 0
        while True:
            b = self._stream.read_byte()
            raw.append(b)
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7
            if shift > 63:
                raise CorruptCompressedDataError("varint is longer than 10 bytes")

    def heads(self) -> Iterator[RecordHead]:
        h = self.header
        for _ in range(h.records_count):
            self._skip_pending()
            raw = bytearray()
            length = self._varint(raw)
            body_start = len(raw)
            if length < 0:
                raise CorruptCompressedDataError(f"record length {length} is negative")
            attributes = self._stream.read_byte()
            raw.append(attributes)
            ts_delta = self._varint(raw)
            offset_delta = self._varint(raw)
            key_len = self._varint(raw)
            key = None
            if key_len >= 0:
                if key_len > MAX_KEY_BYTES:
                    raise CorruptCompressedDataError(f"record key of {key_len} bytes is over {MAX_KEY_BYTES}")
                self._budget.reserve(key_len)
                try:
                    key = self._stream.read(key_len)
                finally:
                    self._budget.release(key_len)
                raw += key
            value_size = self._varint(raw)
            if key_len < -1 or value_size < -1:
                raise CorruptCompressedDataError(f"record at offset delta {offset_delta} has a negative length")
            rest = length - (len(raw) - body_start)
            if rest < max(value_size, 0):
                raise CorruptCompressedDataError(f"record at offset delta {offset_delta} is shorter than its fields")
            self._pending = rest
            self._head = RecordHead(h.base_offset + offset_delta, h.base_timestamp + ts_delta, attributes, key,
                                    value_size, bytes(raw), rest)
            yield self._head
        self._skip_pending()

    def _skip_pending(self) -> None:
        if self._pending:
            n, self._pending = self._pending, 0
            self._stream.pipe(n, None)

    def copy_rest(self, sink: Callable[[bytes | memoryview], object]) -> None:
        """The current record's bytes after its prefix, to ``sink`` a chunk at a time."""
        n, self._pending = self._pending, 0
        self._stream.pipe(n, sink)

    def read_rest(self) -> tuple[bytes | None, list[tuple[str, bytes | None]]]:
        """The current record's value and headers, read whole (bounded by MAX_READ_RECORD_BYTES)."""
        assert self._head is not None
        n, self._pending = self._pending, 0
        if n > MAX_READ_RECORD_BYTES:
            raise CorruptCompressedDataError(f"record of {n} bytes is over {MAX_READ_RECORD_BYTES}")
        self._budget.reserve(n)
        try:
            data = self._stream.read(n)
        finally:
            self._budget.release(n)
        try:
            value_size = self._head.value_size
            value = None if value_size < 0 else data[:value_size]
            pos = max(value_size, 0)
            count, pos = read_varint(data, pos)
            if count < 0:
                raise ValueError(f"header count {count} is negative")
            headers: list[tuple[str, bytes | None]] = []
            for _ in range(count):
                klen, pos = read_varint(data, pos)
                if klen < 0 or pos + klen > len(data):
                    raise ValueError(f"header key length {klen} is out of the record")
                hkey = data[pos:pos + klen].decode()
                pos += klen
                vlen, pos = read_varint(data, pos)
                if vlen < -1 or pos + max(vlen, 0) > len(data):
                    raise ValueError(f"header value length {vlen} is out of the record")
                hval = None if vlen < 0 else data[pos:pos + vlen]
                pos += max(vlen, 0)
                headers.append((hkey, hval))
        except (ValueError, UnicodeDecodeError) as e:
            raise CorruptCompressedDataError(f"record headers: {e}") from e
        return value, headers


def iter_records(batch: Buffer, position: int = 0) -> Iterator[StreamedRecord]:
    """Every record of the batch at ``position`` with its value, decompressed a chunk at a time."""
    with RecordReader(batch, position) as reader:
        for head in reader.heads():
            value, headers = reader.read_rest()
            yield StreamedRecord(head.offset, head.timestamp, head.key, value, headers)


def iter_record_heads(batch: Buffer, position: int = 0) -> Iterator[RecordHead]:
    """Offsets, timestamps and keys of the batch's records; values are skipped, never held."""
    with RecordReader(batch, position) as reader:
        yield from reader.heads()


class BatchTooLargeError(ValueError):
    """A rewritten batch grew past the size it may have (max.message.bytes)."""


class BatchRewriter:
    """A batch written while its records stream through: producer fields, offsets and base
    timestamp kept from ``original`` (records are copied verbatim, so their deltas stay right),
    the records section compressed with ``codec`` as it comes and passed to ``sink``. The
    records count and max timestamp are known up front (the CRC covers them and comes first);
    ``finish`` gives the 61-byte header (with length and CRC) to put in front of the body."""

    def __init__(self, original: RecordBatchHeader, original_header: Buffer, codec: int, count: int,
                 max_timestamp: int, sink: Callable[[bytes | memoryview], object], limit: int | None = None) -> None:
        h = self._header = bytearray(original_header[:HEADER_SIZE])
        _I16.pack_into(h, ATTRIBUTES_POS, (original.attributes & ~COMPRESSION_MASK) | codec)
        _I64.pack_into(h, MAX_TIMESTAMP_POS, max_timestamp)
        _I32.pack_into(h, RECORDS_COUNT_POS, count)
        self._count = count
        self._compressor = StreamCompressor(codec)
        self._sink = sink
        self._limit = limit
        self._crc = crc32c.crc32c(memoryview(h)[CRC_START:HEADER_SIZE])
        self.body_size = 0
        self.added = 0

    def _emit(self, data: bytes | memoryview) -> None:
        if not data:
            return
        self.body_size += len(data)
        if self._limit is not None and self.body_size + HEADER_SIZE > self._limit:
            raise BatchTooLargeError(f"the rewritten batch is over {self._limit} bytes")
        self._crc = crc32c.crc32c(data, self._crc)
        self._sink(data)

    def write(self, data: bytes | memoryview) -> None:
        """Record bytes (split anywhere), uncompressed."""
        self._emit(self._compressor.compress(data))

    def add(self, reader: RecordReader, head: RecordHead) -> None:
        """Copy the current record of ``reader`` whole."""
        self.added += 1
        self.write(head.prefix)
        reader.copy_rest(self.write)

    def finish(self) -> bytes:
        if self.added != self._count:
            raise CorruptCompressedDataError(f"batch rewritten with {self.added} records, {self._count} announced")
        self._emit(self._compressor.flush())
        h = self._header
        _I32.pack_into(h, LENGTH_POS, HEADER_SIZE - LOG_OVERHEAD + self.body_size)
        _U32.pack_into(h, CRC_POS, self._crc)
        return bytes(h)
