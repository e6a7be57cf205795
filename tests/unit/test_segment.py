"""LogSegment and segment selection: the seeds' worked example, lookups, reads and roll rules."""

from __future__ import annotations

import os

import pytest

from strom.protocol.record_batch import (
    COMPRESSION_GZIP,
    build_batch,
    iter_batches,
    parse_header,
)
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.segment import LogSegment


def sized_batch(size: int, offset: int, ts: int) -> bytes:
    """A one-record producer batch of exactly ``size`` bytes (searching key/value lengths)."""
    for key_len in range(0, 4):
        for value_len in range(max(0, size - 75), size):
            data = build_batch([(b"k" * key_len or None, b"v" * value_len, [], ts)], base_offset=offset)
            if len(data) == size:
                return data
    raise AssertionError(f"cannot build a batch of {size} bytes")


def test_seed_worked_example_offset_170418(tmp_path: str) -> None:
    """Segments 0 / 170410 / 239430; offset 170418 -> segment 170410, relative 8, entry [8, 1325]."""
    directory = os.path.join(tmp_path, "mytopic_test-0")
    os.makedirs(directory)
    config = LogConfig.from_props({"index.interval.bytes": "300"})
    seg0 = LogSegment(directory, 0, config, now_ms=0)
    for off in range(10):
        seg0.append_records(build_batch([(None, b"zero", [], 1_000)], base_offset=off))
    seg0.close()
    # Segment 170410: batches 0-2 are 116 bytes (entry [3, 348]); 3-6 are 70 bytes and 7 is
    # 697 bytes, so the next entry lands on relative offset 8 at byte 1325.
    seg1 = LogSegment(directory, 170410, config, now_ms=0)
    sizes = [116, 116, 116, 70, 70, 70, 70, 697, 200, 200]
    for rel, size in enumerate(sizes):
        seg1.append_records(sized_batch(size, 170410 + rel, 2_000 + rel))
    seg1.close()
    seg2 = LogSegment(directory, 239430, config, now_ms=0)
    seg2.append_records(build_batch([(None, b"two", [], 3_000)], base_offset=239430))
    seg2.close()
    assert sorted(os.listdir(directory))[:3] == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]

    log = Log(directory, config, clean_shutdown=True)
    assert [s.base_offset for s in log.segments] == [0, 170410, 239430]
    assert log.log_end_offset == 239431
    seg = log.segment_for(170418)
    assert seg.base_offset == 170410
    assert 170418 - seg.base_offset == 8
    assert seg.offset_index.lookup(170418) == (170418, 1325)
    assert seg.offset_index.lookup(170413) == (170413, 348)
    assert seg.translate_offset(170418).position == 1325
    fetched = log.read(170418, 1)
    assert fetched.slices[0].position == 1325
    header = parse_header(fetched.to_bytes())
    assert header.base_offset == 170418
    assert log.segment_for(239429).base_offset == 170410
    assert log.segment_for(239430).base_offset == 239430
    assert log.segment_for(5).base_offset == 0
    log.close()


def test_offset_lookup_across_many_segments(tmp_path: str) -> None:
    config = LogConfig.from_props({"segment.bytes": "600", "index.interval.bytes": "128"})
    log = Log(os.path.join(tmp_path, "t-0"), config)
    for i in range(120):
        log.append_as_leader(build_batch([(None, b"m%03d" % i, [], 10_000 + i)] * 3), 0, now_ms=20_000)
    assert len(log.segments) > 10
    assert log.log_end_offset == 360
    for offset in range(0, 360):
        data = log.read(offset, 1).to_bytes()
        header = parse_header(data)
        assert header.base_offset <= offset <= header.last_offset
        seg = log.segment_for(offset)
        assert seg.base_offset <= offset < seg.next_offset()
    log.close()


def test_segment_read_limits(tmp_path: str) -> None:
    config = LogConfig.from_props({"index.interval.bytes": "100"})
    seg = LogSegment(str(tmp_path), 0, config, now_ms=0)
    batches = [build_batch([(None, b"x" * 50, [], 1)] * 2, base_offset=2 * i) for i in range(20)]
    for b in batches:
        seg.append_records(b)
    size = len(batches[0])
    fslice, first = seg.read(5, size * 3 + 10)
    assert first.base_offset == 4 and fslice.position == 2 * size
    assert fslice.size == 3 * size  # whole batches only
    fslice, _ = seg.read(0, 1, min_one_message=True)
    assert fslice.size == size  # first batch whole even though larger than max_size
    assert seg.read(0, 1, min_one_message=False) is None
    fslice, _ = seg.read(0, 10**6, max_position=5 * size)
    assert fslice.size == 5 * size
    assert seg.read(40, 100) is None
    assert [h.base_offset for h in iter_batches(fslice.read())] == [0, 2, 4, 6, 8]
    seg.close()


def test_roll_by_size(tmp_path: str) -> None:
    batch = build_batch([(None, b"y" * 200, [], 5)])
    config = LogConfig.from_props({"segment.bytes": str(len(batch) * 3)})
    log = Log(os.path.join(tmp_path, "size-0"), config)
    for _ in range(7):
        log.append_as_leader(batch, 0, now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert all(s.size <= len(batch) * 3 for s in log.segments)
    log.close()


def test_roll_by_time_with_injected_clock(tmp_path: str) -> None:
    config = LogConfig.from_props({"segment.ms": "1000", "message.timestamp.type": "LogAppendTime"})
    log = Log(os.path.join(tmp_path, "time-0"), config, now_ms=10_000)
    batch = build_batch([(None, b"t", [], 1)])
    log.append_as_leader(batch, 0, now_ms=10_000)
    log.append_as_leader(batch, 0, now_ms=10_900)
    assert len(log.segments) == 1
    log.append_as_leader(batch, 0, now_ms=11_100)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_by_create_time_batches(tmp_path: str) -> None:
    """With CreateTime, Kafka measures segment age from the first batch's timestamp."""
    config = LogConfig.from_props({"segment.ms": "1000"})
    log = Log(os.path.join(tmp_path, "ct-0"), config)
    log.append_as_leader(build_batch([(None, b"a", [], 50_000)]), 0, now_ms=50_000)
    log.append_as_leader(build_batch([(None, b"b", [], 50_500)]), 0, now_ms=50_500)
    log.append_as_leader(build_batch([(None, b"c", [], 51_500)]), 0, now_ms=51_500)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_when_index_full(tmp_path: str) -> None:
    config = LogConfig.from_props({"segment.index.bytes": "48", "index.interval.bytes": "1"})
    log = Log(os.path.join(tmp_path, "idx-0"), config)
    for i in range(30):
        log.append_as_leader(build_batch([(None, b"i", [], 1_000 + i)]), 0, now_ms=0)
    segments = log.segments
    assert len(segments) > 3
    for seg in segments[:-1]:
        assert seg.offset_index.entries <= seg.offset_index.max_entries
        assert seg.time_index.entries <= seg.time_index.max_entries
    # every offset still readable through the small indexes
    for offset in range(30):
        assert parse_header(log.read(offset, 1).to_bytes()).base_offset == offset
    log.close()


def test_relative_offset_overflow_forces_roll(tmp_path: str) -> None:
    seg = LogSegment(str(tmp_path), 0, LogConfig(), now_ms=0)
    seg.append_records(build_batch([(None, b"a", [], 1)]))
    assert seg.should_roll(LogConfig(), 100, 1, 2**31 - 1, 0) is None
    assert seg.should_roll(LogConfig(), 100, 1, 2**31, 0) == "relative offset overflow"
    seg.close()


def test_time_index_lookup_via_log(tmp_path: str) -> None:
    config = LogConfig.from_props({"segment.bytes": "2000", "index.interval.bytes": "200"})
    log = Log(os.path.join(tmp_path, "ts-0"), config)
    # 3 records per batch at timestamps base, base+1, base+2; batches 10 ms apart
    for i in range(60):
        base = 100_000 + i * 10
        log.append_as_leader(build_batch([(None, b"r" * 30, [], base + j) for j in range(3)]), 0, now_ms=0)
    assert len(log.segments) > 3
    assert any(s.time_index.entries for s in log.segments)
    assert log.fetch_offset_by_timestamp(100_000) == (0, 100_000)
    assert log.fetch_offset_by_timestamp(100_001) == (1, 100_001)
    assert log.fetch_offset_by_timestamp(100_005) == (3, 100_010)  # next record at/after target
    assert log.fetch_offset_by_timestamp(100_302) == (92, 100_302)
    assert log.fetch_offset_by_timestamp(200_000) is None
    assert log.fetch_offset_by_timestamp(-2) == (0, -1)
    assert log.fetch_offset_by_timestamp(-1) == (180, -1)
    assert log.fetch_offset_by_timestamp(-3) == (179, 100_592)
    for target in range(100_000, 100_593, 7):
        offset, ts = log.fetch_offset_by_timestamp(target)
        i, j = divmod(offset, 3)
        assert ts == 100_000 + i * 10 + j and ts >= target and ts - target < 10
    log.close()


def test_compressed_batch_timestamp_lookup(tmp_path: str) -> None:
    log = Log(os.path.join(tmp_path, "gz-0"), LogConfig())
    log.append_as_leader(build_batch([(None, b"a", [], 10), (None, b"b", [], 30)]), 0, now_ms=0)
    log.append_as_leader(
        build_batch(
            [(None, b"c", [], 40), (None, b"d", [], 60), (None, b"e", [], 50)], compression=COMPRESSION_GZIP
        ),
        0,
        now_ms=0,
    )
    assert log.fetch_offset_by_timestamp(45) == (3, 60)
    assert log.fetch_offset_by_timestamp(-3) == (3, 60)
    log.close()


@pytest.mark.parametrize("size", [116, 70, 697])
def test_sized_batch_helper(size: int) -> None:
    assert len(sized_batch(size, 0, 1)) == size
