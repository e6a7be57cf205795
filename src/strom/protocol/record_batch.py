"""Kafka v2 RecordBatch header codec.

The broker's hot path never decodes individual records: everything it needs
(offset range, timestamps, producer id/epoch/sequence, record count, codec) is
in the fixed 61-byte batch header.  This module parses that header with one
``struct.unpack_from`` call and provides the few in-place edits the broker makes
(assigning offsets, stamping the leader epoch, LogAppendTime).

Layout (big-endian)::

    0  baseOffset            int64   \\ outside the CRC
    8  batchLength           int32    | (bytes after this field)
    12 partitionLeaderEpoch  int32   /
    16 magic                 int8
    17 crc                   uint32  CRC-32C of bytes 21..end
    21 attributes            int16
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records...
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

import crc32c
from kafka.errors import CorruptRecordError, UnsupportedForMessageFormatError

Buffer = bytes | bytearray | memoryview

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # smallest legal batchLength (49)
MAGIC_V2 = 2

BASE_OFFSET_POS = 0
LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
LAST_OFFSET_DELTA_POS = 23
BASE_TIMESTAMP_POS = 27
MAX_TIMESTAMP_POS = 35
PRODUCER_ID_POS = 43
CRC_START = ATTRIBUTES_POS

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1

CREATE_TIME = 0
LOG_APPEND_TIME = 1

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_LENGTH_PREFIX = struct.Struct(">qi")  # baseOffset + batchLength, enough to walk a buffer


class RecordBatchHeader:
    """Decoded 61-byte header of one batch found at ``position`` in some buffer or file.

    A plain slotted class rather than a dataclass: it is created once per batch on
    the produce path, so construction cost matters.
    """

    __slots__ = (
        "position",
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
    )

    def __init__(self, position: int, fields: tuple[int, ...]) -> None:
        self.position = position
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = fields

    @property
    def size(self) -> int:
        """Total bytes of the batch including the 12-byte log overhead."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def end(self) -> int:
        """Position just past this batch."""
        return self.position + self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap at Int.MAX like Kafka's."""
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    def __repr__(self) -> str:
        return (
            f"RecordBatchHeader(pos={self.position}, offsets={self.base_offset}..{self.last_offset}, "
            f"size={self.size}, magic={self.magic}, count={self.records_count}, "
            f"pid={self.producer_id}, epoch={self.producer_epoch}, seq={self.base_sequence})"
        )


def parse_header(buf: Buffer, position: int = 0) -> RecordBatchHeader:
    """Parse the batch header at ``position``; no validation beyond having 61 bytes."""
    if len(buf) - position < HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch header at position {position} truncated: "
            f"{len(buf) - position} bytes available, {HEADER_SIZE} needed"
        )
    return RecordBatchHeader(position, HEADER.unpack_from(buf, position))


def iter_batches(buf: Buffer, start: int = 0, end: int | None = None) -> Iterator[RecordBatchHeader]:
    """Walk the batches of a buffer, checking length bounds and magic but not CRCs.

    Raises ``CorruptRecordError`` for a truncated or malformed batch and
    ``UnsupportedForMessageFormatError`` for magic 0/1 (legacy message sets).
    """
    limit = len(buf) if end is None else end
    pos = start
    while pos < limit:
        if limit - pos < LOG_OVERHEAD + 5:
            raise CorruptRecordError(f"truncated record batch at position {pos}: {limit - pos} bytes left")
        _, length = _LENGTH_PREFIX.unpack_from(buf, pos)
        magic = buf[pos + MAGIC_POS]
        if magic != MAGIC_V2:
            if magic in (0, 1):
                raise UnsupportedForMessageFormatError(
                    f"message format v{magic} at position {pos} is not supported; only v2 record batches"
                )
            raise CorruptRecordError(f"invalid magic {magic} at position {pos}")
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"record batch at position {pos} has invalid length {length}")
        if pos + LOG_OVERHEAD + length > limit:
            raise CorruptRecordError(
                f"record batch at position {pos} claims {length + LOG_OVERHEAD} bytes "
                f"but only {limit - pos} remain"
            )
        header = RecordBatchHeader(pos, HEADER.unpack_from(buf, pos))
        yield header
        pos = header.end


def compute_crc(buf: Buffer, position: int = 0, size: int | None = None) -> int:
    """CRC-32C of a batch (attributes..end) located at ``position``."""
    if size is None:
        size = _LENGTH_PREFIX.unpack_from(buf, position)[1] + LOG_OVERHEAD
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    return crc32c.crc32c(view[position + CRC_START : position + size])


def compute_crc_split(header: Buffer, body: Buffer) -> int:
    """CRC-32C of a batch held as a (61-byte header, records body) pair.

    Lets the log rewrite a header into a small new buffer and still write the
    body straight from the producer's request buffer without copying it.
    """
    return crc32c.crc32c(body, crc32c.crc32c(memoryview(header)[CRC_START:HEADER_SIZE]))


def is_crc_valid(buf: Buffer, header: RecordBatchHeader) -> bool:
    return compute_crc(buf, header.position, header.size) == header.crc


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Assign offsets in place; baseOffset lies outside the CRC so none is recomputed."""
    _I64.pack_into(buf, position + BASE_OFFSET_POS, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Stamp the leader epoch in place; also outside the CRC."""
    _I32.pack_into(buf, position + PARTITION_LEADER_EPOCH_POS, epoch)


def new_epoch_starts(records: bytes | memoryview, latest_epoch: int | None, max_epoch: int) -> list[tuple[int, int]]:
    """``(epoch, base offset)`` of each leader epoch the batches start beyond ``latest_epoch``.

    Reads only the batch headers. The partition leader epoch lies outside the CRC, so epochs above
    ``max_epoch`` (the current leader's, which no batch can exceed) are ignored, not trusted.
    """
    view = records if isinstance(records, memoryview) else memoryview(records)
    starts: list[tuple[int, int]] = []
    latest = -1 if latest_epoch is None else latest_epoch
    pos = 0
    while pos + PARTITION_LEADER_EPOCH_POS + 4 <= len(view):
        base_offset = _I64.unpack_from(view, pos + BASE_OFFSET_POS)[0]
        length = _I32.unpack_from(view, pos + BASE_OFFSET_POS + 8)[0]
        epoch = _I32.unpack_from(view, pos + PARTITION_LEADER_EPOCH_POS)[0]
        if length <= 0:
            break
        if latest < epoch <= max_epoch:
            starts.append((epoch, base_offset))
            latest = epoch
        pos += 12 + length
    return starts


def set_log_append_time(buf: bytearray | memoryview, position: int, timestamp_ms: int) -> None:
    """Switch a batch to LogAppendTime: set attribute bit 3 and maxTimestamp, recompute the CRC.

    Like Kafka, baseTimestamp and record deltas are left alone; consumers use
    maxTimestamp for every record of a LogAppendTime batch.
    """
    (attributes,) = _I16.unpack_from(buf, position + ATTRIBUTES_POS)
    _I16.pack_into(buf, position + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, position + MAX_TIMESTAMP_POS, timestamp_ms)
    _U32.pack_into(buf, position + CRC_POS, compute_crc(buf, position))


def rewrite_header(
    src: Buffer,
    position: int,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None = None,
    body: Buffer | None = None,
) -> bytearray:
    """Return a fresh copy of the 61-byte header at ``position`` with offsets/epoch assigned.

    With ``log_append_time_ms`` the copy also gets the LogAppendTime attribute,
    the new maxTimestamp and a CRC computed over the new header plus ``body``.
    """
    header = bytearray(src[position : position + HEADER_SIZE])
    _I64.pack_into(header, BASE_OFFSET_POS, base_offset)
    _I32.pack_into(header, PARTITION_LEADER_EPOCH_POS, leader_epoch)
    if log_append_time_ms is not None:
        (attributes,) = _I16.unpack_from(header, ATTRIBUTES_POS)
        _I16.pack_into(header, ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_MASK)
        _I64.pack_into(header, MAX_TIMESTAMP_POS, log_append_time_ms)
        _U32.pack_into(header, CRC_POS, compute_crc_split(header, body if body is not None else b""))
    return header


def build_batch(
    records: Iterable[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes]], int]],
    *,
    base_offset: int = 0,
    compression: int = COMPRESSION_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    partition_leader_epoch: int | None = None,
) -> bytes:
    """Encode ``(key, value, headers, timestamp_ms)`` records as one v2 batch, producer style.

    Used by tests and tools; the broker itself never builds batches from records.
    Relies on kafka-python's builder so the bytes are exactly what a real client sends.
    """
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        MAGIC_V2, compression, is_transactional, producer_id, producer_epoch, base_sequence, 2**31 - 1
    )
    count = 0
    for key, value, headers, timestamp in records:
        builder.append(count, timestamp, key, value, list(headers))
        count += 1
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    out = bytearray(builder.build())
    if base_offset:
        set_base_offset(out, 0, base_offset)
    if partition_leader_epoch is not None:
        set_partition_leader_epoch(out, 0, partition_leader_epoch)
    return bytes(out)


# Control records (transaction markers): key = int16 version + int16 type, value = int16
# version + int32 coordinator epoch. Control batches hold one record and are never compressed.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def build_control_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                        timestamp_ms: int, base_offset: int = 0) -> bytes:
    """A v2 transaction marker batch (COMMIT or ABORT) as the coordinator's WriteTxnMarkers writes it.

    Hand-encoded: a marker is one tiny fixed-shape record, and kafka-python's builder cannot set
    the control attribute."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    # attributes 0, timestamp delta 0, offset delta 0 (zigzag varints of 0), key, value, no headers
    body = b"\x00\x00\x00" + bytes([len(key) << 1]) + key + bytes([len(value) << 1]) + value + b"\x00"
    record = bytes([len(body) << 1]) + body
    attributes = TRANSACTIONAL_MASK | CONTROL_MASK
    length = HEADER_SIZE - LOG_OVERHEAD + len(record)
    out = bytearray(HEADER.pack(base_offset, length, NO_PARTITION_LEADER_EPOCH, MAGIC_V2, 0, attributes, 0,
                                timestamp_ms, timestamp_ms, producer_id, producer_epoch, NO_SEQUENCE, 1))
    out += record
    _U32.pack_into(out, CRC_POS, compute_crc(out, 0, len(out)))
    return bytes(out)


def read_control_marker(buf: Buffer, position: int = 0) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of the control batch at ``position``; None if not a marker.

    Only the first record is read (a control batch holds one); unknown key versions or types
    (Kafka reserves other control types) give None, so callers treat them as opaque."""
    try:
        pos = position + HEADER_SIZE
        _length, pos = read_varint(buf, pos)
        pos += 1  # attributes
        _, pos = read_varint(buf, pos)  # timestamp delta
        _, pos = read_varint(buf, pos)  # offset delta
        key_len, pos = read_varint(buf, pos)
        ctype = transaction_marker_type(buf[pos:pos + key_len]) if key_len >= 0 else None
        if ctype is None:
            return None
        pos += key_len
        value_len, pos = read_varint(buf, pos)
        epoch = _CONTROL_VALUE.unpack_from(buf, pos)[1] if value_len >= 6 else -1
        return ctype, epoch
    except (struct.error, ValueError):
        return None


def transaction_marker_type(key: Buffer | None) -> int | None:
    """CONTROL_COMMIT or CONTROL_ABORT for a control record's key; None for any other key (Kafka
    reserves further control types and key versions, which are not transaction markers)."""
    if key is None or len(key) < _CONTROL_KEY.size:
        return None
    version, ctype = _CONTROL_KEY.unpack_from(key)
    return ctype if version == 0 and ctype in (CONTROL_ABORT, CONTROL_COMMIT) else None


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zig-zag varint as v2 record fields use them: (value, position after it); ValueError if cut."""
    raw = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("record ends inside a varint")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint is longer than 10 bytes")
