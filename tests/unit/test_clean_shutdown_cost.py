"""What a clean shutdown writes, and what the next start rebuilds instead: calls and files counted, never timed.

Only the batches (and the checkpoints) must be durable before the clean-shutdown marker. A small active
segment keeps its indexes in memory and a load rebuilds them from its batches; a producer snapshot is
written without fsync, and not at all when the load would replay only that small segment anyway.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path

import pytest
from kafka.errors import OutOfOrderSequenceNumberError

from strom.protocol.record_batch import build_batch
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from strom.storage.segment import SMALL_SEGMENT_BYTES

PARTITIONS = 30
PID = 4_000


def loaded(path: Path) -> LogManager:
    mgr = LogManager([str(path)])
    mgr.load_logs()
    return mgr


def files_of(path: Path) -> dict[str, set[str]]:
    return {d.name: set(os.listdir(d)) for d in path.iterdir() if d.is_dir()}


def idempotent_batch(seq: int, value: bytes = b"v", records: int = 1) -> bytes:
    return build_batch([(b"k", value, [], 1_000 + seq + i) for i in range(records)],
                       producer_id=PID, producer_epoch=0, base_sequence=seq)


@pytest.fixture
def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count os.fsync calls by the kind of file (they still happen)."""
    counts: Counter[str] = Counter()
    real = os.fsync

    def counting(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        counts[os.path.splitext(name)[1] or "dir"] += 1
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return counts


def test_clean_shutdown_of_logs_with_a_little_data_fsyncs_their_segments_and_creates_no_file(
    tmp_path: Path, count_fsyncs: Counter[str]
) -> None:
    mgr = loaded(tmp_path)
    for p in range(PARTITIONS):
        lg = mgr.get_or_create_log("t", p)
        for seq in range(0, 10, 2):  # an idempotent producer: its state is what a snapshot would hold
            lg.append_as_leader(idempotent_batch(seq, b"x" * 500, records=2), 0)
    before = files_of(tmp_path)
    count_fsyncs.clear()
    mgr.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert files_of(tmp_path) == before  # no index file, no producer snapshot
    assert count_fsyncs[".log"] == PARTITIONS
    assert sum(count_fsyncs.values()) - PARTITIONS <= 8, count_fsyncs  # checkpoints, marker and dirs only

    mgr = loaded(tmp_path)
    for p in range(PARTITIONS):
        lg = mgr.get_log("t", p)
        assert lg is not None and lg.log_end_offset == 10
        assert lg.indexed_segments == 1
        dup = lg.append_as_leader(idempotent_batch(8, b"x" * 500, records=2), 0)  # a retry of the last batch
        assert dup.duplicate and (dup.first_offset, dup.last_offset) == (8, 9)
    mgr.shutdown()


def test_missing_active_segment_indexes_after_a_clean_shutdown_are_rebuilt_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mgr = loaded(tmp_path)
    lg = mgr.get_or_create_log("t", 0)
    for i in range(40):  # ~22 KB: several index entries (4 KB apart), below the small-segment limit
        lg.append_as_leader(build_batch([(b"k", b"x" * 500, [], 5_000 + 10 * i)]), 0)
    lg.high_watermark = lg.log_end_offset
    assert lg.active_segment.offset_index.entries >= 3
    mgr.shutdown()
    for name in os.listdir(tmp_path / "t-0"):  # (before this change they were written: lose them)
        if name.endswith((".index", ".timeindex")):
            os.unlink(tmp_path / "t-0" / name)

    with caplog.at_level(logging.INFO, logger="strom.storage"):
        mgr = loaded(tmp_path)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "indexed 1 small active segments from their batches" in caplog.text
    lg = mgr.get_log("t", 0)
    assert lg is not None and lg.recovered_segments == 0 and lg.log_end_offset == 40
    assert lg.active_segment.offset_index.entries >= 3  # a real index, not a scan from the start each time
    for i in range(40):
        assert lg.read(i, 1).first_batch_offset == i
        assert lg.fetch_offset_by_timestamp(5_000 + 10 * i) == (i, 5_000 + 10 * i)
        assert lg.fetch_offset_by_timestamp(5_000 + 10 * i - 5) == (i, 5_000 + 10 * i)
    assert lg.fetch_offset_by_timestamp(5_000 + 10 * 40) is None
    assert lg.fetch_offset_by_timestamp(-3) == (39, 5_390)  # the largest timestamp
    assert lg.append_as_leader(build_batch([(b"k", b"after", [], 9_000)]), 0).first_offset == 40
    mgr.shutdown()


def test_lost_or_torn_producer_snapshot_after_a_clean_shutdown_still_rejects_duplicates(tmp_path: Path) -> None:
    """The snapshot is written without fsync (a big active segment) or not at all (a small one): a load
    that finds it torn or missing replays the batches and knows the producer's sequences all the same."""
    mgr = loaded(tmp_path)
    small = mgr.get_or_create_log("t", 0)
    big = mgr.get_or_create_log("t", 1)
    for seq in range(5):
        small.append_as_leader(idempotent_batch(seq), 0)
    seq = 0
    while big.active_segment.size <= SMALL_SEGMENT_BYTES:
        big.append_as_leader(idempotent_batch(seq, b"y" * 2_000), 0)
        seq += 1
    mgr.shutdown()
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".snapshot")]
    snapshots = [n for n in os.listdir(tmp_path / "t-1") if n.endswith(".snapshot")]
    assert snapshots == [f"{seq:020d}.snapshot"]
    with open(tmp_path / "t-1" / snapshots[0], "r+b") as f:  # torn: a power loss before write-back
        f.truncate(os.path.getsize(tmp_path / "t-1" / snapshots[0]) // 2)

    mgr = loaded(tmp_path)
    for p, last in ((0, 4), (1, seq - 1)):
        lg = mgr.get_log("t", p)
        assert lg is not None and lg.log_end_offset == last + 1
        dup = lg.append_as_leader(idempotent_batch(last, b"y" * 2_000 if p else b"v"), 0)
        assert dup.duplicate and dup.first_offset == last
        with pytest.raises(OutOfOrderSequenceNumberError):
            lg.append_as_leader(idempotent_batch(last + 2), 0)
        assert lg.append_as_leader(idempotent_batch(last + 1), 0).first_offset == last + 1
    mgr.shutdown()


def test_big_active_segment_writes_its_indexes_and_losing_them_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, count_fsyncs: Counter[str]
) -> None:
    """Above the small-segment limit the shutdown writes (and fsyncs) the index files as before, so a
    load that misses them has found damage: it says so, and rebuilds them."""
    mgr = loaded(tmp_path)
    lg = mgr.get_or_create_log("t", 0)
    i = 0
    while lg.active_segment.size <= SMALL_SEGMENT_BYTES:
        lg.append_as_leader(build_batch([(b"k", b"z" * 2_000, [], 1_000 + i)]), 0)
        i += 1
    count_fsyncs.clear()
    mgr.shutdown()
    assert count_fsyncs[".index"] == count_fsyncs[".timeindex"] == 1
    assert count_fsyncs[".snapshot"] == 0  # (no producer here: no snapshot at all)
    os.unlink(tmp_path / "t-0" / f"{0:020d}.index")
    os.unlink(tmp_path / "t-0" / f"{0:020d}.timeindex")
    with caplog.at_level(logging.WARNING, logger="strom.storage"):
        mgr = loaded(tmp_path)
    assert "were missing after a clean shutdown" in caplog.text
    lg = mgr.get_log("t", 0)
    assert lg is not None and lg.log_end_offset == i
    assert lg.fetch_offset_by_timestamp(1_000 + i - 1) == (i - 1, 1_000 + i - 1)
    mgr.shutdown()


def test_crash_after_a_clean_start_indexes_the_small_active_segments_without_recovering_them(tmp_path: Path) -> None:
    mgr = loaded(tmp_path)
    for p in range(3):
        lg = mgr.get_or_create_log("t", p)
        for i in range(5):
            lg.append_as_leader(build_batch([(b"k", b"v%d" % i, [], 1_000 + i)]), 0)
    mgr.shutdown()
    mgr = loaded(tmp_path)
    mgr.checkpoint()  # recovery points as of the clean load
    mgr = loaded(tmp_path)  # as after a kill -9: no marker
    for p in range(3):
        lg = mgr.get_log("t", p)
        assert lg is not None and lg.recovered_segments == 0 and lg.indexed_segments == 1
        assert lg.log_end_offset == 5
        assert lg.fetch_offset_by_timestamp(1_003) == (3, 1_003)
    mgr.shutdown()


def test_rolled_segments_of_one_small_batch_load_quietly_after_a_clean_shutdown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One small batch per segment adds no offset-index entry; the rolled segment still has both files,
    so the next load does not take it for damage and recover it."""
    from strom.storage.log_config import LogConfig

    mgr = loaded(tmp_path)
    lg = mgr.get_or_create_log("t", 0, LogConfig.from_props({"segment.bytes": "1024"}))
    for i in range(6):
        lg.append_as_leader(build_batch([(b"k", b"x" * 600, [], 1_000 + i)]), 0)
    lg.high_watermark = lg.log_end_offset
    assert len(lg.segments) == 6
    mgr.shutdown()
    names = os.listdir(tmp_path / "t-0")
    for base in range(5):  # the rolled ones
        assert f"{base:020d}.index" in names and f"{base:020d}.timeindex" in names, sorted(names)

    with caplog.at_level(logging.INFO, logger="strom.storage"):
        mgr = loaded(tmp_path)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    lg = mgr.get_log("t", 0)
    assert lg is not None and lg.recovered_segments == 0 and lg.log_end_offset == 6
    assert [lg.read(i, 1).first_batch_offset for i in range(6)] == list(range(6))
    assert lg.fetch_offset_by_timestamp(1_003) == (3, 1_003)
    mgr.shutdown()
