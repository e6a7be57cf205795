"""Records streamed out of compressed batches: every codec, bounded buffers, clear errors on bad input."""

from __future__ import annotations

import random
import struct
import threading

import pytest
from kafka.record.default_records import DefaultRecordBatch
from tests.support.record_batches import CODEC_IDS, CODECS, compressed, fix_crc, zero_value_batch

from strom.protocol.compression import (
    STREAM_CHUNK,
    CorruptCompressedDataError,
    DecompressedStream,
    InFlightBudget,
    decompress,
)
from strom.protocol.record_batch import HEADER_SIZE, build_batch, parse_header
from strom.protocol.record_stream import BatchRewriter, RecordReader, iter_record_heads, iter_records

_rng = random.Random(7)
RECORDS = [(b"key-%d" % i if i % 7 else None,
            None if i % 5 == 0 else bytes(_rng.randrange(256) for _ in range(_rng.randrange(1, 600))),
            [("h", b"x" * (i % 3)), ("n", None)] if i % 2 else [], 1_700_000_000_000 + i) for i in range(80)]
RAW = build_batch(RECORDS)


def with_body(batch: bytes, body: bytes) -> bytes:
    """The batch with another records section (length and CRC fixed, so only the body is bad)."""
    out = bytearray(batch[:HEADER_SIZE]) + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    fix_crc(out)
    return bytes(out)


@pytest.mark.parametrize("codec", CODECS)
def test_records_come_out_as_written(codec: str) -> None:
    batch = compressed(RAW, codec)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(batch)]
    assert got == [(i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(RECORDS)]
    heads = list(iter_record_heads(batch))
    assert [(h.key, h.value_size) for h in heads] == [(k, -1 if v is None else len(v)) for k, v, _, _ in RECORDS]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_bomb_is_read_with_a_bounded_buffer(codec: str) -> None:
    """64 MiB of records from a batch of a few KB: never more than a chunk (and a key) held at once."""
    batch = zero_value_batch(codec, [b"k%d" % i for i in range(64)], 1024 * 1024, 1_700_000_000_000)
    budget = InFlightBudget(8 * 1024 * 1024)
    with RecordReader(batch, budget=budget) as reader:
        offsets = [h.offset for h in reader.heads()]
        total = reader.decompressed_bytes
    assert offsets == list(range(64))
    assert total > 64 * 1024 * 1024
    assert budget.peak <= STREAM_CHUNK + 16
    assert budget.in_use == 0


@pytest.mark.parametrize("codec", CODECS[1:])
@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.9])
def test_truncated_input_is_a_clear_error(codec: str, fraction: float) -> None:
    batch = compressed(RAW, codec)
    body = batch[HEADER_SIZE:]
    cut = with_body(batch, body[: int(len(body) * fraction)])
    budget = InFlightBudget(64 * 1024 * 1024)
    with pytest.raises(CorruptCompressedDataError):
        with RecordReader(cut, budget=budget) as reader:
            for _ in reader.heads():
                reader.read_rest()
    assert budget.in_use == 0


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_input_gives_records_or_a_clear_error(codec: str) -> None:
    batch = compressed(RAW, codec)
    body = bytearray(batch[HEADER_SIZE:])
    rng = random.Random(codec)
    budget = InFlightBudget(64 * 1024 * 1024)
    for _ in range(150):
        bad = bytearray(body)
        for _ in range(rng.randrange(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        try:
            with RecordReader(with_body(batch, bytes(bad)), budget=budget) as reader:
                for _ in reader.heads():
                    reader.read_rest()
        except CorruptCompressedDataError as e:
            assert str(e)
        assert budget.in_use == 0


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_is_a_clear_error(codec: int) -> None:
    with pytest.raises(CorruptCompressedDataError, match="unknown compression codec"):
        DecompressedStream(codec, b"whatever")


@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", sorted(set(CODEC_IDS.values())))
def test_rewritten_batch_is_read_by_another_decoder(source: str, target: int) -> None:
    """Survivors of a batch rebuilt into any codec: valid CRC, and an independent decoder (cramjam
    over the whole section, then kafka-python) reads the same records."""
    batch = compressed(RAW, source)
    h = parse_header(batch)
    kept = [i for i in range(len(RECORDS)) if i % 3]
    body = bytearray()
    max_ts = max(RECORDS[i][3] for i in kept)
    with RecordReader(batch) as reader:
        rewriter = BatchRewriter(h, batch, target, len(kept), max_ts, body.extend)
        for head in reader.heads():
            if head.offset % 3:
                rewriter.add(reader, head)
        new = rewriter.finish() + bytes(body)
    assert DefaultRecordBatch(new).validate_crc()
    plain = bytearray(new[:HEADER_SIZE]) + decompress(target, new[HEADER_SIZE:])
    struct.pack_into(">i", plain, 8, len(plain) - 12)
    struct.pack_into(">h", plain, 21, struct.unpack_from(">h", plain, 21)[0] & ~7)
    decoded = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in DefaultRecordBatch(bytes(plain))]
    assert decoded == [(i, RECORDS[i][3], RECORDS[i][0], RECORDS[i][1], RECORDS[i][2]) for i in kept]
    assert parse_header(new).max_timestamp == max_ts
    assert parse_header(new).records_count == len(kept)


def test_budget_waits_for_room_and_refuses_the_impossible() -> None:
    budget = InFlightBudget(100)
    budget.reserve(80)
    with pytest.raises(CorruptCompressedDataError):
        budget.reserve(101)
    with pytest.raises(CorruptCompressedDataError):
        budget.reserve(30, timeout_s=0.05)
    threading.Timer(0.05, budget.release, (80,)).start()
    budget.reserve(30, timeout_s=30)
    assert budget.in_use == 30


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_concatenated_members_and_frames_are_read_in_order(codec: int) -> None:
    """Two gzip members / lz4 frames / zstd frames back to back, larger than one input slice:
    read once each, in order, then the end (asking again stays at the end)."""
    import gzip

    import lz4.frame
    from backports import zstd

    one = {1: gzip.compress, 3: lz4.frame.compress, 4: zstd.compress}[codec]
    first, second = random.Random(1).randbytes(300_000), random.Random(2).randbytes(300_000)
    out = bytearray()
    with DecompressedStream(codec, one(first) + one(second)) as stream:
        stream.pipe(len(first) + len(second), out.extend)
        assert stream.at_end() and stream.at_end()
    assert bytes(out) == first + second
