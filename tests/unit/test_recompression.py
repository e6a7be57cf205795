"""Recompression to a topic's compression.type on append, in the log itself."""

from __future__ import annotations

import os
import struct

import pytest
from kafka.errors import CorruptRecordError, MessageSizeTooLargeError
from kafka.record.default_records import DefaultRecordBatch
from tests.support.record_batches import CODEC_IDS, CODECS, compressed, fix_crc, zero_value_batch

from strom.protocol.compression import decompress
from strom.protocol.record_batch import build_batch, iter_batches
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

RECORDS = [(b"k%d" % i, b"value-%d-" % i * 20, [("h", b"v")], 1_700_000_000_000 + i) for i in range(50)]


def open_log(tmp_path: str, **props: str) -> Log:
    return Log(os.path.join(tmp_path, "topic-0"), LogConfig.from_props(props), now_ms=0)


def records_of(batch: bytes) -> list[tuple[int, bytes | None, bytes | None, list, int]]:  # type: ignore[type-arg]
    """Decoded by another decoder: the whole section inflated by cramjam, then kafka-python."""
    plain = bytearray(batch[:61]) + decompress(batch[22] & 7, batch[61:])
    struct.pack_into(">i", plain, 8, len(plain) - 12)
    plain[22] &= ~7 & 0xFF
    return [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in DefaultRecordBatch(bytes(plain))]


def stored(log: Log) -> bytes:
    seg = log.segments[0]
    return os.pread(seg.file.fileno(), seg.size, 0)


@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_batches_are_stored_in_the_topics_codec(tmp_path: str, source: str, target: str) -> None:
    log = open_log(tmp_path, **{"compression.type": target})
    sent = compressed(build_batch(RECORDS), source)
    info = log.append_as_leader(sent, 0)
    assert (info.first_offset, info.last_offset) == (0, 49)
    data = stored(log)
    headers = list(iter_batches(data))
    assert [h.compression for h in headers] == [CODEC_IDS.get(target, 0)]
    got = records_of(data)
    assert got == [(i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(RECORDS)]


@pytest.mark.parametrize("source", CODECS)
def test_producer_keeps_the_batch_byte_for_byte(tmp_path: str, source: str) -> None:
    log = open_log(tmp_path)
    sent = compressed(build_batch(RECORDS), source)
    log.append_as_leader(sent, -1)
    assert stored(log)[61:] == sent[61:]


def test_a_bomb_to_an_uncompressed_topic_is_refused_at_max_message_bytes(tmp_path: str) -> None:
    log = open_log(tmp_path, **{"compression.type": "uncompressed"})
    bomb = zero_value_batch("zstd", [b"k%d" % i for i in range(512)], 1 << 20, 1_700_000_000_000)
    with pytest.raises(MessageSizeTooLargeError):
        log.append_as_leader(bomb, 0)
    assert log.log_end_offset == 0


def test_a_batch_that_cannot_be_inflated_is_corrupt(tmp_path: str) -> None:
    log = open_log(tmp_path, **{"compression.type": "gzip"})
    good = bytearray(compressed(build_batch(RECORDS), "zstd"))
    bad = bytearray(good[:61]) + good[61:len(good) // 2]  # records cut in half, CRC made valid again

    bad[8:12] = (len(bad) - 12).to_bytes(4, "big")
    fix_crc(bad)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(bad), 0)
    assert log.log_end_offset == 0
