"""Log: leader appends, validation (nothing written on failure), reads, retention, truncation, LogManager."""

from __future__ import annotations

import os
import struct

import pytest
from kafka.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
)
from kafka.record.default_records import DefaultRecordBatch

from strom.protocol import record_batch as rb
from strom.protocol.record_batch import build_batch, iter_batches, parse_header
from strom.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CorruptCheckpointError,
    OffsetCheckpointFile,
)
from strom.storage.log import Log, parse_topic_partition
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager


def batch(n: int = 1, ts: int = 1_000, value: bytes = b"value", **kw: int) -> bytes:
    return build_batch([(b"key", value, [], ts + i) for i in range(n)], **kw)


def open_log(tmp_path: str, name: str = "topic-0", **props: str) -> Log:
    return Log(os.path.join(tmp_path, name), LogConfig.from_props(props), now_ms=0)


def log_bytes(log: Log) -> int:
    return sum(os.path.getsize(s.log_path) for s in log.segments)


def test_append_assigns_offsets_and_epoch(tmp_path: str) -> None:
    log = open_log(tmp_path)
    info = log.append_as_leader(batch(3), leader_epoch=7, now_ms=5)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 2, 3)
    assert info.log_append_time_ms == -1 and info.max_timestamp == 1_002 and not info.duplicate
    info = log.append_as_leader(batch(2) + batch(4), leader_epoch=7, now_ms=5)
    assert (info.first_offset, info.last_offset, info.record_count) == (3, 8, 6)
    assert log.log_end_offset == 9
    data = log.read(0, 10**6).to_bytes()
    headers = list(iter_batches(data))
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 2), (3, 4), (5, 8)]
    assert all(h.partition_leader_epoch == 7 and rb.is_crc_valid(data, h) for h in headers)
    offsets = [r.offset for h in headers for r in DefaultRecordBatch(data[h.position : h.end])]
    assert offsets == list(range(9))
    log.close()


def test_compressed_batch_is_stored_untouched(tmp_path: str) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), 0)
    gz = batch(10, value=b"compress me " * 20, compression=rb.COMPRESSION_GZIP)
    log.append_as_leader(gz, 0)
    stored = log.read(2, 10**6).to_bytes()
    h = parse_header(stored)
    assert h.compression == rb.COMPRESSION_GZIP and h.base_offset == 2
    assert stored[rb.HEADER_SIZE :] == gz[rb.HEADER_SIZE :]  # body byte-identical
    assert stored[rb.MAGIC_POS :] == gz[rb.MAGIC_POS :]  # everything inside the CRC unchanged
    assert [r.offset for r in DefaultRecordBatch(stored)] == list(range(2, 12))
    log.close()


def test_log_append_time_rewrites_header(tmp_path: str) -> None:
    log = open_log(tmp_path, **{"message.timestamp.type": "LogAppendTime"})
    info = log.append_as_leader(batch(3, compression=rb.COMPRESSION_GZIP), 0, now_ms=777_000)
    assert info.log_append_time_ms == 777_000
    data = log.read(0, 10**6).to_bytes()
    h = parse_header(data)
    assert h.timestamp_type == rb.LOG_APPEND_TIME and h.max_timestamp == 777_000
    assert rb.is_crc_valid(data, h)
    assert [r.timestamp for r in DefaultRecordBatch(data)] == [777_000] * 3
    log.close()


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        ("crc", CorruptRecordError),
        ("truncated", CorruptRecordError),
        ("magic1", InvalidRecordError),  # Produce v3+ with magic 0/1: Kafka answers INVALID_RECORD
        ("count", InvalidRecordError),
        ("too_large", MessageSizeTooLargeError),
        ("empty", InvalidRecordError),
    ],
)
def test_nothing_written_when_validation_fails(tmp_path: str, mutate: str, error: type[Exception]) -> None:
    log = open_log(tmp_path, **{"max.message.bytes": "2000"})
    log.append_as_leader(batch(2), 0)
    before = (log.log_end_offset, log_bytes(log))
    good = batch(1)
    bad = bytearray(batch(3))
    if mutate == "crc":
        bad[-2] ^= 0xFF
    elif mutate == "truncated":
        bad = bad[:-5]
    elif mutate == "magic1":
        bad[rb.MAGIC_POS] = 1
    elif mutate == "count":
        struct.pack_into(">i", bad, 57, 5)  # recordsCount != lastOffsetDelta + 1
        struct.pack_into(">I", bad, rb.CRC_POS, rb.compute_crc(bad))  # CRC valid: the count check fails
    elif mutate == "too_large":
        bad = bytearray(batch(1, value=b"z" * 3000))
    elif mutate == "empty":
        good, bad = b"", bytearray()
    with pytest.raises(error):
        log.append_as_leader(good + bytes(bad), 0)  # first batch fine, second bad
    assert (log.log_end_offset, log_bytes(log)) == before
    log.close()


def test_timestamp_difference_check(tmp_path: str) -> None:
    log = open_log(tmp_path, **{"message.timestamp.difference.max.ms": "1000"})
    log.append_as_leader(batch(1, ts=10_500), 0, now_ms=10_000)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(1, ts=5_000), 0, now_ms=10_000)
    assert log.log_end_offset == 1
    log.close()


def test_read_bounds_hw_and_max_bytes(tmp_path: str) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "400"})
    sizes = []
    for _ in range(10):
        b = batch(2, value=b"v" * 40)
        sizes.append(len(b))
        log.append_as_leader(b, 0)
    assert len(log.segments) > 2
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 100)
    assert log.read(20, 100).size == 0  # at LEO: empty, not an error
    log.update_high_watermark(6)
    info = log.read(0, 10**6, max_offset=log.high_watermark)
    assert [h.base_offset for h in iter_batches(info.to_bytes())] == [0, 2, 4]
    info = log.read(3, 10**6, max_offset=20)  # starts at the batch containing 3, spans segments
    assert info.first_batch_offset == 2
    assert [h.base_offset for h in iter_batches(info.to_bytes())] == list(range(2, 20, 2))
    assert len(info.slices) > 1
    one = log.read(0, 1)  # min_one_message: first batch whole
    assert one.size == sizes[0]
    assert log.read(0, 1, min_one_message=False).size == 0
    two = log.read(0, sizes[0] * 2 + 5)
    assert two.size == sizes[0] * 2
    log.update_high_watermark(20)
    log.delete_records(5)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    assert parse_header(log.read(5, 1).to_bytes()).base_offset == 4  # batch containing 5
    log.close()


def test_retention_by_time_advances_log_start(tmp_path: str) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "300", "retention.ms": "10000", "file.delete.delay.ms": "0"})
    for i in range(12):
        log.append_as_leader(batch(1, ts=1_000 * i, value=b"x" * 100), 0, now_ms=1_000 * i)
    log.update_high_watermark(log.log_end_offset)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    assert log.delete_old_segments(now_ms=5_000) == 0
    deleted = log.delete_old_segments(now_ms=16_500)  # segments whose newest batch is < 6500
    assert deleted > 0
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert all(s.largest_timestamp > 16_500 - 10_000 for s in log.segments)
    assert not any(name.endswith(".deleted") for name in os.listdir(log.directory))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    # everything old and fully below the HW: even the active segment goes, a fresh one remains
    assert log.delete_old_segments(now_ms=10**9) > 0
    assert log.log_start_offset == log.log_end_offset == 12
    assert log.segments[-1].size == 0
    info = log.append_as_leader(batch(1), 0)
    assert info.first_offset == 12
    log.close()


def test_retention_by_size_and_hw_guard(tmp_path: str) -> None:
    log = open_log(
        tmp_path, **{"segment.bytes": "300", "retention.bytes": "700", "file.delete.delay.ms": "0"}
    )
    for _ in range(12):
        log.append_as_leader(batch(1, value=b"x" * 100), 0)
    assert log.size_in_bytes > 700
    log.update_high_watermark(0)
    assert log.delete_old_segments() == 0  # nothing below the HW may go
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() > 0
    assert log.size_in_bytes <= 700 + 300
    assert log.log_start_offset == log.segments[0].base_offset > 0
    log.close()


def test_deleted_segments_linger_for_in_flight_reads(tmp_path: str) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "200", "file.delete.delay.ms": "60000"})
    for _ in range(4):
        log.append_as_leader(batch(1, value=b"x" * 100), 0)
    log.update_high_watermark(4)
    pending = log.read(0, 10**6)
    expected = pending.to_bytes()
    log.delete_records(3)
    assert log.log_start_offset == 3
    names = os.listdir(log.directory)
    assert "00000000000000000000.log.deleted" in names
    assert pending.to_bytes() == expected  # the open file handle still serves the old range
    log.close()


def test_delete_records_rules(tmp_path: str) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "200", "file.delete.delay.ms": "0"})
    for _ in range(6):
        log.append_as_leader(batch(1, value=b"x" * 100), 0)
    log.update_high_watermark(4)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(5)
    assert log.delete_records(2) == 2
    assert log.delete_records(1) == 2  # never moves backwards
    assert log.segments[0].base_offset == 2
    assert log.delete_records(-1) == 4  # -1 = up to the high watermark
    log.close()


def test_truncate_to(tmp_path: str) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "300", "file.delete.delay.ms": "0"})
    for _ in range(10):
        log.append_as_leader(batch(2, value=b"x" * 50), 0)
    log.update_high_watermark(20)
    assert log.truncate_to(9)  # mid-batch: cut at the batch containing 9
    assert log.log_end_offset == 8
    assert log.high_watermark == 8
    assert log.segments[-1].base_offset <= 8
    info = log.append_as_leader(batch(1), 0)
    assert info.first_offset == 8
    assert parse_header(log.read(8, 1).to_bytes()).base_offset == 8
    assert not log.truncate_to(100)
    log.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    assert log.append_as_leader(batch(1), 0).first_offset == 50
    log.close()


def test_append_as_follower_keeps_offsets(tmp_path: str) -> None:
    leader = open_log(tmp_path, "lead-0")
    leader.append_as_leader(batch(3), 4)
    leader.append_as_leader(batch(2), 5)
    data = leader.read(0, 10**6).to_bytes()
    follower = open_log(tmp_path, "follow-0")
    info = follower.append_as_follower(data)
    assert (info.first_offset, info.last_offset, follower.log_end_offset) == (0, 4, 5)
    assert follower.read(0, 10**6).to_bytes() == data
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(data)  # offsets below the LEO
    leader.close()
    follower.close()


def test_flush_advances_recovery_point(tmp_path: str) -> None:
    log = open_log(tmp_path, **{"flush.messages": "3", "flush.ms": "1000"})
    log.append_as_leader(batch(2), 0)
    assert log.recovery_point == 0
    log.append_as_leader(batch(1), 0)
    assert log.recovery_point == 3  # flush.messages reached
    log.append_as_leader(batch(1), 0)
    assert log.needs_flush(now_ms=10**15)
    log.flush()
    assert log.recovery_point == 4
    log.close()


def test_checkpoint_file_round_trip(tmp_path: str) -> None:
    path = os.path.join(tmp_path, "replication-offset-checkpoint")
    cp = OffsetCheckpointFile(path)
    assert cp.read() == {}
    entries = {("my-topic", 0): 42, ("my-topic", 1): 0, ("a-b-c", 12): 2**40}
    cp.write(entries)
    assert cp.read() == entries
    with open(path) as f:
        lines = f.read().splitlines()
    assert lines[:2] == ["0", "3"] and "my-topic 0 42" in lines
    with open(path, "w") as f:
        f.write("0\n2\nt 0 1\n")
    with pytest.raises(CorruptCheckpointError):
        cp.read()


def test_parse_topic_partition() -> None:
    assert parse_topic_partition("my-dashed-topic-12") == ("my-dashed-topic", 12)
    for bad in ("nodash", "topic-", "-3", "t-x"):
        with pytest.raises(ValueError):
            parse_topic_partition(bad)


def test_log_manager_lifecycle(tmp_path: str) -> None:
    dirs = [os.path.join(tmp_path, "d1"), os.path.join(tmp_path, "d2")]
    mgr = LogManager(dirs, {"segment.bytes": "500"})
    mgr.load_logs()
    a = mgr.get_or_create_log("orders-eu", 0)
    b = mgr.get_or_create_log("orders-eu", 1, LogConfig.from_props({"segment.bytes": "300"}))
    assert mgr.get_or_create_log("orders-eu", 0) is a
    assert {mgr.log_dir_of("orders-eu", 0), mgr.log_dir_of("orders-eu", 1)} == set(map(os.path.abspath, dirs))
    for _ in range(5):
        a.append_as_leader(batch(2, value=b"x" * 60), 0)
        b.append_as_leader(batch(1, value=b"y" * 60), 0)
    a.update_high_watermark(8)
    b.update_high_watermark(5)
    b.delete_records(2)
    mgr.checkpoint()
    d_b = mgr.log_dir_of("orders-eu", 1)
    assert OffsetCheckpointFile(os.path.join(d_b, LOG_START_OFFSET_CHECKPOINT)).read() == {
        ("orders-eu", 1): 2
    }
    assert OffsetCheckpointFile(os.path.join(d_b, REPLICATION_OFFSET_CHECKPOINT)).read() == {
        ("orders-eu", 1): 5
    }
    mgr.shutdown()
    for d in dirs:
        assert os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    assert OffsetCheckpointFile(os.path.join(d_b, RECOVERY_POINT_CHECKPOINT)).read() == {("orders-eu", 1): 5}

    os.makedirs(os.path.join(dirs[0], "junk.abc-delete"))
    mgr2 = LogManager(dirs, {"segment.bytes": "500"})
    mgr2.load_logs()
    for d in dirs:
        assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    a2, b2 = mgr2.get_log("orders-eu", 0), mgr2.get_log("orders-eu", 1)
    assert (a2.log_end_offset, a2.high_watermark, a2.recovery_point) == (10, 8, 10)
    assert (b2.log_start_offset, b2.log_end_offset, b2.high_watermark) == (2, 5, 5)
    assert mgr2.get_log("junk.abc", 0) is None
    assert mgr2.delete_log("orders-eu", 0)
    assert mgr2.get_log("orders-eu", 0) is None
    assert not os.path.exists(a2.directory)
    b2.update_high_watermark(5)
    mgr2.update_config(
        "orders-eu", LogConfig.from_props({"retention.bytes": "0", "file.delete.delay.ms": "0"})
    )
    assert mgr2.cleanup_logs() > 0
    assert b2.log_start_offset == 5
    mgr2.shutdown()


def test_retention_renames_segments_without_holding_the_log_lock(tmp_path: str, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """Retention runs in a worker; the event loop takes the log's lock for every append, so the
    renames to .deleted must happen with it released."""
    import threading

    from strom.storage.segment import LogSegment

    log = open_log(tmp_path, **{"segment.bytes": "300", "retention.ms": "10000", "file.delete.delay.ms": "0"})
    for i in range(12):
        log.append_as_leader(batch(1, ts=1_000 * i, value=b"x" * 100), 0, now_ms=1_000 * i)
    log.update_high_watermark(log.log_end_offset)
    lock_free_during_rename: list[bool] = []
    real_change_suffix = LogSegment.change_suffix

    def change_suffix(seg: LogSegment, new_suffix: str) -> None:
        got: list[bool] = []

        def appender() -> None:  # another thread, as the loop appending meanwhile
            ok = log._lock.acquire(blocking=False)
            got.append(ok)
            if ok:
                log._lock.release()

        t = threading.Thread(target=appender)
        t.start()
        t.join()
        lock_free_during_rename.extend(got)
        real_change_suffix(seg, new_suffix)

    monkeypatch.setattr(LogSegment, "change_suffix", change_suffix)
    assert log.delete_old_segments(now_ms=16_500) > 0
    assert lock_free_during_rename and all(lock_free_during_rename)
    assert not any(name.endswith(".deleted") or name.endswith(".log") and
                   int(name.split(".")[0]) < log.log_start_offset for name in os.listdir(log.directory))
    info = log.append_as_leader(batch(1, ts=20_000), 0, now_ms=20_000)
    assert info.first_offset == 12
    log.close()


def test_legacy_offsets_list_segment_bases_by_modification_time(tmp_path: str) -> None:
    """ListOffsets v0 (Kafka's legacy offsets): segment base offsets (the log start offset for the first) and the
    log end offset, newest first, up to max_num_offsets, none after the last segment modified at or before the
    timestamp; record timestamps play no part."""
    log = open_log(tmp_path, **{"segment.bytes": "200"})
    for _ in range(4):
        log.append_as_leader(batch(3, value=b"v" * 60), 0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    for i, seg in enumerate(log.segments):  # written at 1000 s, 2000 s, 3000 s and 4000 s
        os.utime(seg.log_path, ((i + 1) * 1000, (i + 1) * 1000))
    assert log.legacy_fetch_offsets_before(-1, 100) == [12, 9, 6, 3, 0]
    assert log.legacy_fetch_offsets_before(-1, 2) == [12, 9]
    assert log.legacy_fetch_offsets_before(-2, 100) == [0]
    assert log.legacy_fetch_offsets_before(2_500_000, 100) == [3, 0]
    assert log.legacy_fetch_offsets_before(3_000_000, 1) == [6]
    assert log.legacy_fetch_offsets_before(999_999, 100) == []
    assert log.legacy_fetch_offsets_before(2_500_000, 0) == []
    log.roll()  # an empty active segment: its base offset is the log end offset, listed once
    assert log.legacy_fetch_offsets_before(-1, 100) == [12, 9, 6, 3, 0]
    log.update_high_watermark(12)
    log.delete_records(4)
    assert log.legacy_fetch_offsets_before(-1, 100) == [12, 9, 6, 4]
    log.close()
