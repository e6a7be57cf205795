"""Moving a log between log dirs on disk (storage.log_dir_moves): copy, reconcile, swap, and what a load
finds after a crash at each point. Real files in two temporary log dirs."""

from __future__ import annotations

import os
from pathlib import Path

from strom.broker.log_dir_mover import _copy_step
from strom.protocol.record_batch import build_batch
from strom.storage.log import Log, LogMovedError
from strom.storage.log_config import LogConfig
from strom.storage.log_dir_moves import (
    copy_batches,
    future_id,
    moved_away_dir,
    new_future_dir,
    reconcile,
    swap,
    sync_epochs,
)
from strom.storage.log_manager import LogManager

CONFIG = LogConfig.from_props({"segment.bytes": "4096"})


def batch(n: int = 5, value: bytes = b"v" * 100, **kw: int) -> bytes:
    return build_batch([(b"k", value, [], 1_000 + i) for i in range(n)], **kw)


def read_all(lg: Log) -> bytes:
    info = lg.read(lg.log_start_offset, 1 << 30)
    return b"".join(s.read() for s in info.slices)


def setup(tmp_path: Path) -> tuple[str, str, Log, Log]:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.makedirs(a)
    os.makedirs(b)
    current = Log(os.path.join(a, "t-0"), CONFIG, clean_shutdown=True)
    for i in range(20):
        current.append_as_leader(batch(producer_id=7, producer_epoch=0, base_sequence=i * 5), leader_epoch=1)
    future = Log(new_future_dir(b, "t", 0), CONFIG, clean_shutdown=True)
    return a, b, current, future


def test_swap_carries_everything_over_and_fences_the_old_log(tmp_path: Path) -> None:
    a, b, current, future = setup(tmp_path)
    assert copy_batches(current, future, 1 << 30) > 0
    current.append_as_leader(batch(producer_id=7, producer_epoch=0, base_sequence=100), leader_epoch=1)  # behind again
    current.assign_epoch_start_offset(3)  # an epoch assigned ahead of any batch: not in the data
    current.update_high_watermark(current.log_end_offset)
    swapped: list[bool] = []
    assert swap(current, future, os.path.join(b, "t-0"), lambda: swapped.append(True))
    assert swapped == [True]
    assert future.directory == os.path.join(b, "t-0") and os.path.isdir(future.directory)
    assert not os.path.exists(os.path.join(a, "t-0"))
    assert future.log_end_offset == current.log_end_offset and read_all(future) == read_all(current)
    assert future.leader_epoch_cache.epoch_entries == current.leader_epoch_cache.epoch_entries
    assert future.high_watermark == current.high_watermark
    assert future.producer_state.producers[7].last_seq == 104
    # A writer that raced the swap is told to retry on the new log.
    try:
        current.append_as_leader(batch(), leader_epoch=3)
        raise AssertionError("the replaced log took a write")
    except LogMovedError:
        pass
    # The moved log keeps working in its new dir: rolls create files there.
    for _ in range(10):
        future.append_as_leader(batch(), leader_epoch=3)
    assert len(future.segments) > 1 and all(s.log_path.startswith(future.directory) for s in future.segments)
    future.close()
    again = Log(future.directory, CONFIG, clean_shutdown=True, recovery_point=future.recovery_point)
    assert again.log_end_offset == future.log_end_offset
    assert again.producer_state.producers[7].last_seq == 104


def test_a_crash_between_the_two_renames_completes_the_move(tmp_path: Path) -> None:
    a, b, current, future = setup(tmp_path)
    copy_batches(current, future, 1 << 30)
    sync_epochs(current, future)
    expected, leo = read_all(current), current.log_end_offset
    # The first rename happened, then the process died.
    os.replace(current.directory, moved_away_dir(current, future_id(future)))
    current.close(snapshot=False)
    future.close()
    manager = LogManager([a, b])
    manager.load_logs()
    moved = manager.get_log("t", 0)
    assert moved is not None and moved.directory == os.path.join(b, "t-0")
    assert moved.log_end_offset == leo and read_all(moved) == expected
    assert not manager.future_logs
    assert sorted(os.listdir(b)) == ["t-0"]


def test_a_crash_while_copying_reloads_the_future_log(tmp_path: Path) -> None:
    a, b, current, future = setup(tmp_path)
    copy_batches(current, future, 2000)
    copied = future.log_end_offset
    assert 0 < copied < current.log_end_offset
    current.close()
    future.close()
    manager = LogManager([a, b])
    manager.load_logs()
    assert manager.log_dir_of("t", 0) == a
    resumed = manager.future_logs[("t", 0)]
    assert resumed.log_end_offset == copied
    copy_batches(manager.get_log("t", 0), resumed, 1 << 30)  # type: ignore[arg-type]
    assert read_all(resumed) == read_all(manager.get_log("t", 0))  # type: ignore[arg-type]


def test_a_future_log_without_its_current_log_is_not_served(tmp_path: Path) -> None:
    a, b, current, future = setup(tmp_path)
    copy_batches(current, future, 2000)
    future.close()
    current.close()
    os.rename(current.directory, os.path.join(a, "elsewhere"))  # as if its dir were missing
    manager = LogManager([a, b])
    manager.load_logs()
    assert manager.get_log("t", 0) is None and not manager.future_logs
    assert os.path.isdir(future.directory)  # nothing deleted


def test_reconcile_follows_a_truncation_of_the_current_log(tmp_path: Path) -> None:
    _, _, current, future = setup(tmp_path)
    copy_batches(current, future, 1 << 30)
    # The current log diverged (a follower truncated by epoch, then took the new leader's batches).
    current.truncate_to(50)
    for _ in range(3):
        current.append_as_follower(batch(base_offset=current.log_end_offset, partition_leader_epoch=2))
    reconcile(current, future)
    assert future.log_end_offset == 50
    copy_batches(current, future, 1 << 30)
    assert read_all(future) == read_all(current)
    # Retention removed everything the future log had copied: it starts over at the current log's start.
    current.update_high_watermark(current.log_end_offset)
    current.delete_records(current.log_end_offset - 5)
    current.delete_old_segments()
    future.truncate_to(current.segments[0].base_offset - 1)
    reconcile(current, future)
    assert future.log_end_offset == current.segments[0].base_offset
    copy_batches(current, future, 1 << 30)
    assert future.log_end_offset == current.log_end_offset


def test_writers_that_raced_the_swap_land_in_the_new_log(tmp_path: Path) -> None:
    import threading
    import uuid

    from strom.broker.partition import Partition
    from strom.metadata.store import PartitionState

    _, b, current, future = setup(tmp_path)
    part = Partition("t", 0, uuid.uuid4(), PartitionState(0, 1, 1, [1], [1]), current, 1)
    copy_batches(current, future, 1 << 30)
    results: list[object] = []
    with current._lock:  # the swap's lock is taken: a produce and a LeaderAndIsr epoch write queue behind it
        writers = [threading.Thread(target=lambda: results.append(part.append_records_to_leader(batch(), 1))),
                   threading.Thread(target=lambda: results.append(part.assign_epoch_start_offset(5)))]
        for w in writers:
            w.start()
        for w in writers:
            w.join(0.2)
        assert swap(current, future, os.path.join(b, "t-0"), lambda: part.replace_log(future))
    for w in writers:
        w.join(10)
    assert len(results) == 2
    assert part.log_to_move is future and future.log_end_offset == current.log_end_offset + 5
    assert current.leader_epoch_cache.latest_epoch == 1  # nothing reached the old log
    part.assign_epoch_start_offset(6)
    assert future.leader_epoch_cache.latest_epoch == 6


def test_producers_known_only_from_removed_segments_survive_a_crash_after_the_swap(tmp_path: Path) -> None:
    _, b, current, future = setup(tmp_path)  # producer 7 wrote the first 20 batches
    for _ in range(30):
        current.append_as_leader(batch(), leader_epoch=1)
    current.update_high_watermark(current.log_end_offset)
    current.delete_records(current.log_end_offset - 5)
    current.delete_old_segments()
    assert current.segments[0].base_offset >= 100  # producer 7's batches are gone; its state stays
    assert 7 in current.producer_state.producers
    copy_batches(current, future, 1 << 30)
    assert 7 not in future.producer_state.producers  # the batches the future log got do not name it
    assert swap(current, future, os.path.join(b, "t-0"), lambda: None)
    assert future.producer_state.producers[7].last_seq == 99
    # A crash now: the new dir alone must know producer 7 (its next batch is a duplicate check away).
    reopened = Log(future.directory, CONFIG, clean_shutdown=False, log_start_offset=future.log_start_offset)
    assert reopened.producer_state.producers[7].last_seq == 99


def test_transactions_move_with_their_aborts_and_the_open_one(tmp_path: Path) -> None:
    from strom.protocol.record_batch import build_control_batch
    from strom.storage.validator import AppendOrigin

    _, b, current, future = setup(tmp_path)

    def txn(pid: int, seq: int) -> bytes:
        return batch(2, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)

    current.append_as_leader(txn(20, 0), leader_epoch=1)
    current.append_as_leader(build_control_batch(20, 0, 0, False, 2_000), leader_epoch=1,
                             origin=AppendOrigin.COORDINATOR)  # aborted
    current.append_as_leader(txn(21, 0), leader_epoch=1)  # still open at the swap
    copy_batches(current, future, 1 << 30)
    current.update_high_watermark(current.log_end_offset)
    assert swap(current, future, os.path.join(b, "t-0"), lambda: None)
    end = future.log_end_offset
    assert [(t.producer_id, t.first_offset) for t in future.collect_aborted_transactions(0, end)] == [(20, 100)]
    assert future.last_stable_offset == current.last_stable_offset == 103  # the open transaction holds the LSO
    future.append_as_leader(build_control_batch(21, 0, 0, True, 2_000), leader_epoch=1,
                            origin=AppendOrigin.COORDINATOR)
    future.update_high_watermark(future.log_end_offset)
    assert future.last_stable_offset == future.log_end_offset


def test_copy_steps_pace_only_the_backlog_so_a_move_of_a_busy_log_ends(tmp_path: Path) -> None:
    """A follower appends between any two steps: the writes that arrive during the move are copied unpaced
    (the throttle would otherwise have to outrun the partition's write rate), and a step that reaches the
    end lets the swap try, though the log grows again right after."""
    _, _, current, future = setup(tmp_path)
    backlog_end = current.log_end_offset
    step = _copy_step(current, future, backlog_end)  # the backlog: paced
    assert step.paced == step.copied > 0 and step.caught_up
    current.append_as_leader(batch(producer_id=7, producer_epoch=0, base_sequence=100), leader_epoch=1)
    step = _copy_step(current, future, backlog_end)  # what arrived during the move: not paced
    assert step.copied > 0 and step.paced == 0 and step.caught_up
    assert read_all(future) == read_all(current)
    current.close()
    future.close()
