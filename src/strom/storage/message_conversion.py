"""Message format conversion: magic 0/1 message sets (clients before Kafka 0.11) to v2 record
batches on append, and v2 batches back to magic 0/1 for old fetchers.

The log stores v2 batches only, as Kafka 3.x does once its inter-broker protocol is 3.0 or newer:
a produce request in message format v0/v1 is validated as Kafka validates it (CRC-32 of every
message, sizes, timestamps, one level of compression) and appended as one v2 batch in the
codec the producer used. Old fetchers get the opposite conversion (``down_convert``), one fetched
chunk at a time. Both run in worker threads: inflating a wrapper message can take a while.

A legacy message: ``offset int64, size int32, crc uint32, magic int8, attributes int8,
[timestamp int64 (magic 1)], key bytes, value bytes``. A compressed message (a wrapper) carries
a whole message set as its value; in magic 1 the inner offsets are relative (0..n-1) and the
wrapper's offset is the last inner one. Decompression goes through the bounded
``DecompressedStream`` (no whole-buffer inflate of a possible compression bomb).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace

import lz4.frame
from kafka.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageSizeTooLargeError,
)
from kafka.record.legacy_records import LegacyRecordBase, LegacyRecordBatchBuilder

from strom.protocol.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    STREAM_CHUNK,
    CorruptCompressedDataError,
    DecompressedStream,
    StreamCompressor,
)
from strom.protocol.record_batch import (
    MAGIC_POS,
    NO_TIMESTAMP,
    Buffer,
    RecordBatchHeader,
    build_batch,
    iter_batches,
)
from strom.protocol.record_stream import iter_records
from strom.storage.log_config import LONG_MAX, LogConfig
from strom.storage.recompression import recompress

MAGIC_V0, MAGIC_V1 = 0, 1
_OFFSET_SIZE = struct.Struct(">qi")
_HEADER_V0 = LegacyRecordBase.HEADER_STRUCT_V0  # offset, size, crc, magic, attributes
_HEADER_V1 = LegacyRecordBase.HEADER_STRUCT_V1  # ... + timestamp
_LOG_OVERHEAD = LegacyRecordBase.LOG_OVERHEAD  # offset + size
_CRC_START = LegacyRecordBase.MAGIC_OFFSET  # the CRC covers magic..end
_I32 = struct.Struct(">i")
# Smallest message body (after offset and size): crc, magic, attributes, key and value lengths.
_MIN_BODY = {MAGIC_V0: _HEADER_V0.size - _LOG_OVERHEAD + 8, MAGIC_V1: _HEADER_V1.size - _LOG_OVERHEAD + 8}
_CODEC_MASK = LegacyRecordBase.CODEC_MASK
_TIMESTAMP_TYPE_MASK = LegacyRecordBase.TIMESTAMP_TYPE_MASK
_CODEC_NAMES = {CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4"}
# Decompressed bytes one produce request's partition may inflate to: the records are held while
# the v2 batch is built, so a compression bomb must stop somewhere (Kafka has no such limit).
MAX_INFLATED_BYTES = 64 * 1024 * 1024
_LZ4_MAGIC = b"\x04\x22\x4d\x18"  # an LZ4 frame's first four bytes


@dataclass(slots=True)
class LegacyRecord:
    """One message of a v0/v1 message set, with its absolute (or, inside a wrapper, final) offset."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def legacy_magic(records: Buffer | None) -> int | None:
    """The message format of a produce request's records when it is v0 or v1, else None (one byte read:
    this is all the modern path pays)."""
    if records is None or len(records) <= MAGIC_POS:
        return None
    magic = records[MAGIC_POS]
    return magic if magic < 2 else None


@dataclass(slots=True)
class UpConverted:
    records: bytes | bytearray
    messages: int  # converted records (ProduceMessageConversionsPerSec)


def up_convert(records: Buffer, config: LogConfig, now_ms: int) -> UpConverted:
    """Validate a v0/v1 message set and return it as one v2 batch (Kafka's conversion on append).

    Raises the Kafka error the partition answers with; nothing is appended then."""
    view = memoryview(records).cast("B") if not isinstance(records, memoryview) else records
    parsed: list[LegacyRecord] = []
    codec = CODEC_NONE
    inflated = 0
    check_time = not config.log_append_time and (
        config.timestamp_before_max_ms < LONG_MAX or config.timestamp_after_max_ms < LONG_MAX)
    for pos, magic, attributes, timestamp, key, value, size in _messages(view, 0, len(view), None):
        if size > config.max_message_bytes:
            raise MessageSizeTooLargeError(
                f"message of {size} bytes at position {pos} exceeds max.message.bytes={config.max_message_bytes}")
        wrapper_codec = attributes & _CODEC_MASK
        if wrapper_codec == CODEC_NONE:
            _check_timestamp(magic, timestamp, config, now_ms, check_time)
            parsed.append(LegacyRecord(len(parsed), timestamp if magic else NO_TIMESTAMP, key, value))
            continue
        if wrapper_codec not in _CODEC_NAMES:
            raise CorruptRecordError(f"message at position {pos} names unknown compression codec {wrapper_codec}")
        if value is None:
            raise InvalidRecordError(f"compressed message at position {pos} has a null value")
        codec = wrapper_codec
        inner = _inflate(wrapper_codec, magic, value, MAX_INFLATED_BYTES - inflated, pos)
        inflated += len(inner)
        count = 0
        for ipos, imagic, iattrs, its, ikey, ivalue, _ in _messages(memoryview(inner), 0, len(inner), magic):
            if iattrs & _CODEC_MASK:
                raise InvalidRecordError(f"compressed message at position {pos} holds a compressed message "
                                         f"(at {ipos} of its value): only one level of compression is allowed")
            if magic and attributes & _TIMESTAMP_TYPE_MASK:
                its = timestamp  # a LogAppendTime wrapper stamps its messages
            _check_timestamp(imagic, its, config, now_ms, check_time)
            parsed.append(LegacyRecord(len(parsed), its if imagic else NO_TIMESTAMP, ikey, ivalue))
            count += 1
        if count == 0:
            raise InvalidRecordError(f"compressed message at position {pos} holds no messages")
    if not parsed:
        raise InvalidRecordError("produce request contains no messages")
    batch: bytes | bytearray = build_batch((r.key, r.value, (), r.timestamp) for r in parsed)
    if codec != CODEC_NONE:
        target = replace(config, compression_type=_CODEC_NAMES[codec])
        view2 = memoryview(batch)
        compressed = recompress(view2, list(iter_batches(view2)), target)
        if compressed is not None:
            batch = compressed
    if len(batch) > config.max_message_bytes:
        raise MessageSizeTooLargeError(
            f"converted record batch of {len(batch)} bytes exceeds max.message.bytes={config.max_message_bytes}")
    return UpConverted(batch, len(parsed))


def _check_timestamp(magic: int, timestamp: int, config: LogConfig, now_ms: int, check: bool) -> None:
    if magic == MAGIC_V0 or not check or timestamp == NO_TIMESTAMP:
        return
    if timestamp < now_ms - config.timestamp_before_max_ms or timestamp > now_ms + config.timestamp_after_max_ms:
        raise InvalidTimestampError(f"timestamp {timestamp} of a message is out of range (message.timestamp.*.max.ms)")


def _messages(view: memoryview, start: int, end: int, wrapper_magic: int | None
              ) -> Iterator[tuple[int, int, int, int, bytes | None, bytes | None, int]]:
    """(position, magic, attributes, timestamp, key, value, size) of each message, CRC checked.
    Inside a wrapper, every message must have the wrapper's magic (as Kafka requires)."""
    pos = start
    first_magic: int | None = wrapper_magic
    while pos < end:
        if end - pos < _LOG_OVERHEAD + 5:
            raise CorruptRecordError(f"truncated message at position {pos}: {end - pos} bytes left")
        _offset, size = _OFFSET_SIZE.unpack_from(view, pos)
        magic = view[pos + _CRC_START]
        if magic not in (MAGIC_V0, MAGIC_V1):
            raise CorruptRecordError(f"message at position {pos} has magic {magic} in a v0/v1 message set")
        if first_magic is None:
            first_magic = magic
        elif magic != first_magic:
            raise InvalidRecordError(f"message at position {pos} has magic {magic}, the set has {first_magic}")
        if size < _MIN_BODY[magic]:
            raise CorruptRecordError(f"message at position {pos} has invalid size {size}")
        stop = pos + _LOG_OVERHEAD + size
        if stop > end:
            raise CorruptRecordError(f"message at position {pos} claims {size} bytes but only "
                                     f"{end - pos - _LOG_OVERHEAD} remain")
        if magic == MAGIC_V0:
            _, _, crc, _, attributes = _HEADER_V0.unpack_from(view, pos)
            timestamp, kpos = NO_TIMESTAMP, pos + _HEADER_V0.size
        else:
            _, _, crc, _, attributes, timestamp = _HEADER_V1.unpack_from(view, pos)
            kpos = pos + _HEADER_V1.size
        if zlib.crc32(view[pos + _CRC_START:stop]) != crc:
            raise CorruptRecordError(f"message at position {pos} failed its CRC-32 check")
        key, vpos = _read_bytes(view, kpos, stop, pos)
        value, after = _read_bytes(view, vpos, stop, pos)
        if after != stop:
            raise CorruptRecordError(f"message at position {pos} has {stop - after} bytes after its value")
        yield pos, magic, attributes, timestamp, key, value, size + _LOG_OVERHEAD
        pos = stop


def _read_bytes(view: memoryview, pos: int, stop: int, msg: int) -> tuple[bytes | None, int]:
    if pos + 4 > stop:
        raise CorruptRecordError(f"message at position {msg} is truncated")
    (n,) = _I32.unpack_from(view, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > stop:
        raise CorruptRecordError(f"message at position {msg} has a field running past its end")
    return bytes(view[pos:pos + n]), pos + n


def _inflate(codec: int, magic: int, payload: bytes, limit: int, pos: int) -> bytes:
    """A wrapper's value decompressed a chunk at a time, refusing more than ``limit`` bytes."""
    if codec == CODEC_LZ4 and magic == MAGIC_V0:
        payload = _lz4_fix_header_checksum(payload)
    out = bytearray()
    try:
        with DecompressedStream(codec, payload) as stream:
            while chunk := stream.read_some(STREAM_CHUNK):
                out += chunk
                if len(out) > limit:
                    raise MessageSizeTooLargeError(
                        f"compressed message at position {pos} inflates past {MAX_INFLATED_BYTES} bytes")
    except CorruptCompressedDataError as e:
        raise CorruptRecordError(f"compressed message at position {pos} cannot be read: {e}") from e
    return bytes(out)


def _lz4_fix_header_checksum(payload: bytes) -> bytes:
    """Kafka 0.8-0.10.0 clients computed the LZ4 frame header checksum over the wrong bytes; Kafka
    ignores that checksum for magic 0, so the frame gets the right one before it is decoded."""
    return _with_lz4_header_checksum(payload, broken=False)


def lz4_broken_header_checksum(frame: bytes) -> bytes:
    """An LZ4 frame with the header checksum Kafka 0.8-0.10.0 clients compute and check (KAFKA-3160, KIP-57):
    over the magic number and the descriptor instead of the descriptor alone. Kafka writes it into every
    magic-0 LZ4 wrapper so that those clients, which reject the correct one, can read it; magic 1 keeps the
    correct checksum."""
    return _with_lz4_header_checksum(frame, broken=True)


def _with_lz4_header_checksum(frame: bytes, broken: bool) -> bytes:
    """The frame with its header checksum byte recomputed: the second byte of the XXH32 (seed 0) of the
    descriptor (or, broken, of the magic number and the descriptor), which the lz4 library computes as the
    content checksum of a frame holding those bytes. A frame that is not LZ4 is returned as it is."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        return frame
    header_len = 7 + (8 if frame[4] & 0x08 else 0)  # the content size is optional
    if len(frame) < header_len:
        return frame
    covered = frame[0 if broken else 4:header_len - 1]
    probe = lz4.frame.compress(covered, content_checksum=True, store_size=False)
    xxh32 = int.from_bytes(probe[-4:], "little")
    return bytes(frame[:header_len - 1]) + bytes([(xxh32 >> 8) & 0xFF]) + frame[header_len:]


def down_convert(batches: Buffer, magic: int, first_offset: int = 0) -> tuple[bytes, int]:
    """v2 batches as a v0/v1 message set (Kafka's down-conversion for old fetchers): control batches
    are dropped and headers lost (old readers cannot see either, as with Kafka), a compressed batch
    becomes one wrapper message in the same codec (zstd never reaches an old fetcher: Kafka answers
    UNSUPPORTED_COMPRESSION_TYPE first). Returns the message set and the number of converted records.
    A trailing partial batch (cut by the fetch's size limit) is left out.

    Records of an uncompressed batch below ``first_offset`` (the fetch offset) are dropped, as Kafka
    drops them: an uncompressed v0/v1 message stands alone, and some old clients take the first message
    they get for the one at their fetch offset. A compressed batch stays whole (one wrapper message)."""
    view = memoryview(batches).cast("B") if not isinstance(batches, memoryview) else batches
    out = bytearray()
    count = 0
    for h in _whole_batches(view):
        if h.is_control:
            continue
        records = list(iter_records(view, h.position))
        codec = h.compression if h.compression in _CODEC_NAMES else CODEC_NONE
        if codec == CODEC_NONE and records and records[0].offset < first_offset:
            records = [r for r in records if r.offset >= first_offset]
        if not records:
            continue
        log_append = h.timestamp_type == 1
        inner = LegacyRecordBatchBuilder(magic, CODEC_NONE, 2**31 - 1)
        relative = codec != CODEC_NONE and magic == MAGIC_V1
        for r in records:
            ts = h.max_timestamp if log_append else r.timestamp
            inner.append(r.offset - records[0].offset if relative else r.offset, ts, r.key, r.value)
        message_set = inner.build()
        if log_append and magic == MAGIC_V1:
            _mark_log_append_time(message_set)
        if codec == CODEC_NONE:
            out += message_set
        else:
            compressor = StreamCompressor(codec)
            value = bytes(compressor.compress(bytes(message_set))) + compressor.flush()
            if codec == CODEC_LZ4 and magic == MAGIC_V0:
                value = lz4_broken_header_checksum(value)
            wrapper_builder = LegacyRecordBatchBuilder(magic, CODEC_NONE, 2**31 - 1)
            wrapper_builder.append(records[-1].offset, h.max_timestamp, None, value)
            wrapper = wrapper_builder.build()
            wrapper[_CRC_START + 1] = codec | (_TIMESTAMP_TYPE_MASK if log_append and magic else 0)
            struct.pack_into(">I", wrapper, _LOG_OVERHEAD, zlib.crc32(memoryview(wrapper)[_CRC_START:]))
            out += wrapper
        count += len(records)
    return bytes(out), count


def _mark_log_append_time(message_set: bytearray) -> None:
    """Set the LogAppendTime bit of each v1 message (CRC recomputed), as Kafka writes converted messages of a
    LogAppendTime batch: an old consumer reports the timestamp type the topic has."""
    pos = 0
    while pos + _LOG_OVERHEAD <= len(message_set):
        (_, size) = _OFFSET_SIZE.unpack_from(message_set, pos)
        message_set[pos + _CRC_START + 1] |= _TIMESTAMP_TYPE_MASK
        end = pos + _LOG_OVERHEAD + size
        struct.pack_into(">I", message_set, pos + _LOG_OVERHEAD,
                         zlib.crc32(memoryview(message_set)[pos + _CRC_START:end]))
        pos = end


def _whole_batches(view: memoryview) -> Iterator[RecordBatchHeader]:
    """The complete batches of a fetched chunk (its end may cut a batch: a fetch's size limit)."""
    end = len(view)
    pos = 0
    while pos + _LOG_OVERHEAD <= end:
        (_, length) = _OFFSET_SIZE.unpack_from(view, pos)
        if pos + _LOG_OVERHEAD + length > end:
            return
        yield from iter_batches(view, pos, pos + _LOG_OVERHEAD + length)
        pos += _LOG_OVERHEAD + length
