"""v2 record batches as producers send them, with every codec (kafka-python's builder only has gzip here).

Shared by the decoder property tests and the Fetch-to-Arrow integration tests.
"""

from __future__ import annotations

import gzip
import struct
from typing import Any

import cramjam
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from strom.protocol.compression import XERIAL_MAGIC
from strom.protocol.record_batch import ATTRIBUTES_POS, CRC_POS, HEADER_SIZE, LOG_OVERHEAD, compute_crc

# Codec numbers as in the batch attributes; snappy comes raw (librdkafka) or xerial-framed (Java).
CODECS = ["none", "gzip", "snappy", "snappy-xerial", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "snappy-xerial": 2, "lz4": 3, "zstd": 4}

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


def fix_crc(buf: bytearray) -> None:
    """Recompute the CRC of the one batch in ``buf`` after an edit inside it."""
    _U32.pack_into(buf, CRC_POS, compute_crc(buf, 0, len(buf)))


def compress_body(codec: str, body: bytes) -> bytes:
    if codec == "gzip":
        return gzip.compress(body)
    if codec == "snappy":
        return bytes(cramjam.snappy.compress_raw(body))
    if codec == "snappy-xerial":
        out = bytearray(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
        for i in range(0, len(body), 1024):
            chunk = bytes(cramjam.snappy.compress_raw(body[i : i + 1024]))
            out += _I32.pack(len(chunk)) + chunk
        return bytes(out)
    if codec == "lz4":
        return bytes(cramjam.lz4.compress(body))
    if codec == "zstd":
        return bytes(cramjam.zstd.compress(body))
    raise ValueError(f"unknown codec {codec}")


def compressed(raw: bytes, codec: str) -> bytes:
    """The same batch with its records section compressed with ``codec`` (always, even when larger)."""
    if codec == "none":
        return raw
    out = bytearray(raw[:HEADER_SIZE]) + compress_body(codec, raw[HEADER_SIZE:])
    _I32.pack_into(out, 8, len(out) - LOG_OVERHEAD)
    (attributes,) = _I16.unpack_from(out, ATTRIBUTES_POS)
    _I16.pack_into(out, ATTRIBUTES_POS, attributes | CODEC_IDS[codec])
    fix_crc(out)
    return bytes(out)


def producer_batch(records: list[Record], deltas: list[int], *, producer_id: int = -1,
                   transactional: bool = False) -> tuple[bytes, list[int]]:
    """An uncompressed batch from kafka-python's builder, and the end position of every record."""
    builder = DefaultRecordBatchBuilder(2, 0, transactional, producer_id, 0 if producer_id >= 0 else -1,
                                        0 if producer_id >= 0 else -1, 2**31 - 1)
    ends = []
    for delta, (key, value, headers, ts) in zip(deltas, records, strict=True):
        builder.append(delta, ts, key, value, headers)
        ends.append(builder.size())
    return bytes(builder.build()), ends


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _zigzag(value: int) -> bytes:
    return _uvarint((value << 1) ^ (value >> 63))


def zero_value_batch(codec: str, keys: list[bytes], value_size: int, timestamp_ms: int) -> bytes:
    """One v2 batch of ``keys`` records whose values are ``value_size`` zero bytes, compressed
    as it is built (zlib / zstd straight from the codec libraries), so a batch that inflates to
    gigabytes (a compression bomb) is made without ever holding its records."""
    import zlib

    from backports import zstd

    if codec == "gzip":
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        feed, finish = z.compress, z.flush
    elif codec == "zstd":
        zc = zstd.ZstdCompressor(level=19)
        feed, finish = zc.compress, zc.flush
    else:
        raise ValueError(f"zero_value_batch builds gzip or zstd batches, not {codec}")
    body = bytearray()
    zeros = bytes(min(value_size, 1 << 20))
    for i, key in enumerate(keys):
        fields = b"\x00" + _zigzag(0) + _zigzag(i) + _zigzag(len(key)) + key + _zigzag(value_size)
        record_len = len(fields) + value_size + 1  # + headers count
        body += feed(_zigzag(record_len) + fields)
        left = value_size
        while left:
            n = min(left, len(zeros))
            body += feed(zeros[:n])
            left -= n
        body += feed(_zigzag(0))
    body += finish()
    n = len(keys)
    header = struct.pack(">qiibIhiqqqhii", 0, HEADER_SIZE - LOG_OVERHEAD + len(body), -1, 2, 0,
                         CODEC_IDS[codec], n - 1, timestamp_ms, timestamp_ms, -1, -1, -1, n)
    out = bytearray(header) + body
    fix_crc(out)
    return bytes(out)


def decode_batch(buf: bytes | bytearray | memoryview, position: int = 0) -> list[Any]:
    """The records of the batch at ``position``, decoded by kafka-python: an oracle independent of
    Strom's own record reader (``record_stream``), so a bug there cannot hide in a test's check."""
    (length,) = struct.unpack_from(">i", buf, position + 8)
    return list(DefaultRecordBatch(bytes(buf[position:position + 12 + length])))
