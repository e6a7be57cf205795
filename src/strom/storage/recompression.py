"""Recompression on append: a topic whose ``compression.type`` names a codec stores every
client batch with that codec, as Kafka does (``producer`` keeps what the producer sent,
``uncompressed`` stores records uncompressed).

Only batches whose codec differs are touched, so with ``producer`` (the default) or a producer
that already uses the topic's codec, the append path never looks inside a batch. A converted
batch keeps its base timestamp, producer id/epoch/sequence and flags; its records are copied
verbatim from a bounded decompression stream into a streaming compressor, and the result may
not grow past ``max.message.bytes`` (checked as it is written, so a compression bomb sent to an
``uncompressed`` topic stops at that size instead of filling memory).
"""

from __future__ import annotations

from kafka.errors import CorruptRecordError, InvalidRecordError, MessageSizeTooLargeError

from strom.protocol.compression import CODEC_NAMES, CorruptCompressedDataError
from strom.protocol.record_batch import HEADER_SIZE, Buffer, RecordBatchHeader, iter_batches
from strom.protocol.record_stream import BatchRewriter, BatchTooLargeError, RecordReader
from strom.storage.log_config import LogConfig
from strom.storage.validator import LogValidator


def target_codec(config: LogConfig) -> int | None:
    """The codec the topic stores, or None when it keeps the producer's."""
    return CODEC_NAMES.get(config.compression_type)


def needs_recompression(records: Buffer, config: LogConfig) -> bool:
    """Whether some batch of a produce request is not in the topic's codec (headers only)."""
    target = target_codec(config)
    if target is None:
        return False
    try:
        return any(h.compression != target and not h.is_control for h in iter_batches(records))
    except Exception:  # noqa: BLE001 - a malformed request is the validator's to answer
        return False


def convert_for_append(records: Buffer, config: LogConfig, now_ms: int) -> bytearray | None:
    """Validate a produce request's batches (CRC first: a bad batch is never re-signed) and return
    them in the topic's codec, or None if they already are. Runs in a worker thread: the produce
    handler converts here so the event loop never inflates and recompresses."""
    view = records if isinstance(records, memoryview) else memoryview(records)
    result = LogValidator.validate(view, config, now_ms, True)
    return recompress(view, result.headers, config)


def recompress(view: memoryview, headers: list[RecordBatchHeader], config: LogConfig) -> bytearray | None:
    """The batches of a produce request with every batch in the topic's codec; None when they all
    are already (the caller then appends the request's bytes as they are)."""
    target = target_codec(config)
    if target is None or all(h.compression == target or h.is_control for h in headers):
        return None
    out = bytearray()
    for h in headers:
        if h.compression == target or h.is_control:
            out += view[h.position:h.end]
            continue
        start = len(out)
        out += bytes(HEADER_SIZE)
        try:
            with RecordReader(view, h.position) as reader:
                rewriter = BatchRewriter(h, view[h.position:h.position + HEADER_SIZE], target, h.records_count,
                                         h.max_timestamp, out.extend, config.max_message_bytes)
                for expected, head in enumerate(reader.heads()):
                    if head.offset - h.base_offset != expected:
                        raise InvalidRecordError(f"record {expected} of the batch has offset delta "
                                                 f"{head.offset - h.base_offset}: inner offsets out of sequence")
                    rewriter.add(reader, head)
                out[start:start + HEADER_SIZE] = rewriter.finish()
        except BatchTooLargeError as e:
            raise MessageSizeTooLargeError(
                f"record batch recompressed to {config.compression_type} exceeds "
                f"max.message.bytes={config.max_message_bytes}") from e
        except CorruptCompressedDataError as e:
            raise CorruptRecordError(f"record batch at position {h.position} cannot be read: {e}") from e
    return out
