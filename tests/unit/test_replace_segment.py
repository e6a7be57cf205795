"""Log.replace_segment prepares the cleaned segment outside the log lock, then swaps atomically."""

from __future__ import annotations

import os
import threading

import pytest

from strom.protocol.record_batch import build_batch, iter_batches
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.segment import CLEANED_SUFFIX, LogSegment


def batch(key: bytes, value: bytes) -> bytes:
    return build_batch([(key, value, [], 1_000)])


def open_log(path: str) -> Log:
    props = {"segment.bytes": "300", "cleanup.policy": "compact", "file.delete.delay.ms": "0"}
    return Log(path, LogConfig.from_props(props), now_ms=0)


def write_cleaned_copy(seg: LogSegment, skip_first: int) -> tuple[str, list[int]]:
    """A 'compacted' copy of a segment: the same batches minus the first ``skip_first``."""
    with open(seg.log_path, "rb") as f:
        data = f.read()
    kept = list(iter_batches(data))[skip_first:]
    path = seg.log_path + CLEANED_SUFFIX
    with open(path, "wb") as f:
        for h in kept:
            f.write(data[h.position : h.end])
        f.flush()
        os.fsync(f.fileno())
    return path, [h.base_offset for h in kept]


def offsets(log: Log) -> list[int]:
    return [h.base_offset for h in iter_batches(log.read(log.log_start_offset, 10**7).to_bytes())]


def test_appends_proceed_while_a_replacement_is_prepared(tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.path.join(str(tmp_path), "__consumer_offsets-0")
    log = open_log(path)
    for i in range(12):
        log.append_as_leader(batch(b"k%d" % (i % 3), b"v" * 40), 0)
    assert len(log.segments) > 2
    first = log.segments[0]
    cleaned, kept = write_cleaned_copy(first, skip_first=1)
    assert kept
    dropped = [o for o in offsets(log) if first.base_offset <= o < log.segments[1].base_offset and o not in kept]

    preparing, release = threading.Event(), threading.Event()
    real_recover = LogSegment.recover

    def slow_recover(self: LogSegment) -> int:
        if self.directory == path and self.base_offset == first.base_offset:
            preparing.set()
            assert release.wait(10), "test never released the replacement"
        return real_recover(self)

    monkeypatch.setattr(LogSegment, "recover", slow_recover)
    result: list[LogSegment | None] = []
    cleaner = threading.Thread(target=lambda: result.append(log.replace_segment(first, cleaned)))
    cleaner.start()
    try:
        assert preparing.wait(10)
        # The replacement is mid-scan: an append from another thread must not wait for it.
        appended = threading.Event()
        end_before = log.log_end_offset
        appender = threading.Thread(target=lambda: (log.append_as_leader(batch(b"new", b"x"), 0), appended.set()))
        appender.start()
        assert appended.wait(5), "append blocked behind the segment replacement"
        appender.join()
        assert log.log_end_offset == end_before + 1 and not result
    finally:
        release.set()
        cleaner.join(10)
    new = result[0]
    assert new is not None and log.segments[0] is new and new.base_offset == first.base_offset
    assert new.log_path == first.log_path and first.deleted
    names = os.listdir(path)
    assert not [n for n in names if n.endswith(CLEANED_SUFFIX)]
    after = offsets(log)
    assert not set(dropped) & set(after) and after[: len(kept)] == kept
    assert after[-1] == log.log_end_offset - 1
    assert new.translate_offset(kept[-1]) is not None  # the new index answers lookups
    log.close()

    reopened = open_log(path)  # a restart sees the new segment, complete
    assert offsets(reopened) == after
    reopened.close()


def test_replacement_of_a_vanished_segment_is_dropped(tmp_path: str) -> None:
    path = os.path.join(str(tmp_path), "t-0")
    log = open_log(path)
    for i in range(12):
        log.append_as_leader(batch(b"k%d" % i, b"v" * 40), 0)
    first = log.segments[0]
    cleaned, _ = write_cleaned_copy(first, skip_first=1)
    log.update_high_watermark(log.log_end_offset)
    log.delete_records(log.segments[1].base_offset)
    log.delete_old_segments()
    assert first not in log.segments
    assert log.replace_segment(first, cleaned) is None
    assert not [n for n in os.listdir(path) if n.endswith(CLEANED_SUFFIX)]
    log.close()
