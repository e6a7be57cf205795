"""Record batch (de)compression, for the code that looks inside batches (dump-log, the Spark source
and sink).

The broker itself never decompresses: it stores and serves batches as producers sent them.
Snappy comes two ways: raw blocks (librdkafka) or xerial-framed chunks (Kafka's Java client).
"""

from __future__ import annotations

import gzip
import struct

XERIAL_MAGIC = b"\x82SNAPPY\x00"


def decompress(codec: int, payload: bytes | bytearray | memoryview) -> bytes:
    """The records section of a batch compressed with ``codec`` (the attributes' low 3 bits)."""
    import cramjam

    if codec == 0:
        return bytes(payload)
    if codec == 1:
        return gzip.decompress(payload)
    if codec == 2:
        if bytes(payload[:8]) == XERIAL_MAGIC:
            out = bytearray()
            pos = 16  # magic (8) + version (4) + compatible version (4)
            while pos + 4 <= len(payload):
                (chunk,) = struct.unpack_from(">i", payload, pos)
                pos += 4
                out += bytes(cramjam.snappy.decompress_raw(bytes(payload[pos : pos + chunk])))
                pos += chunk
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(bytes(payload)))
    if codec == 3:
        return bytes(cramjam.lz4.decompress(bytes(payload)))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(bytes(payload)))
    raise ValueError(f"unknown compression codec {codec}")


def compress(codec: int, records: bytes | bytearray | memoryview) -> bytes:
    """A records section compressed as producers do for v2 batches: gzip, snappy as raw blocks
    (as librdkafka writes it), lz4 frame, zstd frame."""
    import cramjam

    if codec == 0:
        return bytes(records)
    if codec == 1:
        return bytes(cramjam.gzip.compress(records))
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(records))
    if codec == 3:
        return bytes(cramjam.lz4.compress(records))
    if codec == 4:
        return bytes(cramjam.zstd.compress(records))
    raise ValueError(f"unknown compression codec {codec}")
