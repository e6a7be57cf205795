"""Log keeps its leader epoch cache in step: appends, truncation, log start moves, recovery, rebuild."""

from __future__ import annotations

import os

from strom.protocol.record_batch import build_batch
from strom.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

UNDEFINED = (-1, -1)


def batch(n: int = 1, ts: int = 1_000) -> bytes:
    return build_batch([(b"k", b"v" * 20, [], ts + i) for i in range(n)])


def open_log(directory: str, clean: bool = False, recovery_point: int = 0, **props: str) -> Log:
    return Log(directory, LogConfig.from_props(props), recovery_point=recovery_point, clean_shutdown=clean,
               now_ms=0)


def entries(log: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries]


def checkpoint(log: Log) -> str:
    return os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT)


def epochs_log(tmp_path: str, name: str = "t-0", **props: str) -> Log:
    """Offsets 0-2 in epoch 0, 3-4 in epoch 2, 5-8 in epoch 5; LEO 9."""
    log = open_log(os.path.join(tmp_path, name), **props)
    log.append_as_leader(batch(3), 0)
    log.append_as_leader(batch(2), 2)
    log.append_as_leader(batch(1), 5)
    log.append_as_leader(batch(3), 5)
    return log


def test_empty_log_has_no_epochs(tmp_path: str) -> None:
    log = open_log(os.path.join(tmp_path, "e-0"))
    assert log.latest_epoch is None and log.end_offset_for_epoch(0) == UNDEFINED
    assert not os.path.exists(checkpoint(log))
    log.close()


def test_leader_appends_record_each_epoch_start_once(tmp_path: str) -> None:
    log = epochs_log(tmp_path)
    assert entries(log) == [(0, 0), (2, 3), (5, 5)]
    assert log.latest_epoch == 5
    with open(checkpoint(log)) as f:
        assert f.read() == "0\n3\n0 0\n2 3\n5 5\n"
    assert log.end_offset_for_epoch(0) == (0, 3)
    assert log.end_offset_for_epoch(1) == (0, 3)
    assert log.end_offset_for_epoch(2) == (2, 5)
    assert log.end_offset_for_epoch(5) == (5, 9)  # the latest epoch ends at the LEO
    assert log.end_offset_for_epoch(6) == UNDEFINED
    log.close()


def test_same_epoch_appends_do_not_rewrite_the_checkpoint(tmp_path: str) -> None:
    log = open_log(os.path.join(tmp_path, "hot-0"))
    log.append_as_leader(batch(), 3)
    inode = os.stat(checkpoint(log)).st_ino  # every write replaces the file, so a new inode
    for _ in range(20):
        log.append_as_leader(batch(), 3)
    assert os.stat(checkpoint(log)).st_ino == inode
    assert entries(log) == [(3, 0)]
    log.close()


def test_follower_appends_take_epochs_from_batch_headers(tmp_path: str) -> None:
    leader = epochs_log(tmp_path, "lead-0")
    data = leader.read(0, 10**6).to_bytes()
    follower = open_log(os.path.join(tmp_path, "follow-0"))
    follower.append_as_follower(data)
    assert entries(follower) == entries(leader)
    assert follower.end_offset_for_epoch(2) == (2, 5)
    leader.append_as_leader(batch(2), 7)
    follower.append_as_follower(leader.read(9, 10**6).to_bytes())
    assert entries(follower) == [(0, 0), (2, 3), (5, 5), (7, 9)]
    leader.close()
    follower.close()


def test_truncate_to_drops_epochs_past_the_new_leo(tmp_path: str) -> None:
    log = epochs_log(tmp_path)
    assert log.truncate_to(5)
    assert entries(log) == [(0, 0), (2, 3)]
    assert log.end_offset_for_epoch(2) == (2, 5)
    assert log.truncate_to(2)  # inside epoch 0's batch: the whole batch goes (LEO 0)
    assert log.log_end_offset == 0 and entries(log) == []
    log.append_as_leader(batch(), 9)
    assert entries(log) == [(9, 0)]
    log.close()
    assert entries(open_log(log.directory)) == [(9, 0)]


def test_truncate_fully_clears_the_cache(tmp_path: str) -> None:
    log = epochs_log(tmp_path)
    log.truncate_fully_and_start_at(100)
    assert entries(log) == [] and log.end_offset_for_epoch(5) == UNDEFINED
    log.append_as_leader(batch(), 6)
    assert entries(log) == [(6, 100)]
    log.close()


def test_delete_records_truncates_from_start(tmp_path: str) -> None:
    log = epochs_log(tmp_path)
    log.update_high_watermark(9)
    log.delete_records(4)
    assert entries(log) == [(2, 4), (5, 5)]
    assert log.end_offset_for_epoch(0) == (0, 4)  # older than anything left: the log start
    log.close()
    assert entries(open_log(log.directory)) == [(2, 4), (5, 5)]


def test_retention_truncates_from_start(tmp_path: str) -> None:
    log = open_log(os.path.join(tmp_path, "ret-0"), **{"segment.bytes": "200", "retention.ms": "10000",
                                                       "file.delete.delay.ms": "0"})
    for epoch in range(6):
        log.append_as_leader(batch(2, ts=1_000 + 1_000 * epoch), epoch)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments(now_ms=14_500) > 0
    start = log.log_start_offset
    assert start > 0
    first = entries(log)[0]
    assert first == (start // 2, start)
    log.close()


def test_reopen_after_clean_close_keeps_entries(tmp_path: str) -> None:
    log = epochs_log(tmp_path)
    log.close()
    again = open_log(log.directory, clean=True)
    assert entries(again) == [(0, 0), (2, 3), (5, 5)]
    assert again.end_offset_for_epoch(5) == (5, 9)
    again.close()


def test_recovery_cutting_the_tail_truncates_the_cache(tmp_path: str) -> None:
    log = epochs_log(tmp_path)
    log.append_as_leader(batch(2), 8)  # offsets 9-10 in epoch 8, then torn
    path = log.active_segment.log_path
    log.close()
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 5)
    again = open_log(log.directory)
    assert again.log_end_offset == 9
    assert entries(again) == [(0, 0), (2, 3), (5, 5)]
    with open(checkpoint(again)) as f:
        assert f.read() == "0\n3\n0 0\n2 3\n5 5\n"
    again.close()


def test_missing_checkpoint_is_rebuilt_from_batch_headers(tmp_path: str) -> None:
    log = epochs_log(tmp_path, **{"segment.bytes": "200"})
    assert len(log.segments) > 1
    log.close()
    os.unlink(checkpoint(log))
    again = open_log(log.directory, clean=True, **{"segment.bytes": "200"})
    assert entries(again) == [(0, 0), (2, 3), (5, 5)]
    assert os.path.exists(checkpoint(again))
    again.close()


def test_garbage_checkpoint_is_rebuilt(tmp_path: str) -> None:
    log = epochs_log(tmp_path)
    log.close()
    with open(checkpoint(log), "wb") as f:
        f.write(b"\x00\x01 not a checkpoint")
    again = open_log(log.directory, clean=True)
    assert entries(again) == [(0, 0), (2, 3), (5, 5)]
    again.close()
    with open(checkpoint(log)) as f:
        assert f.read() == "0\n3\n0 0\n2 3\n5 5\n"


def test_rebuild_skips_data_below_the_log_start(tmp_path: str) -> None:
    log = epochs_log(tmp_path)
    log.close()
    os.unlink(checkpoint(log))
    again = Log(log.directory, LogConfig.from_props({}), log_start_offset=4, clean_shutdown=True, now_ms=0)
    assert entries(again) == [(2, 4), (5, 5)]
    again.close()


def test_stale_entries_past_the_leo_are_dropped_at_load(tmp_path: str) -> None:
    log = epochs_log(tmp_path)
    log.close()
    with open(checkpoint(log), "w") as f:
        f.write("0\n4\n0 0\n2 3\n5 5\n9 50\n")  # a truncation whose lazy write was lost
    again = open_log(log.directory, clean=True)
    assert entries(again) == [(0, 0), (2, 3), (5, 5)]
    again.close()


def test_epoch_assignments_are_made_durable_by_the_next_flush(tmp_path: str, monkeypatch) -> None:
    """A new epoch's checkpoint is written without fsync (ADR 0047); the log's flush fsyncs it before
    the recovery point moves, and a flush with nothing new to sync costs no fsync."""
    synced: list[str] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    log = open_log(str(tmp_path / "t-0"))
    log.append_as_leader(batch(3), 0)
    log.assign_epoch_start_offset(1)
    log.assign_epoch_starts([(2, 3)])
    assert entries(log) == [(0, 0), (2, 3)] and checkpoint(log) not in synced
    with open(checkpoint(log)) as f:
        assert f.read() == "0\n2\n0 0\n2 3\n"  # written, only not yet durable
    log.flush()
    assert checkpoint(log) in synced and log.recovery_point == 3
    synced.clear()
    log.flush()
    assert checkpoint(log) not in synced
    log.close()


def test_an_epoch_lost_with_an_unsynced_checkpoint_comes_back_from_the_log(tmp_path: str) -> None:
    """A power loss may leave the checkpoint as the last flush made it durable, without the epoch a new
    leader assigned since (written, not fsynced). The unclean restart reads the epochs of the tail above
    the recovery point from the batch headers, so OffsetForLeaderEpoch still tells a follower of the
    old epoch where to truncate (offset 3), not the LEO."""
    log = open_log(str(tmp_path / "t-0"))
    log.append_as_leader(batch(3), 0)
    log.flush()
    recovery_point = log.recovery_point
    with open(checkpoint(log), "rb") as f:
        durable = f.read()
    log.assign_epoch_start_offset(4)  # leader again, in epoch 4, at the LEO 3
    log.append_as_leader(batch(2), 4)
    log.append_as_leader(batch(1), 4)
    assert log.end_offset_for_epoch(0) == (0, 3)
    log.close()
    with open(checkpoint(log), "wb") as f:  # what the disk held after the power loss
        f.write(durable)
    reopened = open_log(log.directory, recovery_point=recovery_point)
    assert entries(reopened) == [(0, 0), (4, 3)]
    assert reopened.end_offset_for_epoch(0) == (0, 3)
    assert reopened.end_offset_for_epoch(3) == (0, 3)
    assert reopened.end_offset_for_epoch(4) == (4, 6)
    reopened.close()
    with open(checkpoint(log), "rb") as f:
        assert f.read() == b"0\n2\n0 0\n4 3\n"  # repaired on disk too


def test_a_clean_restart_trusts_the_checkpoint_and_a_matching_one_is_left_alone(tmp_path: str, caplog) -> None:
    """Only an unclean shutdown checks the file against the tail; a file that matches the log is not rewritten."""
    log = epochs_log(tmp_path)
    log.close()
    mtime = os.stat(checkpoint(log)).st_mtime_ns
    reopened = open_log(log.directory, recovery_point=0)
    assert entries(reopened) == [(0, 0), (2, 3), (5, 5)]
    assert os.stat(checkpoint(log)).st_mtime_ns == mtime and "did not match" not in caplog.text
    reopened.close()


def test_a_partitions_first_checkpoint_is_never_fsynced(tmp_path: str, monkeypatch) -> None:
    """The first file has no older version a crash could fall back to: lost or torn, it is rebuilt
    from the batches, so neither the assignment nor the flush nor the shutdown fsyncs it."""
    synced: list[str] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    log = open_log(str(tmp_path / "t-0"))
    log.assign_epoch_start_offset(0)
    log.append_as_leader(batch(3), 0)
    log.flush()
    log.close()
    assert checkpoint(log) not in synced
    os.remove(checkpoint(log))  # a power loss took it
    reopened = open_log(log.directory)
    assert entries(reopened) == [(0, 0)] and reopened.end_offset_for_epoch(0) == (0, 3)
    reopened.close()


def test_a_small_checkpoint_is_rewritten_in_place_and_surplus_lines_make_the_load_rebuild(tmp_path: str) -> None:
    """Without fsync, a file of one sector is rewritten in place (no temp file, no rename: the same inode).
    A kill -9 between the write and a shortening truncate would leave surplus lines: the load then reads
    the file as malformed and rebuilds the entries from the batches."""
    log = epochs_log(tmp_path)
    inode = os.stat(checkpoint(log)).st_ino
    log.truncate_to(5)  # drops (5, 5): a shorter file
    assert entries(log) == [(0, 0), (2, 3)]
    assert os.stat(checkpoint(log)).st_ino == inode
    with open(checkpoint(log), "rb") as f:
        assert f.read() == b"0\n2\n0 0\n2 3\n"
    log.append_as_leader(batch(2), 7)
    log.close()
    with open(checkpoint(log), "ab") as f:  # the truncate of a longer earlier version never happened
        f.write(b"9 9\n")
    reopened = open_log(log.directory, recovery_point=0)
    assert entries(reopened) == [(0, 0), (2, 3), (7, 5)]
    reopened.close()
