"""RecordBatch header codec: parse, walk, CRC, in-place edits, checked against kafka-python's decoder."""

from __future__ import annotations

import struct

import pytest
from kafka.errors import CorruptRecordError, UnsupportedForMessageFormatError
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from tests.support.record_batches import decode_batch

from strom.protocol import record_batch as rb


def producer_batch(n: int = 3, ts: int = 1_000, compression: int = 0, **kw: int) -> bytes:
    return rb.build_batch(
        [(f"k{i}".encode(), f"value-{i}".encode() * 4, [("h", b"1")], ts + i) for i in range(n)],
        compression=compression,
        **kw,
    )


def test_parse_header_matches_kafka_python_builder() -> None:
    builder = DefaultRecordBatchBuilder(2, 0, False, 42, 3, 17, 1 << 20)
    for i in range(4):
        builder.append(i, 5_000 + i, b"k", b"v" * i, [])
    data = bytes(builder.build())
    h = rb.parse_header(data)
    assert h.magic == 2
    assert h.size == len(data)
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (0, 3, 4)
    assert (h.base_timestamp, h.max_timestamp) == (5_000, 5_003)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (42, 3, 17, 20)
    assert h.compression == rb.COMPRESSION_NONE
    assert h.timestamp_type == rb.CREATE_TIME
    assert not h.is_transactional and not h.is_control
    assert rb.is_crc_valid(data, h)


def test_attribute_flags_and_gzip() -> None:
    data = producer_batch(
        5, compression=rb.COMPRESSION_GZIP, producer_id=1, producer_epoch=0, base_sequence=0
    )
    h = rb.parse_header(data)
    assert h.compression == rb.COMPRESSION_GZIP
    assert h.records_count == 5 and h.last_offset_delta == 4
    tx = rb.build_batch(
        [(None, b"x", [], 1)], producer_id=9, producer_epoch=1, base_sequence=0, is_transactional=True
    )
    assert rb.parse_header(tx).is_transactional
    ctrl = bytearray(tx)
    struct.pack_into(">h", ctrl, rb.ATTRIBUTES_POS, rb.parse_header(tx).attributes | rb.CONTROL_MASK)
    assert rb.parse_header(ctrl).is_control


def test_iter_batches_walks_a_multi_batch_buffer() -> None:
    a, b, c = producer_batch(1), producer_batch(2, compression=rb.COMPRESSION_GZIP), producer_batch(3)
    buf = a + b + c
    headers = list(rb.iter_batches(memoryview(buf)))
    assert [h.position for h in headers] == [0, len(a), len(a) + len(b)]
    assert [h.records_count for h in headers] == [1, 2, 3]
    assert headers[-1].end == len(buf)


def test_iter_batches_rejects_truncated_and_bad_lengths() -> None:
    buf = producer_batch(2) + producer_batch(2)
    with pytest.raises(CorruptRecordError):
        list(rb.iter_batches(buf[:-1]))
    with pytest.raises(CorruptRecordError):
        list(rb.iter_batches(buf[:20]))
    bad = bytearray(buf)
    struct.pack_into(">i", bad, rb.LENGTH_POS, 10)
    with pytest.raises(CorruptRecordError):
        list(rb.iter_batches(bad))


def test_iter_batches_rejects_legacy_and_unknown_magic() -> None:
    legacy = bytearray(producer_batch(1))
    legacy[rb.MAGIC_POS] = 1
    with pytest.raises(UnsupportedForMessageFormatError):
        list(rb.iter_batches(legacy))
    legacy[rb.MAGIC_POS] = 7
    with pytest.raises(CorruptRecordError):
        list(rb.iter_batches(legacy))


def test_crc_detects_a_flipped_byte_but_not_offset_or_epoch_changes() -> None:
    data = bytearray(producer_batch(3))
    h = rb.parse_header(data)
    rb.set_base_offset(data, 0, 1_000_000)
    rb.set_partition_leader_epoch(data, 0, 12)
    h2 = rb.parse_header(data)
    assert (h2.base_offset, h2.partition_leader_epoch) == (1_000_000, 12)
    assert rb.is_crc_valid(data, h2)
    decoded = list(DefaultRecordBatch(bytes(data)))
    assert [r.offset for r in decoded] == [1_000_000, 1_000_001, 1_000_002]
    data[h.size - 3] ^= 0x01
    assert not rb.is_crc_valid(data, rb.parse_header(data))


def test_set_log_append_time_recomputes_crc() -> None:
    data = bytearray(producer_batch(3, ts=1_000))
    rb.set_log_append_time(data, 0, 99_999)
    h = rb.parse_header(data)
    assert h.timestamp_type == rb.LOG_APPEND_TIME
    assert h.max_timestamp == 99_999
    assert rb.is_crc_valid(data, h)
    batch = DefaultRecordBatch(bytes(data))
    batch.validate_crc()
    assert [r.timestamp for r in batch] == [99_999] * 3


def test_rewrite_header_equals_in_place_edits() -> None:
    src = producer_batch(4, compression=rb.COMPRESSION_GZIP)
    body = memoryview(src)[rb.HEADER_SIZE :]
    new_header = rb.rewrite_header(src, 0, 77, 5, 123_456, body)
    in_place = bytearray(src)
    rb.set_base_offset(in_place, 0, 77)
    rb.set_partition_leader_epoch(in_place, 0, 5)
    rb.set_log_append_time(in_place, 0, 123_456)
    assert bytes(new_header) + bytes(body) == bytes(in_place)
    assert rb.compute_crc_split(new_header, body) == rb.parse_header(in_place).crc


def test_build_batch_round_trips_records() -> None:
    data = rb.build_batch([(b"a", b"1", [("x", b"y")], 10), (None, None, [], 11)], base_offset=50)
    records = decode_batch(data)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (50, b"a", b"1", 10),
        (51, None, None, 11),
    ]
    assert records[0].headers == [("x", b"y")]
    with pytest.raises(ValueError):
        rb.build_batch([])
