"""Moving a partition's log to another log dir of the same broker (JBOD, KIP-113), on disk.

A move builds a *future* log ``<log dir B>/<topic>-<p>.<unique id>-future`` beside the current
log ``<log dir A>/<topic>-<p>``, copies the current log's batches into it (``copy_batches``, on
B's storage thread) while the current log keeps taking writes, and once it has caught up swaps
the two (``swap``), holding the current log's lock only for the last few batches and two renames:

1. ``A/<tp>`` -> ``A/<tp>.<id>-delete`` (the old copy, deleted later), then
2. ``B/<tp>.<id>-future`` -> ``B/<tp>``.

What the load finds after a crash (``load_future_logs``), at any point:

- ``A/<tp>`` and ``B/<tp>.<id>-future``: the copy was under way; the current log is served and the
  future log reloaded, the copy resumes where the future log ends (after ``reconcile``).
- ``A/<tp>.<id>-delete`` and ``B/<tp>.<id>-future`` (a crash between the renames): the future log
  held every batch when the first rename happened, under the lock; it becomes ``B/<tp>``.
- ``B/<tp>`` alone: the move was done.

A future dir with neither a current log nor its ``-delete`` twin is not served (its current log
may be in a dir that is offline); nothing is deleted.

The future log is filled as a follower fills its log: whole batches with their offsets, leader
epochs and producer ids (``Log.append_as_follower``); the epoch cache entries and producer state
the batches do not carry (epochs assigned ahead of data, producers whose batches retention
removed) are carried over at the swap.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Mapping

from strom.storage.checkpoints import TopicPartition, fsync_dir
from strom.storage.local_log import FUTURE_DIR_SUFFIX, parse_topic_partition
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.log_manager import _is_expected as is_expected
from strom.storage.log_manager import _set_aside_stray as set_aside_stray

log = logging.getLogger(__name__)

DELETE_DIR_SUFFIX = "-delete"
# Bytes of batches one copy step reads and appends; and at most this much is copied at the swap,
# while the current log's writers wait (more: the copy goes on without the lock first).
COPY_CHUNK_BYTES = 1 << 20
SWAP_MAX_BYTES = 1 << 20


def new_future_dir(log_dir: str, topic: str, partition: int) -> str:
    return os.path.join(log_dir, f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}")


def parse_future_dir(name: str) -> tuple[TopicPartition, str] | None:
    """``<topic>-<p>.<id>-future`` -> ((topic, p), id); None for any other name."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    stem, dot, unique_id = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
    if not dot or not unique_id:
        return None
    try:
        return parse_topic_partition(stem), unique_id
    except ValueError:
        return None


def future_id(future: Log) -> str:
    parsed = parse_future_dir(os.path.basename(future.directory))
    if parsed is None:
        raise ValueError(f"{future.directory} is not a future log dir")
    return parsed[1]


def moved_away_dir(current: Log, unique_id: str) -> str:
    """Where the old copy goes at the swap: a ``-delete`` dir carrying the future's id (see the module doc)."""
    return f"{current.directory}.{unique_id}{DELETE_DIR_SUFFIX}"


# -- load ------------------------------------------------------------------------------------------


def load_future_logs(manager: LogManager, topic_configs: Mapping[str, LogConfig],
                     expected: Mapping[TopicPartition, uuid.UUID] | None) -> None:
    """After the current logs are loaded: reload future logs (moves resume) or finish interrupted swaps."""
    online = [d for d in manager.log_dirs if d not in manager.offline_log_dirs]
    found: list[tuple[str, str, TopicPartition, str]] = []
    moved_away: set[tuple[TopicPartition, str]] = set()
    for log_dir in online:
        try:
            names = sorted(os.listdir(log_dir))
        except OSError:
            continue
        for name in names:
            parsed = parse_future_dir(name)
            if parsed is not None:
                found.append((log_dir, os.path.join(log_dir, name), *parsed))
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                stem, _, unique_id = name[: -len(DELETE_DIR_SUFFIX)].rpartition(".")
                try:
                    moved_away.add((parse_topic_partition(stem), unique_id))
                except ValueError:
                    continue
    for log_dir, path, tp, unique_id in found:
        if expected is not None and not is_expected(path, tp, expected):  # a deleted topic's, or moved away
            set_aside_stray(path)
            continue
        config = topic_configs.get(tp[0], manager.default_config)
        current_dir = manager.log_dir_of(*tp)
        if current_dir is not None:
            if current_dir == log_dir or tp in manager.future_logs:
                log.warning("future log %s duplicates a log in the same dir; it is left alone", path)
                continue
            future = Log(path, config, clean_shutdown=False)
            manager.attach_future_log(tp, future, log_dir)
            log.info("resuming the move of %s-%d to %s at offset %d", *tp, log_dir, future.log_end_offset)
        elif (tp, unique_id) in moved_away:
            final = os.path.join(log_dir, f"{tp[0]}-{tp[1]}")
            os.replace(path, final)
            fsync_dir(log_dir)
            manager.attach_log(tp, Log(final, config, clean_shutdown=False), log_dir)
            log.info("completed the interrupted move of %s-%d to %s", *tp, log_dir)
        else:
            log.warning("future log %s has no current log in an online log dir; it is not served", path)


# -- copy (on the future log's storage thread) ------------------------------------------------------


def reconcile(current: Log, future: Log) -> None:
    """Make the future log a prefix of the current one again: the current log may have been truncated
    (a follower's divergence, found by leader epoch as a follower finds it) or lost its oldest segments
    to retention below where the future log ends."""
    first = current.segments[0].base_offset
    leo = future.log_end_offset
    if leo < first or (future.size_in_bytes == 0 and leo != first):
        future.truncate_fully_and_start_at(first)
        return
    epoch = future.latest_epoch
    if epoch is None:
        return
    current_epoch, current_end = current.end_offset_for_epoch(epoch)
    if current_epoch < 0:
        target = first
    elif current_epoch == epoch:
        target = current_end
    else:
        target = min(current_end, future.end_offset_for_epoch(current_epoch)[1])
    if target < leo:
        if target <= first:
            future.truncate_fully_and_start_at(first)
        else:
            future.truncate_to(target)


def copy_batches(current: Log, future: Log, max_bytes: int) -> int:
    """Append the current log's next batches (up to about ``max_bytes``) to the future log; returns bytes copied."""
    copied = 0
    while copied < max_bytes:
        start = future.log_end_offset
        if start >= current.log_end_offset:
            break
        info = current.read(max(start, current.log_start_offset), min(COPY_CHUNK_BYTES, max_bytes - copied),
                            None, True)
        data = b"".join(s.read() for s in info.slices)
        if not data:
            break
        if info.first_batch_offset < start:  # the log start is inside a batch: the future log starts with it
            future.truncate_fully_and_start_at(info.first_batch_offset)
        future.append_as_follower(data)
        copied += len(data)
    return copied


def sync_epochs(current: Log, future: Log, fsync: bool = True) -> None:
    """Give the future log the current log's epoch entries (some are assigned ahead of any batch)."""
    entries = current.leader_epoch_cache.epoch_entries
    cache = future.leader_epoch_cache
    if cache.epoch_entries != entries:
        cache.write(entries, fsync=fsync)
        cache.adopt(entries)


def swap(current: Log, future: Log, final_dir: str, on_swapped: Callable[[], None]) -> bool:
    """Replace ``current`` with ``future`` on disk (see the module doc); False if the future log is
    still behind after copying ``SWAP_MAX_BYTES`` (the copy goes on without the lock, and tries again).

    Holds the current log's lock throughout, so no write lands in it after its last batch was copied;
    ``on_swapped`` (under the lock too) points the partition at the future log. Writers of the partition
    wait for at most ``SWAP_MAX_BYTES`` of page-cache copying and two renames, never for an fsync: the
    caller syncs the future log before and both dirs after.
    """
    with current._lock:
        if current.moved or current.closed or future.closed:
            return False
        reconcile(current, future)
        copy_batches(current, future, SWAP_MAX_BYTES)
        if future.log_end_offset != current.log_end_offset:
            return False
        if os.path.exists(final_dir):
            raise FileExistsError(f"cannot move {current.directory} to {final_dir}: it exists")
        with future._lock:
            sync_epochs(current, future, fsync=False)
            future.log_start_offset = max(future.log_start_offset, current.log_start_offset)
            future.update_high_watermark(current.high_watermark)
            _carry_producer_state(current, future)
            old_dir = current.directory
            moved_away = moved_away_dir(current, future_id(future))
            os.replace(old_dir, moved_away)
            try:
                future.rename_dir(final_dir)
            except OSError:
                os.replace(moved_away, old_dir)  # nothing changed: the current log stays
                raise
            current.mark_moved()
            on_swapped()
            _snapshot_producers(future)
    return True


def _snapshot_producers(lg: Log) -> None:
    """A producer snapshot at the LEO in the new dir: producers only the carried-over state knows (their
    batches went with retention) survive a crash as they would have in the old dir."""
    if lg.storage_executor is not None:  # encoded now, written and fsynced on the dir's thread
        lg.producer_state.snapshot_later(lg.log_end_offset, lg.storage_executor)
    else:
        lg.producer_state.take_snapshot(lg.log_end_offset)


def _carry_producer_state(current: Log, future: Log) -> None:
    """The current log's producers (some only known from batches retention removed) become the future's."""
    src, dst = current.producer_state, future.producer_state
    dst.producers = src.producers
    dst.ongoing = src.ongoing
    dst.unreplicated = src.unreplicated
    dst.map_end_offset = src.map_end_offset
    dst._current_snapshot = None
