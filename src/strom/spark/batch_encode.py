"""Arrow record batches of the sink's columns -> Kafka v2 record batches per topic-partition.

The columns are those ``validate_sink_schema`` accepts: ``value``, optional ``key`` (string or
binary), ``topic``, ``partition`` and ``headers``. No Python object is made per row: the C
kernels in ``strom/native/encode.c`` read the Arrow buffers directly. Without them (no
compiler, or STROM_NATIVE=0) the pure-Python functions here give byte-identical results.

Partitioning follows Kafka's default partitioner, so a keyed row lands where a Java client, or
librdkafka with ``partitioner=murmur2_random``, would put it: an explicit ``partition`` value
wins; else ``toPositive(murmur2(key)) % partitions``. Rows without a key are sticky: all the
null-key rows of one Arrow batch (per topic) go to one partition, the next batch's to the next
partition, round robin from a random start (Kafka's sticky partitioner, with the Arrow batch as
the unit instead of the producer batch).

A partition's rows are cut into record batches of at most ``batch.size`` bytes (uncompressed);
a single row larger than that becomes a batch of its own, which the broker refuses with
MESSAGE_TOO_LARGE if it passes ``max.message.bytes``.
"""

from __future__ import annotations

import ctypes
import random
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import crc32c
import pyarrow as pa
import pyarrow.compute as pc

from strom import native
from strom.protocol.compression import compress
from strom.protocol.primitives import uvarint
from strom.protocol.record_batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CRC_POS,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    TRANSACTIONAL_MASK,
)
from strom.spark.options import StromOptionError

DEFAULT_BATCH_SIZE = 1_000_000
COMPRESSION_TYPES = {
    "none": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}

_OK, _BUFFER_TOO_SMALL, _NULL_HEADER_KEY, _BAD_PARTITION = 0, 1, 2, 3
_U32 = struct.Struct(">I")


class SinkDataError(ValueError):
    """A row the sink cannot write (a header without a key, a partition the topic lacks)."""


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c) as a signed 32-bit int, like ``Utils.murmur2``."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def key_partition(key: bytes, num_partitions: int) -> int:
    """Kafka's default partitioner for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# --- ctypes views of the Arrow columns ------------------------------------------------------


class _BytesCol(ctypes.Structure):
    _fields_ = [
        ("validity", ctypes.c_void_p),
        ("offsets", ctypes.c_void_p),
        ("data", ctypes.c_void_p),
        ("offset", ctypes.c_int64),
        ("large", ctypes.c_int32),
    ]


class _HeadersCol(ctypes.Structure):
    _fields_ = [
        ("validity", ctypes.c_void_p),
        ("offsets", ctypes.c_void_p),
        ("offset", ctypes.c_int64),
        ("large", ctypes.c_int32),
        ("struct_validity", ctypes.c_void_p),
        ("struct_offset", ctypes.c_int64),
        ("keys", _BytesCol),
        ("values", _BytesCol),
    ]


class _IntCol(ctypes.Structure):
    _fields_ = [("validity", ctypes.c_void_p), ("values", ctypes.c_void_p), ("offset", ctypes.c_int64)]


def _address(buf: pa.Buffer | None) -> int | None:
    return buf.address if buf is not None else None


def _bytes_col(arr: pa.Array) -> _BytesCol:
    validity, offsets, data = arr.buffers()[:3]
    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    return _BytesCol(_address(validity) if arr.null_count else None, _address(offsets),
                     _address(data) or 0, arr.offset, int(large))


def _headers_col(arr: pa.Array) -> _HeadersCol:
    validity, offsets = arr.buffers()[:2]
    large = pa.types.is_large_list(arr.type)
    entries = arr.values
    return _HeadersCol(_address(validity) if arr.null_count else None, _address(offsets), arr.offset, int(large),
                       _address(entries.buffers()[0]) if entries.null_count else None, entries.offset,
                       _bytes_col(entries.field(0)), _bytes_col(entries.field(1)))


_NATIVE_FUNCS: Any = None


def _native() -> Any:
    """The encode kernels with their ctypes signatures, or None (pure-Python fallback)."""
    global _NATIVE_FUNCS
    if _NATIVE_FUNCS is None:
        lib = native.load("encode")
        if lib is None:
            _NATIVE_FUNCS = False
        else:
            p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
            lib.strom_partitions.argtypes = [p, p, i64, i32, i32, p, p]
            lib.strom_partitions.restype = ctypes.c_int
            lib.strom_group_by_partition.argtypes = [p, i64, i32, p, p]
            lib.strom_group_by_partition.restype = None
            lib.strom_encode_records.argtypes = [p, i64, p, p, p, i64, p, i64, p, p]
            lib.strom_encode_records.restype = ctypes.c_int
            lib.strom_murmur2.argtypes = [p, i64]
            lib.strom_murmur2.restype = ctypes.c_int32
            _NATIVE_FUNCS = lib
    return _NATIVE_FUNCS or None


# --- the encoded result ---------------------------------------------------------------------


@dataclass
class EncodedBatch:
    """One record batch without its producer fields: ``wire`` stamps those (they enter the CRC)."""

    records: bytes | pa.Buffer  # the records section, compressed when ``attributes`` say so
    count: int
    attributes: int
    timestamp_ms: int

    @property
    def size(self) -> int:
        return HEADER_SIZE + len(self.records)

    def header(self, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool = False) -> bytes:
        """The 61-byte header for these records, CRC-32C (over bytes 21..end) included."""
        attributes = self.attributes | TRANSACTIONAL_MASK if transactional else self.attributes
        header = bytearray(HEADER.pack(
            0, HEADER_SIZE - LOG_OVERHEAD + len(self.records), NO_PARTITION_LEADER_EPOCH, MAGIC_V2, 0,
            attributes, self.count - 1, self.timestamp_ms, self.timestamp_ms, producer_id, producer_epoch,
            base_sequence, self.count))
        crc = crc32c.crc32c(self.records, crc32c.crc32c(memoryview(header)[CRC_START:]))
        _U32.pack_into(header, CRC_POS, crc)
        return bytes(header)

    def wire(self, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        """The batch as sent: header + records."""
        return b"".join((self.header(producer_id, producer_epoch, base_sequence), self.records))


# --- column access --------------------------------------------------------------------------


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    for i, f in enumerate(batch.schema):
        if f.name.lower() == name:
            col = batch.column(i)
            if pa.types.is_null(col.type):
                return None if name != "value" else pa.nulls(len(col), pa.binary())
            if pa.types.is_dictionary(col.type):
                col = col.dictionary_decode()
            return col
    return None


@dataclass
class _Columns:
    keys: pa.Array | None
    values: pa.Array
    parts: pa.Array | None
    headers: pa.Array | None

    @classmethod
    def of(cls, batch: pa.RecordBatch) -> _Columns:
        values = _column(batch, "value")
        assert values is not None, "validate_sink_schema guarantees a value column"
        return cls(_column(batch, "key"), values, _column(batch, "partition"), _column(batch, "headers"))

    def take(self, indices: pa.Array) -> _Columns:
        return _Columns(*(c.take(indices) if c is not None else None
                          for c in (self.keys, self.values, self.parts, self.headers)))

    def pylists(self) -> tuple[list[Any] | None, list[Any], list[Any] | None]:
        """Keys, values and headers as Python lists, made once (the pure-Python path only)."""
        cached = self.__dict__.get("_pylists")
        if cached is None:
            cached = self.__dict__["_pylists"] = (
                self.keys.to_pylist() if self.keys is not None else None,
                self.values.to_pylist(),
                self.headers.to_pylist() if self.headers is not None else None,
            )
        return cached


# --- the encoder ----------------------------------------------------------------------------


class BatchEncoder:
    """Encodes the rows of one write task, keeping the sticky null-key partition per topic."""

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE, compression: str = "none", *,
                 use_native: bool = True, sticky_start: int | None = None,
                 clock: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        if compression not in COMPRESSION_TYPES:
            raise StromOptionError(
                f"Option 'kafka.compression.type' must be one of {', '.join(COMPRESSION_TYPES)}, got {compression!r}.")
        if batch_size <= HEADER_SIZE:
            raise StromOptionError(f"Option 'kafka.batch.size' must be more than {HEADER_SIZE}, got {batch_size}.")
        self.limit = batch_size - HEADER_SIZE
        self.compression = COMPRESSION_TYPES[compression]
        self.lib = _native() if use_native else None
        self.sticky_start = random.randrange(1 << 30) if sticky_start is None else sticky_start
        self._sticky: dict[str, int] = {}
        self.clock = clock

    def encode(self, batch: pa.RecordBatch, topic: str | None,
               partitions_of: Callable[[str], int]) -> Iterator[tuple[str, int, EncodedBatch]]:
        """(topic, partition, batch) for every record batch the rows make.

        ``topic`` is the sink's topic option (it wins over a topic column); ``partitions_of``
        gives a topic's partition count (metadata)."""
        if batch.num_rows == 0:
            return
        cols = _Columns.of(batch)
        if topic is not None:
            yield from self._encode_topic(topic, cols, partitions_of(topic))
            return
        topics = _column(batch, "topic")
        if topics is None or topics.null_count:
            raise StromOptionError("Null topic present in the data. Use the 'topic' option for setting a topic.")
        names = pc.unique(topics).to_pylist()
        if len(names) == 1:
            yield from self._encode_topic(names[0], cols, partitions_of(names[0]))
            return
        for name in names:
            indices = pc.indices_nonzero(pc.equal(topics, name))
            yield from self._encode_topic(name, cols.take(indices), partitions_of(name))

    def _sticky_partition(self, topic: str, num_partitions: int) -> int:
        turn = self._sticky.get(topic, self.sticky_start)
        self._sticky[topic] = turn + 1
        return turn % num_partitions

    def _encode_topic(self, topic: str, cols: _Columns, num_partitions: int) -> Iterator[tuple[str, int, EncodedBatch]]:
        n = len(cols.values)
        null_key = self._sticky_partition(topic, num_partitions)
        timestamp = self.clock()
        if self.lib is not None:
            groups = self._group_native(topic, cols, n, num_partitions, null_key)
        else:
            groups = self._group_python(topic, cols, n, num_partitions, null_key)
        for partition, rows in groups:
            for records, count in self._encode_rows(cols, rows):
                if self.compression != COMPRESSION_NONE:
                    records = compress(self.compression, memoryview(records))
                yield topic, partition, EncodedBatch(records, count, self.compression, timestamp)

    # partitioning

    def _group_native(self, topic: str, cols: _Columns, n: int, num_partitions: int,
                      null_key: int) -> list[tuple[int, tuple[pa.Buffer, int, int]]]:
        lib = self.lib
        parts = pa.allocate_buffer(4 * n)
        bad = ctypes.c_int64(0)
        keys = ctypes.byref(_bytes_col(cols.keys)) if cols.keys is not None else None
        part_col = None
        if cols.parts is not None:
            pv, pd = cols.parts.buffers()[:2]
            part_col = ctypes.byref(_IntCol(_address(pv) if cols.parts.null_count else None,
                                            _address(pd), cols.parts.offset))
        rc = lib.strom_partitions(keys, part_col, n, num_partitions, null_key, parts.address, ctypes.byref(bad))
        if rc == _BAD_PARTITION:
            raise SinkDataError(self._bad_partition(topic, cols.parts[bad.value].as_py(), num_partitions))
        rows = pa.allocate_buffer(4 * n)
        starts = (ctypes.c_int64 * (num_partitions + 1))()
        lib.strom_group_by_partition(parts.address, n, num_partitions, rows.address, starts)
        return [(p, (rows, starts[p], starts[p + 1])) for p in range(num_partitions) if starts[p + 1] > starts[p]]

    def _group_python(self, topic: str, cols: _Columns, n: int, num_partitions: int,
                      null_key: int) -> list[tuple[int, tuple[pa.Buffer, int, int]]]:
        keys = cols.pylists()[0] or [None] * n
        explicit = cols.parts.to_pylist() if cols.parts is not None else [None] * n
        grouped: dict[int, list[int]] = {}
        for i in range(n):
            p = explicit[i]
            if p is not None:
                if not 0 <= p < num_partitions:
                    raise SinkDataError(self._bad_partition(topic, p, num_partitions))
            elif keys[i] is None:
                p = null_key
            else:
                k = keys[i]
                p = key_partition(k.encode() if isinstance(k, str) else k, num_partitions)
            grouped.setdefault(p, []).append(i)
        out = []
        for p in sorted(grouped):
            rows = grouped[p]
            out.append((p, (pa.py_buffer(struct.pack(f"<{len(rows)}i", *rows)), 0, len(rows))))
        return out

    @staticmethod
    def _bad_partition(topic: str, partition: int, num_partitions: int) -> str:
        return (f"Row for {topic}-{partition}: topic {topic} has {num_partitions} partitions "
                f"(0..{num_partitions - 1}); UNKNOWN_TOPIC_OR_PARTITION.")

    # records

    def _encode_rows(self, cols: _Columns, span: tuple[pa.Buffer, int, int]) -> Iterator[tuple[Any, int]]:
        rows, start, end = span
        if self.lib is None:
            yield from _encode_rows_python(cols, rows, start, end, self.limit)
            return
        keys = ctypes.byref(_bytes_col(cols.keys)) if cols.keys is not None else None
        values = ctypes.byref(_bytes_col(cols.values))
        headers = ctypes.byref(_headers_col(cols.headers)) if cols.headers is not None else None
        out_len, out_rows = ctypes.c_int64(0), ctypes.c_int64(0)
        pos = start
        while pos < end:
            cap = self.limit
            while True:
                out = pa.allocate_buffer(cap, resizable=True)
                rc = self.lib.strom_encode_records(rows.address + 4 * pos, end - pos, keys, values, headers,
                                                   self.limit, out.address, cap,
                                                   ctypes.byref(out_len), ctypes.byref(out_rows))
                if rc != _BUFFER_TOO_SMALL:
                    break
                cap = out_len.value
            if rc == _NULL_HEADER_KEY:
                raise SinkDataError("A header without a key: Kafka record headers need a key.")
            out.resize(out_len.value)
            pos += out_rows.value
            # A slice, not the resized buffer itself: pyarrow exports a shrunken resizable buffer with
            # its old capacity as the shape, so a memoryview of a memoryview of it (or a slice of one)
            # would reach past the records. A slice exports exactly its size.
            yield out.slice(0, out_len.value), out_rows.value


# --- pure-Python records encoding (the fallback, and the reference in tests) ------------------


def _zigzag(v: int) -> bytes:
    """A signed varint as v2 records write it: zig-zag, then the unsigned varint."""
    return uvarint((v << 1) ^ (v >> 63))


def _field(data: bytes | None) -> bytes:
    return _zigzag(-1) if data is None else _zigzag(len(data)) + data


def _as_bytes(v: Any) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


def encode_record(offset_delta: int, key: bytes | None, value: bytes | None,
                  headers: list[tuple[str, bytes | None]]) -> bytes:
    """One v2 record (length-prefixed), timestamp delta 0."""
    body = bytearray(b"\x00\x00")  # attributes, timestamp delta
    body += _zigzag(offset_delta) + _field(key) + _field(value) + _zigzag(len(headers))
    for hk, hv in headers:
        body += _field(hk.encode()) + _field(hv)
    return _zigzag(len(body)) + bytes(body)


def _encode_rows_python(cols: _Columns, rows_buf: pa.Buffer, start: int, end: int,
                        limit: int) -> Iterator[tuple[bytes, int]]:
    rows = struct.unpack_from(f"<{end - start}i", rows_buf, 4 * start)
    keys, values, headers = cols.pylists()
    out = bytearray()
    count = 0
    for row in rows:
        entries = []
        for h in (headers[row] or []) if headers is not None else []:
            if h is None or h["key"] is None:
                raise SinkDataError("A header without a key: Kafka record headers need a key.")
            entries.append((h["key"], _as_bytes(h["value"])))
        record = encode_record(count, _as_bytes(keys[row]) if keys is not None else None,
                               _as_bytes(values[row]), entries)
        if count and len(out) + len(record) > limit:
            yield bytes(out), count
            out = bytearray()
            count = 0
            record = encode_record(0, _as_bytes(keys[row]) if keys is not None else None,
                                   _as_bytes(values[row]), entries)
        out += record
        count += 1
    if count:
        yield bytes(out), count
