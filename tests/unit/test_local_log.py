"""LocalLog: the segment files of one partition under Log (append, roll, read, flush, truncation, removal)."""

from __future__ import annotations

import os
import threading

import pytest

from strom.protocol.record_batch import build_batch, iter_batches
from strom.storage.local_log import LocalLog
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_loader import LogLoader


def open_local(tmp_path: str, lock: threading.RLock | None = None, **props: str) -> LocalLog:
    directory = os.path.join(tmp_path, "t-0")
    config = LogConfig.from_props(props)
    loaded = LogLoader(directory, config, now_ms=0).load()
    return LocalLog(directory, config, loaded.segments, loaded.log_end_offset, loaded.recovery_point,
                    lock or threading.RLock(), now_ms=0)


def append(local: LocalLog, n: int, value: bytes = b"v" * 50) -> None:
    """n one-record batches at the end, rolling when the active segment is full (as Log does)."""
    for _ in range(n):
        offset = local.end_offset
        data = build_batch([(None, value, [], 1_000 + offset)], base_offset=offset)
        (h,) = iter_batches(data)
        if local.roll_reason(h.size, h.max_timestamp, h.last_offset, 0) is not None:
            local.roll(0)
        local.append([data], [(h.last_offset, h.max_timestamp, h.size)], h.next_offset)


def offsets_read(local: LocalLog, start: int, limit: int, max_bytes: int = 10**6) -> list[int]:
    return [h.base_offset for h in iter_batches(local.read(start, max_bytes, limit, True).to_bytes())]


def files(local: LocalLog, suffix: str) -> list[str]:
    return sorted(f for f in os.listdir(local.directory) if f.endswith(suffix))


def test_appends_roll_into_segments_named_after_their_base_offsets_and_reads_span_them(tmp_path: str) -> None:
    local = open_local(tmp_path, **{"segment.bytes": "300"})
    append(local, 10)
    bases = [s.base_offset for s in local.segments]
    assert local.end_offset == 10 and len(bases) > 2 and bases[0] == 0
    assert files(local, ".log") == [f"{b:020d}.log" for b in bases]
    assert local.segment_for(bases[1]) is local.segments[1]
    assert local.segment_for(bases[1] + 1).base_offset == bases[1]
    assert offsets_read(local, 0, 10) == list(range(10))
    assert offsets_read(local, 3, 7) == [3, 4, 5, 6]  # the limit is exclusive, across segments
    assert offsets_read(local, 10, 10) == []
    one = local.read(0, 1, 10, True)  # max_bytes below one batch: still the first batch, whole
    assert [h.base_offset for h in iter_batches(one.to_bytes())] == [0] and one.first_batch_offset == 0
    assert local.read(0, 1, 10, False).slices == []
    local.close()


def test_rolling_an_empty_active_segment_at_the_end_changes_nothing(tmp_path: str) -> None:
    local = open_local(tmp_path)
    assert local.active_is_empty_at_end
    first = local.active_segment
    assert local.roll(0) is first and len(local.segments) == 1
    append(local, 2)
    assert not local.active_is_empty_at_end
    new = local.roll(0)
    assert new.base_offset == 2 and local.active_segment is new and local.active_is_empty_at_end
    assert local.roll(0) is new
    local.close()


def test_flush_moves_the_recovery_point_and_a_roll_asks_for_one(tmp_path: str) -> None:
    local = open_local(tmp_path, **{"flush.ms": "1000"})
    append(local, 3)
    assert local.recovery_point == 0
    assert not local.needs_flush(500) and local.needs_flush(1_000)
    local.flush(2, now_ms=1_000)
    assert local.recovery_point == 2
    local.flush(now_ms=1_000)
    assert local.recovery_point == 3 and not local.needs_flush(1_500)
    local.roll(0)
    assert local.needs_flush(1_001)  # the rolled segment (and the dir entry) are not yet durable
    local.flush(now_ms=1_001)
    assert not local.needs_flush(1_002)
    local.close()


def test_truncation_drops_later_segments_and_pulls_back_the_end_and_the_recovery_point(tmp_path: str) -> None:
    local = open_local(tmp_path, **{"segment.bytes": "300", "file.delete.delay.ms": "0"})
    append(local, 10)
    local.flush()
    bases = [s.base_offset for s in local.segments]
    cut = bases[1] + 1
    local.truncate_to(cut)
    assert local.end_offset == cut and local.recovery_point == cut
    assert [s.base_offset for s in local.segments] == bases[:2]
    assert files(local, ".log") == [f"{b:020d}.log" for b in bases[:2]]
    assert offsets_read(local, 0, local.end_offset) == list(range(cut))
    append(local, 2)  # appends continue at the new end
    assert offsets_read(local, cut - 1, local.end_offset) == [cut - 1, cut, cut + 1]
    local.close()


def test_truncating_fully_restarts_the_local_log_empty_at_an_offset(tmp_path: str) -> None:
    local = open_local(tmp_path, **{"segment.bytes": "300", "file.delete.delay.ms": "0"})
    append(local, 6)
    local.flush()
    local.truncate_fully_and_start_at(40)
    assert (local.first_base_offset, local.end_offset, local.recovery_point) == (40, 40, 6)
    assert files(local, ".log") == [f"{40:020d}.log"]
    append(local, 1)
    assert offsets_read(local, 40, 41) == [40]
    local.close()


def test_removed_segments_leave_the_list_at_once_and_their_files_on_rename(tmp_path: str) -> None:
    local = open_local(tmp_path, **{"segment.bytes": "300", "file.delete.delay.ms": "60000"})
    append(local, 10)
    bases = [s.base_offset for s in local.segments]
    with pytest.raises(ValueError):
        local.remove_oldest_segments(len(bases))  # the active segment always stays
    local.remove_oldest_segments(2)
    assert local.first_base_offset == bases[2]
    assert offsets_read(local, bases[2], 10)[0] == bases[2]
    assert f"{bases[0]:020d}.log" in files(local, ".log")  # renamed later, outside the lock
    local.delete_removed_segments()
    assert files(local, ".log") == [f"{b:020d}.log" for b in bases[2:]]
    assert files(local, ".log.deleted") == [f"{b:020d}.log.deleted" for b in bases[:2]]
    local.close()


def test_renaming_removed_segments_does_not_wait_for_the_lock_the_loop_appends_under(tmp_path: str) -> None:
    lock = threading.RLock()
    local = open_local(tmp_path, lock, **{"segment.bytes": "300", "file.delete.delay.ms": "0"})
    append(local, 10)
    local.remove_oldest_segments(1)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        renamer = threading.Thread(target=local.delete_removed_segments)
        renamer.start()
        renamer.join(30)
        assert not renamer.is_alive()
        assert f"{0:020d}.log" not in files(local, ".log")
    finally:
        release.set()
        holder.join(30)
    local.close()


def test_closing_marks_the_local_log_closed_and_delete_removes_its_directory(tmp_path: str) -> None:
    local = open_local(tmp_path)
    append(local, 1)
    assert local.close() and local.closed
    local.flush()  # a closed log has nothing to flush: no error
    assert not local.needs_flush(10**12)
    local.delete()
    assert not os.path.exists(local.directory)


def test_the_log_start_offset_lives_above_the_local_log(tmp_path: str) -> None:
    """DeleteRecords inside a segment moves Log's start, not where local data starts."""
    log = Log(os.path.join(tmp_path, "t-0"), LogConfig.from_props({"segment.bytes": "300"}), now_ms=0)
    for i in range(10):
        log.append_as_leader(build_batch([(None, b"v" * 50, [], 1_000 + i)]), 0)
    log.update_high_watermark(log.log_end_offset)
    second = log.segments[1].base_offset
    assert log.delete_records(second + 1) == second + 1
    assert log.log_start_offset == second + 1
    assert log.segments[0].base_offset == second  # the segment holding the new start stays
    assert log.recovery_point >= second + 1
    log.close()
