"""Clean shutdown and start-up cost with many partitions: calls counted, never timed.

A clean shutdown fsyncs only what was written since the last flush or clean load: a log nothing was
written to costs no fsync. Loading a partition lists its directory once. After a crash, a segment
whose batches all lie below the recovery point is not recovered.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from strom.protocol.record_batch import build_batch
from strom.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager

PARTITIONS = 30
RECORDS = 5

def loaded(path: Path) -> LogManager:
    mgr = LogManager([str(path)])
    mgr.load_logs()
    return mgr


def fill(mgr: LogManager) -> None:
    for p in range(PARTITIONS):
        lg = mgr.get_or_create_log("t", p)
        for i in range(RECORDS):
            lg.append_as_leader(build_batch([(b"k", b"v%d" % i, [], 1_000 + i)]), 0)
        lg.high_watermark = lg.log_end_offset


def assert_all_records_back(path: Path) -> LogManager:
    mgr = loaded(path)
    for p in range(PARTITIONS):
        lg = mgr.get_log("t", p)
        assert lg is not None and lg.log_end_offset == RECORDS
        assert lg.read(RECORDS - 1, 1_000).to_bytes()  # the last record reads back
    return mgr


@pytest.fixture
def count_calls(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Counter[str]]:
    """Count calls of ``os.<name>`` (they still happen)."""
    counts: Counter[str] = Counter()

    def install(name: str) -> Counter[str]:
        real = getattr(os, name)

        def counting(*args: object, **kwargs: object) -> object:
            counts[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(os, name, counting)
        return counts

    return install


def test_second_clean_shutdown_without_writes_fsyncs_nothing_per_partition(
    tmp_path: Path, count_calls  # noqa: ANN001
) -> None:
    mgr = loaded(tmp_path)
    fill(mgr)
    calls = count_calls("fsync")
    mgr.shutdown()
    # The first one flushes what was written: the segment file of each partition, nothing else per partition.
    assert PARTITIONS <= calls["fsync"] <= PARTITIONS + 8, calls
    mgr = assert_all_records_back(tmp_path)
    calls.clear()
    mgr.shutdown()  # nothing was written since the load: segments, indexes and snapshots are durable
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert calls["fsync"] <= 8, calls
    assert_all_records_back(tmp_path).shutdown()


def test_a_write_after_a_clean_load_is_made_durable_again(tmp_path: Path) -> None:
    """Skipping unchanged logs must not skip a changed one: its new records are flushed."""
    mgr = loaded(tmp_path)
    fill(mgr)
    mgr.shutdown()
    mgr = loaded(tmp_path)
    lg = mgr.get_log("t", 0)
    assert lg is not None
    lg.append_as_leader(build_batch([(b"k", b"more", [], 2_000)]), 0)
    mgr.shutdown()
    assert OffsetCheckpointFile(str(tmp_path / RECOVERY_POINT_CHECKPOINT)).read()[("t", 0)] == RECORDS + 1
    mgr = loaded(tmp_path)
    lg = mgr.get_log("t", 0)
    assert lg is not None and lg.log_end_offset == RECORDS + 1
    mgr.shutdown()


def test_loading_a_partition_lists_its_directory_once(tmp_path: Path, count_calls) -> None:  # noqa: ANN001
    mgr = loaded(tmp_path)
    fill(mgr)
    mgr.shutdown()
    calls = count_calls("listdir")
    mgr = loaded(tmp_path)
    assert len(mgr.all_logs()) == PARTITIONS
    assert calls["listdir"] <= PARTITIONS + 2, calls  # + the log dir itself
    mgr.shutdown()


def crashed(path: Path) -> LogManager:
    """Load ``path`` as after a kill -9: the running manager's files stay as they are, no shutdown."""
    assert not (path / CLEAN_SHUTDOWN_FILE).exists()
    return loaded(path)


def test_crash_after_a_clean_start_recovers_only_what_was_written_since(tmp_path: Path) -> None:
    mgr = loaded(tmp_path)
    fill(mgr)
    mgr.shutdown()
    mgr = assert_all_records_back(tmp_path)
    mgr.checkpoint()  # recovery points as of the clean load, as the periodic checkpoint writes them
    written = mgr.get_log("t", 1)
    torn = mgr.get_log("t", 2)
    assert written is not None and torn is not None
    written.append_as_leader(build_batch([(b"k", b"after", [], 9_000)]), 0)
    torn.append_as_leader(build_batch([(b"k", b"torn", [], 9_000)]), 0)
    with open(torn.active_segment.log_path, "r+b") as f:
        f.truncate(os.path.getsize(torn.active_segment.log_path) - 3)

    mgr = crashed(tmp_path)
    recovered = {tp: lg.recovered_segments for tp, lg in mgr.all_logs().items() if lg.recovered_segments}
    assert recovered == {("t", 1): 1, ("t", 2): 1}  # not the partitions nothing was written to
    assert mgr.get_log("t", 1).log_end_offset == RECORDS + 1  # type: ignore[union-attr]
    assert mgr.get_log("t", 2).log_end_offset == RECORDS  # type: ignore[union-attr]
    lg = mgr.get_log("t", 0)
    assert lg is not None and lg.log_end_offset == RECORDS
    assert lg.fetch_offset_by_timestamp(1_000 + RECORDS - 1) == (RECORDS - 1, 1_000 + RECORDS - 1)
    mgr.shutdown()


def test_crash_after_a_flush_keeps_the_largest_timestamp_of_unindexed_batches(tmp_path: Path) -> None:
    """Batches after the last index entry are not in the time index until the segment closes: a
    segment left unrecovered (all below the recovery point) still knows its largest timestamp."""
    mgr = loaded(tmp_path)
    lg = mgr.get_or_create_log("t", 0)
    for i in range(40):  # several index entries (4 KB apart), then a few batches after the last one
        lg.append_as_leader(build_batch([(b"k", b"x" * 500, [], 1_000 + i)]), 0)
    lg.flush()
    mgr.checkpoint()
    assert lg.recovery_point == 40

    mgr = crashed(tmp_path)
    lg = mgr.get_log("t", 0)
    assert lg is not None and lg.recovered_segments == 0
    assert lg.log_end_offset == 40
    assert lg.fetch_offset_by_timestamp(1_039) == (39, 1_039)
    assert lg.active_segment.max_timestamp_so_far == 1_039
    mgr.shutdown()


def test_crash_recovers_a_segment_whose_last_batch_is_corrupt_below_the_recovery_point(tmp_path: Path) -> None:
    """The recovery point comes from the last checkpoint: bytes below it that fail their CRC (rewritten
    since, not durable) are recovered, not trusted."""
    mgr = loaded(tmp_path)
    fill(mgr)
    mgr.shutdown()
    mgr = loaded(tmp_path)
    mgr.checkpoint()
    lg = mgr.get_log("t", 0)
    assert lg is not None
    path = lg.active_segment.log_path
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 2)
        f.write(b"\xff\xff")  # the last batch's payload no longer matches its CRC

    mgr = crashed(tmp_path)
    lg = mgr.get_log("t", 0)
    assert lg is not None and lg.recovered_segments == 1
    assert lg.log_end_offset == RECORDS - 1  # the corrupt batch is cut, as by any recovery
    mgr.shutdown()
