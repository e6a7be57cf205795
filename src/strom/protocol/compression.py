"""Record batch decompression, for the readers that look inside batches (dump-log, the Spark source).

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
