"""ReplicaAlterLogDirsManager: moves this broker's replicas between its log dirs (AlterReplicaLogDirs, KIP-113).

Kafka runs a ReplicaAlterLogDirsThread that "fetches" from the local current log into the future
log. Here each move is an asyncio task that hands the copying to the target dir's storage thread
one step (``COPY_CHUNK_BYTES``) at a time, so the event loop never reads or writes the files, and
the target dir's other work (checkpoints, creations) interleaves with the copy. When a step reaches
the current log's end, the future log is fsynced and swapped in (log_dir_moves.swap: the current
log's writers wait only for the last batches and two renames). The old copy is deleted after
``file.delete.delay.ms``, so fetches still sending from its files finish.

``replica.alter.log.dirs.io.max.bytes.per.second`` paces all moves together, over the batches each
log held when its move started (what comes in meanwhile is copied unpaced, so a move always ends).
Moves survive a restart: the LogManager reloads future logs and ``start`` resumes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import kafka.errors as Errors

from strom.server_common.types import TopicPartition
from strom.storage.checkpoints import fsync_dir
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_dir_moves import (
    COPY_CHUNK_BYTES,
    copy_batches,
    future_id,
    moved_away_dir,
    new_future_dir,
    reconcile,
    swap,
    sync_epochs,
)
from strom.storage.log_manager import is_log_dir_failure
from strom.storage.partition_metadata import ensure_topic_configs, ensure_topic_id

if TYPE_CHECKING:
    from strom.broker.partition import Partition
    from strom.broker.replica_manager import ReplicaManager
    from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)

THROTTLE_CONFIG = "replica.alter.log.dirs.io.max.bytes.per.second"
# How often a move whose replica is not attached yet (a restart: LeaderAndIsr comes later) looks again.
WAIT_FOR_REPLICA_S = 0.2
# A copy step that failed for a reason other than the target dir (the current log's segment went
# away under retention, say) is retried after this pause.
RETRY_BACKOFF_S = 1.0


@dataclass(eq=False)
class _Move:
    log_dir: str
    task: asyncio.Task[None] | None = None
    aborted: bool = False  # cancelled by a newer request or a deletion: drop the future log


class ReplicaAlterLogDirsManager:
    """The moves in progress, one task per partition."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self._rm = replica_manager
        self._lm = replica_manager.log_manager
        self._moves: dict[TopicPartition, _Move] = {}
        self._paced_until = 0.0  # monotonic time the throttle has been spent until
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Resume the moves whose future logs the LogManager found at start-up."""
        for tp, future in sorted(self._lm.future_logs.items()):
            self._start(tp, os.path.dirname(future.directory))

    async def stop(self) -> None:
        """Stop copying; future logs stay on disk and the moves resume at the next start."""
        self._stopped = True
        tasks = [m.task for m in self._moves.values() if m.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- AlterReplicaLogDirs ----------------------------------------------------------------------------
    def alter_replica_log_dir(self, tp: TopicPartition, path: str) -> int:
        """Start moving ``tp`` to the log dir ``path``; the error code to answer (0: moving, or already there).

        As Kafka: an unknown or relative path is LOG_DIR_NOT_FOUND, an offline one KAFKA_STORAGE_ERROR;
        a replica this broker does not host yet answers REPLICA_NOT_AVAILABLE and is created in
        ``path`` when it comes; a move to another dir replaces one in progress.
        """
        if not os.path.isabs(path) or os.path.normpath(path) not in self._lm.log_dirs:
            return Errors.LogDirNotFoundError.errno
        log_dir = os.path.normpath(path)
        if log_dir in self._lm.offline_log_dirs:
            return Errors.KafkaStorageError.errno
        part = self._rm.partitions.get(tp)
        if part is None:
            if tp in self._rm.offline_partitions:
                return Errors.KafkaStorageError.errno
            # Remembered even for a partition not known here yet (a reassignment may be about to create it).
            self._lm.preferred_log_dirs[tp] = log_dir
            topic = self._rm.metadata.topic(tp[0])
            if topic is None or tp[1] not in topic.partitions:
                return Errors.UnknownTopicOrPartitionError.errno
            return Errors.ReplicaNotAvailableError.errno
        move = self._moves.get(tp)
        if move is not None and move.log_dir == log_dir and not move.aborted:
            return 0
        if move is not None and not move.aborted:
            move.aborted = True
            if move.task is not None:
                move.task.cancel()
        if part.log_dir == log_dir:
            return 0  # already there (a move elsewhere in progress was cancelled above)
        if self._lm.offline_log_dirs:  # the future log might duplicate one in the offline dir
            return Errors.KafkaStorageError.errno
        self._start(tp, log_dir, previous=move)
        return 0

    # -- the move ------------------------------------------------------------------------------------
    def _start(self, tp: TopicPartition, log_dir: str, previous: _Move | None = None) -> None:
        if self._stopped:
            return
        move = _Move(log_dir)
        self._moves[tp] = move
        move.task = asyncio.get_running_loop().create_task(self._run(tp, move, previous),
                                                           name=f"alter-log-dir-{tp[0]}-{tp[1]}")

    async def _run(self, tp: TopicPartition, move: _Move, previous: _Move | None) -> None:
        try:
            if previous is not None and previous.task is not None:
                await asyncio.wait([previous.task])  # it removes its future log first
            await self._move(tp, move)
            if move.aborted:  # the topic went away meanwhile
                await self._drop_future(tp)
        except asyncio.CancelledError:
            if move.aborted:
                await self._drop_future(tp)
            raise
        except Exception as exc:
            log.error("moving %s-%d to %s failed: %s; the replica stays where it is", *tp, move.log_dir, exc)
            if isinstance(exc, (OSError, Errors.KafkaStorageError)):
                # The target dir failed a write (no space, I/O error): as a failed append would, it goes
                # offline (KIP-112) before the future log is dropped, so nothing more is written there.
                self._rm.maybe_take_log_dir_offline(tp, exc, move.log_dir)
            await self._drop_future(tp)
        finally:
            if self._moves.get(tp) is move:
                del self._moves[tp]

    async def _move(self, tp: TopicPartition, move: _Move) -> None:
        log_dir = move.log_dir
        part = await self._replica(tp)
        if part is None:
            move.aborted = True
            return
        future = self._lm.future_logs.get(tp)
        if future is not None and os.path.dirname(future.directory) != log_dir:
            await self._drop_future(tp)
            future = None
        if part.log_dir == log_dir:
            return
        if future is None:
            future = await self._lm.run_in_dir(log_dir, self._create_future, tp, part, log_dir)
        log.info("moving %s-%d from %s to %s", *tp, part.log_dir, log_dir)
        replica = part
        # The throttle paces the backlog only: what the partition takes in meanwhile is copied as it
        # comes, so a move finishes even when the partition takes writes faster than the throttle.
        backlog_end = part.log_to_move.log_end_offset
        while True:
            if tp in self._rm.offline_partitions and tp not in self._rm.partitions:
                move.aborted = True  # the current log's dir failed: its future copy goes too, as in Kafka
                return
            part = await self._replica(tp)
            if part is not replica:  # deleted meanwhile (and perhaps created again: a new replica)
                move.aborted = True
                return
            current = part.log_to_move
            try:
                step = await self._lm.run_in_dir(log_dir, _copy_step, current, future, backlog_end)
            except OSError:
                raise  # the target dir failed: the move ends, the replica stays
            except Exception as exc:  # the current log changed under the step (retention, truncation)
                if isinstance(exc, Errors.KafkaStorageError) and is_log_dir_failure(exc):
                    raise  # a failed write (the segment wraps its OSError): the target dir failed too
                log.debug("copy step of %s-%d failed, retrying: %s", *tp, exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            await self._pace(step.paced)
            if not step.caught_up:
                continue
            await self._lm.run_in_dir(log_dir, _prepare_swap, current, future)
            swapping = asyncio.ensure_future(self._lm.run_in_dir(log_dir, self._swap, tp, part, current, future))
            try:
                moved_away = await asyncio.shield(swapping)
            except asyncio.CancelledError:  # cancelled (a newer request, shutdown) while swapping: finish first
                moved = await swapping
                if moved is not None:
                    self._after_swap(tp, part, current, future, moved)
                raise
            if moved_away is not None:
                break
        self._after_swap(tp, part, current, future, moved_away)

    async def _replica(self, tp: TopicPartition) -> Partition | None:
        """The hosted replica, waiting for it to attach (after a restart); None once its topic is gone."""
        while True:
            part = self._rm.partitions.get(tp)
            if part is not None and not part.log_to_move.moved:
                return part
            topic = self._rm.metadata.topic(tp[0])
            if topic is None or tp[1] not in topic.partitions:
                return None
            await asyncio.sleep(WAIT_FOR_REPLICA_S)

    def _create_future(self, tp: TopicPartition, part: Partition, log_dir: str) -> Log:
        """On the target dir's storage thread: an empty future log, recording the partition's topic id and configs."""
        config: LogConfig = part.log_config
        future = Log(new_future_dir(log_dir, *tp), config, clean_shutdown=True)
        try:
            ensure_topic_id(future.directory, part.topic_id)
            topic = self._rm.metadata.topic(tp[0])
            if topic is not None:
                ensure_topic_configs(future.directory, topic.configs)
        except OSError:
            future.close(snapshot=False)
            shutil.rmtree(future.directory, ignore_errors=True)
            raise
        self._lm.attach_future_log(tp, future, log_dir)
        return future

    def _swap(self, tp: TopicPartition, part: Partition, current: Log, future: Log) -> str | None:
        """On the target dir's storage thread: the swap, then make both renames durable. Returns where the
        old copy went, None if the future log is still behind."""
        log_dir = os.path.dirname(future.directory)
        final_dir = os.path.join(log_dir, os.path.basename(current.directory))
        moved_away = moved_away_dir(current, future_id(future))

        def on_swapped() -> None:
            part.replace_log(future)
            self._lm.attach_log(tp, future, log_dir)

        if not swap(current, future, final_dir, on_swapped):
            return None
        for directory in (os.path.dirname(moved_away), log_dir):
            try:
                fsync_dir(directory)
            except OSError as exc:  # the renames are done; only their durability waits for the next sync
                log.warning("could not sync %s after moving %s-%d: %s", directory, *tp, exc)
        # The new dir's checkpoints list the partition from now on: its log start offset above all (a
        # restart must not show records DeleteRecords removed), and its recovery point (no full recovery).
        self._lm.checkpoint()
        return moved_away

    def _after_swap(self, tp: TopicPartition, part: Partition, old: Log, new: Log, moved_away: str) -> None:
        """On the loop: the HW moves on from the new log, parked requests look again, the old copy goes later."""
        new.update_high_watermark(max(new.high_watermark, old.high_watermark))
        if part.is_leader:
            part.maybe_increment_high_watermark()
        self._rm.fetch_purgatory.check_and_complete(tp)
        self._rm.produce_purgatory.check_and_complete(tp)
        log.info("moved %s-%d to %s", *tp, os.path.dirname(new.directory))
        loop = asyncio.get_running_loop()
        executor = self._lm.executor_for(os.path.dirname(moved_away))
        delay_s = max(0, old.config.file_delete_delay_ms) / 1000
        loop.call_later(delay_s, lambda: None if self._stopped else loop.run_in_executor(
            executor, _delete_old, old, moved_away))

    async def _drop_future(self, tp: TopicPartition) -> None:
        future = self._lm.future_logs.get(tp)
        if future is None:
            return
        with contextlib.suppress(Exception):
            await self._lm.run_in_dir(os.path.dirname(future.directory), _delete_future, self._lm, tp, future)

    async def _pace(self, copied: int) -> None:
        """replica.alter.log.dirs.io.max.bytes.per.second over every move (a dynamic config)."""
        rate = self._rm.config.get(THROTTLE_CONFIG)
        if not copied or not rate or rate <= 0 or rate >= 1 << 62:
            await asyncio.sleep(0)
            return
        now = time.monotonic()
        self._paced_until = max(self._paced_until, now) + copied / rate
        await asyncio.sleep(self._paced_until - now)


# -- storage-thread steps ------------------------------------------------------------------------------


class CopyStep(NamedTuple):
    """What one copy step did: ``paced`` counts the bytes below the backlog's end (the throttle's share);
    ``caught_up``: the future log reached the current log's end, so the swap may try to finish."""

    copied: int
    paced: int
    caught_up: bool


def _copy_step(current: Log, future: Log, backlog_end: int) -> CopyStep:
    if current.moved:
        return CopyStep(0, 0, True)
    reconcile(current, future)
    start = future.log_end_offset
    copied = copy_batches(current, future, COPY_CHUNK_BYTES)
    # Not "copied nothing": a log that takes writes all the time (a follower's) is rarely found still.
    return CopyStep(copied, copied if start < backlog_end else 0,
                    future.log_end_offset >= current.log_end_offset)


def _prepare_swap(current: Log, future: Log) -> None:
    """fsync what the future log has and its epochs, so the swap under the lock syncs nothing."""
    sync_epochs(current, future)
    future.flush()


def _delete_future(manager: LogManager, tp: TopicPartition, future: Log) -> None:
    if not manager.detach_future_log(tp, future):
        return
    future.close(snapshot=False)
    if os.path.dirname(future.directory) in manager.offline_log_dirs:
        return  # nothing in an offline dir is touched; it stays aside until a restart
    shutil.rmtree(future.directory, ignore_errors=True)
    log.info("removed the future log %s", future.directory)


def _delete_old(old: Log, moved_away: str) -> None:
    """The replaced copy, after file.delete.delay.ms: close its files and remove its ``-delete`` dir."""
    old.close(snapshot=False)
    shutil.rmtree(moved_away, ignore_errors=True)
