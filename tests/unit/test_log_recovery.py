"""LogLoader recovery: torn tails, flipped bytes, missing/corrupt indexes, crash leftovers."""

from __future__ import annotations

import os

from strom.protocol.record_batch import build_batch, iter_batches, parse_header
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.segment import LogSegment

CONFIG = {"segment.bytes": "1000", "index.interval.bytes": "150"}


def fill(directory: str, batches: int = 30, **props: str) -> tuple[Log, list[int]]:
    log = Log(directory, LogConfig.from_props({**CONFIG, **props}), now_ms=0)
    sizes = []
    for i in range(batches):
        data = build_batch([(b"k%d" % i, b"payload-%d" % i * 5, [], 1_000 + i)] * 2)
        sizes.append(len(data))
        log.append_as_leader(data, 0, now_ms=0)
    return log, sizes


def reopen(directory: str, recovery_point: int = 0, clean: bool = False) -> Log:
    return Log(directory, LogConfig.from_props(CONFIG), recovery_point=recovery_point, clean_shutdown=clean)


def delete_indexes(directory: str) -> None:
    for name in os.listdir(directory):
        if name.endswith((".index", ".timeindex")):
            os.unlink(os.path.join(directory, name))


def assert_fully_readable(log: Log, gaps: range = range(0)) -> None:
    for offset in range(log.log_start_offset, log.log_end_offset):
        header = parse_header(log.read(offset, 1).to_bytes())
        if offset in gaps:
            assert header.base_offset >= gaps.stop  # a read in the gap lands on the next batch
        else:
            assert header.base_offset <= offset <= header.last_offset


def test_torn_tail_is_truncated_and_indexes_rebuilt(tmp_path: str) -> None:
    directory = os.path.join(tmp_path, "torn-0")
    log, sizes = fill(directory)
    last = log.active_segment
    last_path, base = last.log_path, last.base_offset
    log.close()
    size = os.path.getsize(last_path)
    with open(last_path, "r+b") as f:
        f.truncate(size - 7)  # the final batch is torn
    delete_indexes(directory)
    log = reopen(directory)
    assert log.log_end_offset == 58  # 30 batches of 2, the last one lost
    assert os.path.getsize(last_path) == size - sizes[-1]
    for seg in log.segments[:-1]:
        assert os.path.exists(seg.offset_index.path) and os.path.exists(seg.time_index.path)
    assert log.active_segment.keeps_indexes_in_memory()  # small: its files are not written
    assert all(seg.offset_index.entries for seg in log.segments)
    assert log.segment_for(57).base_offset == base
    assert_fully_readable(log)
    assert log.append_as_leader(build_batch([(None, b"new", [], 5)]), 0).first_offset == 58
    log.close()


def test_flipped_byte_truncates_only_its_own_segment(tmp_path: str, caplog) -> None:  # noqa: ANN001
    directory = os.path.join(tmp_path, "flip-0")
    log, _ = fill(directory)
    segments = log.segments
    assert len(segments) >= 3
    leo = log.log_end_offset
    victim = segments[1]
    victim_path = victim.log_path
    # Flip a payload byte inside the third batch of the second segment.
    with open(victim_path, "rb") as f:
        data = f.read()
    headers = list(iter_batches(data))
    target = headers[2]
    log.close()
    with open(victim_path, "r+b") as f:
        f.seek(target.position + target.size - 4)
        byte = f.read(1)
        f.seek(target.position + target.size - 4)
        f.write(bytes([byte[0] ^ 0x40]))
    delete_indexes(directory)
    log = reopen(directory, recovery_point=segments[1].base_offset)
    # Later segments are kept: only the damaged segment's tail is lost.
    assert log.log_end_offset == leo
    assert [s.base_offset for s in log.segments] == [s.base_offset for s in segments]
    assert os.path.getsize(victim_path) == target.position
    lost = range(target.base_offset, segments[2].base_offset)
    assert_fully_readable(log, gaps=lost)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any(f"dropped offsets {lost.start} to {lost.stop - 1}" in m for m in errors), errors
    log.close()


def test_corrupt_base_offset_outside_crc_is_caught(tmp_path: str) -> None:
    """baseOffset is not covered by the CRC; recovery still rejects offsets going backwards."""
    directory = os.path.join(tmp_path, "offs-0")
    log, _ = fill(directory, batches=4)
    path = log.active_segment.log_path
    log.close()
    with open(path, "rb") as f:
        headers = list(iter_batches(f.read()))
    with open(path, "r+b") as f:
        f.seek(headers[3].position)
        f.write((1).to_bytes(8, "big"))
    log = reopen(directory)
    assert log.log_end_offset == headers[3].base_offset
    log.close()


def test_crash_with_preallocated_indexes_of_older_versions(tmp_path: str) -> None:
    """No close(), and the active index is a preallocated file with a zero tail (older layout)."""
    directory = os.path.join(tmp_path, "crash-0")
    log, _ = fill(directory, batches=12)
    leo = log.log_end_offset
    active_index = log.active_segment.offset_index.path
    with open(active_index, "wb") as f:
        f.truncate(LogConfig().segment_index_bytes)
    del log  # simulated crash: nothing flushed or trimmed
    log = reopen(directory)
    assert log.log_end_offset == leo
    assert_fully_readable(log)
    log.close()
    assert os.path.getsize(active_index) % 8 == 0
    assert os.path.getsize(active_index) < LogConfig().segment_index_bytes


def test_clean_reopen_skips_recovery_but_rebuilds_missing_index(tmp_path: str) -> None:
    directory = os.path.join(tmp_path, "clean-0")
    log, _ = fill(directory, batches=20)
    leo = log.log_end_offset
    first_index = log.segments[0].offset_index.path
    log.close()
    os.unlink(first_index)
    log = reopen(directory, recovery_point=leo, clean=True)
    assert log.log_end_offset == leo and log.recovery_point == leo
    assert os.path.exists(first_index) and log.segments[0].offset_index.entries > 0
    assert_fully_readable(log)
    log.close()


def test_corrupt_index_is_rebuilt(tmp_path: str) -> None:
    directory = os.path.join(tmp_path, "badidx-0")
    log, _ = fill(directory, batches=20)
    first = log.segments[0]
    index_path, entries = first.offset_index.path, first.offset_index.entries
    assert entries > 0
    log.close()
    with open(index_path, "r+b") as f:
        f.seek(0)
        f.write(b"\x7f\xff\xff\xff")  # first relative offset larger than the last
    log = reopen(directory, clean=True)
    assert log.segments[0].offset_index.entries == entries
    assert_fully_readable(log)
    log.close()


def test_leftover_files_are_removed(tmp_path: str) -> None:
    directory = os.path.join(tmp_path, "left-0")
    log, _ = fill(directory, batches=3)
    log.close()
    junk = ["00000000000000000000.log.deleted", "00000000000000000000.index.swap", "x.cleaned", "99.index"]
    for name in junk:
        with open(os.path.join(directory, name), "wb") as f:
            f.write(b"junk")
    log = reopen(directory)
    names = os.listdir(directory)
    assert not any(name in names for name in junk)
    assert log.log_end_offset == 6
    log.close()


def test_segment_recover_counts_truncated_bytes(tmp_path: str) -> None:
    seg = LogSegment(str(tmp_path), 0, LogConfig(), now_ms=0)
    seg.append_records(build_batch([(None, b"a", [], 1)]))
    with open(seg.log_path, "ab") as f:
        f.write(b"\x00" * 30)
    assert seg.recover() == 30
    assert seg.next_offset() == 1 and seg.size == os.path.getsize(seg.log_path)
    seg.close()
