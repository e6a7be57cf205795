"""LogManager: owns every partition directory under ``log.dirs``.

It loads logs at startup (fast path after a clean shutdown, recovery otherwise),
creates and deletes partition logs, runs retention and time-based flushes, and
writes the per-directory checkpoint files.  Topic metadata (ids, partition
counts, configs) lives in the broker; this class only manages directories.
All methods are synchronous and thread-safe; call slow ones from an executor.

Each log dir has its own storage executor (``executor_for``): one worker thread that runs
the dir's file mutations (checkpoint fsyncs, deletions, renames, truncations) off the event
loop, one at a time and in submission order, so a slow or failing disk holds up only its
own dir's work.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from kafka.errors import KafkaStorageError

from strom.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CorruptCheckpointError,
    OffsetCheckpointFile,
    TopicPartition,
    fsync_dir,
)
from strom.storage.log import Log, parse_topic_partition, time_ms
from strom.storage.log_config import LogConfig
from strom.storage.partition_metadata import encode_topic_id, read_topic_id

log = logging.getLogger(__name__)

T = TypeVar("T")
A = TypeVar("A")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
# Threads of the fan-out pool (per-partition fsync-bound work: new leaders' epoch checkpoints, flushing
# and closing logs at shutdown): they wait on fsync, not on the CPU, and the disk takes several at once.
FAN_OUT_THREADS = 8
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
_SKIP_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, "-future", STRAY_DIR_SUFFIX)


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A ``<topic>-<partition>.<topic-id-hex>-delete`` dir: the durable record that a deletion began."""

    path: str
    topic: str
    partition: int
    topic_id: str  # 32 hex digits; a random id for logs deleted without a known topic id


def parse_tombstone(log_dir: str, name: str) -> Tombstone | None:
    stem, dot, rest = name.rpartition(".")
    if not dot or not rest.endswith(DELETE_DIR_SUFFIX):
        return None
    try:
        topic, partition = parse_topic_partition(stem)
    except ValueError:
        return None
    return Tombstone(os.path.join(log_dir, name), topic, partition, rest[: -len(DELETE_DIR_SUFFIX)])


class _LogDirIndex(dict[TopicPartition, str]):
    """Partition -> log dir, with a count per dir kept up to date, so placing a new partition
    (the dir with the fewest) costs O(dirs), not a walk over every partition the broker hosts."""

    def __init__(self) -> None:
        super().__init__()
        self._counts: dict[str, int] = {}

    def partitions_in(self, log_dir: str) -> int:
        return self._counts.get(log_dir, 0)

    def __setitem__(self, tp: TopicPartition, log_dir: str) -> None:
        old = self.get(tp)
        if old is not None:
            self._counts[old] -= 1
        super().__setitem__(tp, log_dir)
        self._counts[log_dir] = self._counts.get(log_dir, 0) + 1

    def __delitem__(self, tp: TopicPartition) -> None:
        self._counts[self[tp]] -= 1
        super().__delitem__(tp)

    def pop(self, tp: TopicPartition, *default: str | None) -> str | None:  # type: ignore[override]
        if tp in self:
            self._counts[self[tp]] -= 1
        return super().pop(tp, *default)

    def _unsupported(self, *args: object, **kwargs: object) -> None:
        raise NotImplementedError("_LogDirIndex keeps counts: set, pop or del one entry at a time")

    update = setdefault = popitem = clear = _unsupported  # type: ignore[assignment]


class LogManager:
    def __init__(
        self,
        log_dirs: list[str],
        default_config_props: Mapping[str, str | int] | LogConfig | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if isinstance(default_config_props, LogConfig):
            self.default_config = default_config_props
        else:
            self.default_config = LogConfig.from_props(default_config_props or {})
        self._logs: dict[TopicPartition, Log] = {}
        self._log_dir_of = _LogDirIndex()
        self._lock = threading.RLock()
        self._shutdown = False
        # Log dirs that failed with an I/O error: their partitions answer KAFKA_STORAGE_ERROR until a restart.
        self.offline_log_dirs: set[str] = set()
        # The subset that failed while serving (take_offline): locked and loaded once, so they may come back.
        self._failed_while_serving: set[str] = set()
        self._executors: dict[str, ThreadPoolExecutor] = {}
        self._fan_out: ThreadPoolExecutor | None = None
        # Moves between log dirs (log_dir_moves): the future logs being filled, and the dir an
        # AlterReplicaLogDirs named for a replica not created yet (used when it is created).
        self.future_logs: dict[TopicPartition, Log] = {}
        self.preferred_log_dirs: dict[TopicPartition, str] = {}

    # -- storage executors --------------------------------------------------------------------------

    def executor_for(self, log_dir: str) -> ThreadPoolExecutor:
        """The dir's storage executor: one thread, so the dir's mutations run in the order submitted."""
        log_dir = os.path.abspath(log_dir)
        with self._lock:
            executor = self._executors.get(log_dir)
            if executor is None:
                name = f"storage-{self.log_dirs.index(log_dir) if log_dir in self.log_dirs else log_dir}"
                executor = self._executors[log_dir] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
            return executor

    async def run_in_dir(self, log_dir: str, fn: Callable[..., T], *args: object) -> T:
        """Run a file mutation of ``log_dir`` on its storage executor and await its result (or error)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor_for(log_dir), fn, *args)

    def fan_out(self, fn: Callable[[A], T], items: Iterable[A]) -> list[T]:
        """``fn`` over independent partitions' items on a small shared pool, in the caller's thread's stead.

        Called from a storage thread for per-partition files written with fsync (the leader-epoch
        checkpoints of a LeaderAndIsr making this broker lead 1,000 partitions): several fsyncs in
        flight wait on the disk together instead of one after another. The storage thread waits for
        all of them, so nothing else of the dir runs in between and its order of mutations holds."""
        items = list(items)
        if len(items) < 2:
            return [fn(item) for item in items]
        with self._lock:
            if self._fan_out is None:
                self._fan_out = ThreadPoolExecutor(max_workers=FAN_OUT_THREADS,
                                                   thread_name_prefix="storage-fan-out")
            pool = self._fan_out
        return list(pool.map(fn, items))

    def close_executors(self) -> None:
        """Let queued work finish and stop the storage threads, then the fan-out pool they used."""
        with self._lock:
            executors, self._executors = list(self._executors.values()), {}
        for executor in executors:
            executor.shutdown(wait=True)
        self._close_fan_out()

    def _close_fan_out(self) -> None:
        with self._lock:
            pool, self._fan_out = self._fan_out, None
        if pool is not None:
            pool.shutdown(wait=True)

    # -- startup ------------------------------------------------------------------------------------

    def load_logs(
        self,
        topic_configs: Mapping[str, LogConfig] | None = None,
        now_ms: int | None = None,
        expected: Mapping[TopicPartition, uuid.UUID] | None = None,
    ) -> None:
        """Load each log dir; one failing with an I/O error goes offline instead of failing start-up.

        With ``expected`` (partition -> topic id from the metadata), a directory the metadata does
        not know, or whose recorded topic id differs, is set aside as stray without being opened:
        missing metadata must never cost data, so nothing is deleted here.
        """
        for log_dir in self.log_dirs:
            if log_dir in self.offline_log_dirs:
                continue
            try:
                self._load_logs_in([log_dir], topic_configs, now_ms, expected)
            except OSError as exc:
                self._take_offline(log_dir, exc)
        from strom.storage.log_dir_moves import load_future_logs  # it builds on this module

        load_future_logs(self, topic_configs or {}, expected)

    def _load_logs_in(
        self,
        log_dirs: list[str],
        topic_configs: Mapping[str, LogConfig] | None,
        now_ms: int | None,
        expected: Mapping[TopicPartition, uuid.UUID] | None,
    ) -> None:
        """Open every ``<topic>-<partition>`` directory; full recovery unless the last shutdown was clean."""
        topic_configs = topic_configs or {}
        with self._lock:
            for log_dir in log_dirs:
                os.makedirs(log_dir, exist_ok=True)
                marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
                clean = os.path.exists(marker)
                recovery_points = _read_checkpoint(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT))
                start_offsets = _read_checkpoint(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT))
                hws = _read_checkpoint(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT))
                if recovery_points is None:
                    clean = False  # unreadable recovery points: trust nothing
                    recovery_points = {}
                started = time.monotonic()
                recovered_segments = recovered_logs = indexed_segments = 0
                for name in sorted(os.listdir(log_dir)):
                    path = os.path.join(log_dir, name)
                    if not os.path.isdir(path):
                        continue
                    if name.endswith(DELETE_DIR_SUFFIX):
                        continue  # tombstones: see tombstones() and purge_tombstones()
                    if name.endswith(_SKIP_DIR_SUFFIXES) or name.startswith("."):
                        continue
                    try:
                        tp = parse_topic_partition(name)
                    except ValueError:
                        continue
                    if expected is not None and not _is_expected(path, tp, expected):
                        _set_aside_stray(path)
                        continue
                    if tp in self._logs:
                        log.error(
                            "partition %s-%d found in two log dirs; keeping %s", *tp, self._log_dir_of[tp]
                        )
                        continue
                    config = topic_configs.get(tp[0], self.default_config)
                    self._logs[tp] = Log(
                        path,
                        config,
                        recovery_point=recovery_points.get(tp, 0),
                        log_start_offset=(start_offsets or {}).get(tp, 0),
                        clean_shutdown=clean,
                        high_watermark=(hws or {}).get(tp),
                        now_ms=now_ms,
                    )
                    self._logs[tp].storage_executor = self.executor_for(log_dir)
                    self._log_dir_of[tp] = log_dir
                    if self._logs[tp].recovered_segments:
                        recovered_segments += self._logs[tp].recovered_segments
                        recovered_logs += 1
                    indexed_segments += self._logs[tp].indexed_segments
                if not clean and recovered_segments:
                    # Rebuilding unflushed segments after a crash is expected: one line, not one per
                    # partition. Real damage (torn or corrupt batches) is warned about where it is found.
                    log.info(
                        "%s was not shut down cleanly: recovered %d segments of %d partitions in %.2f s",
                        log_dir, recovered_segments, recovered_logs, time.monotonic() - started,
                    )
                elif indexed_segments:
                    # Small active segments keep their indexes in memory only: rebuilding them is expected.
                    log.info("loaded %d partitions of %s in %.2f s; indexed %d small active segments from "
                             "their batches", self._log_dir_of.partitions_in(log_dir),
                             log_dir, time.monotonic() - started, indexed_segments)
                # A crash from here on must trigger recovery at the next start.
                if os.path.exists(marker):
                    os.unlink(marker)

    # -- lookup / create / delete -------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        return self._log_dir_of.get((topic, partition))

    def get_or_create_log(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        now_ms: int | None = None,
        is_new: bool = True,
        log_dir: str | None = None,
    ) -> Log:
        """The partition's log, created in the least loaded online dir (or ``log_dir``, from
        plan_log_dirs) if missing.

        ``is_new=False`` (attaching partitions the metadata already knew) refuses to create
        a log while a dir is offline, like Kafka: the log probably lives there, and an empty
        replacement would silently hide its data.  Raises KafkaStorageError.
        """
        tp = (topic, partition)
        with self._lock:
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            if self._shutdown:
                raise RuntimeError("log manager is shut down")
            if not is_new and self.offline_log_dirs:
                raise KafkaStorageError(
                    f"cannot create log for {topic}-{partition}: log dirs "
                    f"{', '.join(sorted(self.offline_log_dirs))} are offline"
                )
            if log_dir is None or log_dir in self.offline_log_dirs:
                log_dir = self._next_log_dir()
            path = os.path.join(log_dir, f"{topic}-{partition}")
            existed = os.path.isdir(path)
            try:
                new = Log(path, config or self.default_config, clean_shutdown=True, now_ms=now_ms)
            except OSError as exc:
                if not existed:
                    shutil.rmtree(path, ignore_errors=True)
                raise KafkaStorageError(f"cannot create log for {topic}-{partition} in {log_dir}: {exc}") from exc
            new.storage_executor = self.executor_for(log_dir)
            self._logs[tp] = new
            self._log_dir_of[tp] = log_dir
            self.preferred_log_dirs.pop(tp, None)
            return new

    def plan_log_dirs(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, str]:
        """The dir each partition's log is in, or would be created in by get_or_create_log (the least
        loaded, counting the ones planned before it), so creations can run on that dir's storage thread."""
        with self._lock:
            online = [d for d in self.log_dirs if d not in self.offline_log_dirs]
            counts = {d: self._log_dir_of.partitions_in(d) for d in online}  # O(dirs), not O(partitions)
            plan: dict[TopicPartition, str] = {}
            for tp in partitions:
                existing = self._log_dir_of.get(tp)
                preferred = self.preferred_log_dirs.get(tp)
                if existing is not None:
                    plan[tp] = existing
                elif preferred in online:
                    plan[tp] = preferred
                    counts[preferred] += 1
                elif online:
                    plan[tp] = min(online, key=lambda d: counts[d])
                    counts[plan[tp]] += 1
                else:
                    plan[tp] = self.log_dirs[0]  # get_or_create_log raises KafkaStorageError
            return plan

    def _next_log_dir(self) -> str:
        """Online directory holding the fewest partitions (Kafka's placement rule)."""
        online = [d for d in self.log_dirs if d not in self.offline_log_dirs]
        if not online:
            raise KafkaStorageError("no online log directory")
        return min(online, key=self._log_dir_of.partitions_in)

    def mark_offline(self, log_dir: str, reason: str) -> None:
        """A dir found unusable before loading (not a directory, not writable): never read or written."""
        log.error("log dir %s is offline: %s; its partitions answer KAFKA_STORAGE_ERROR", log_dir, reason)
        with self._lock:
            self.offline_log_dirs.add(os.path.abspath(log_dir))

    def _take_offline(self, log_dir: str, exc: BaseException) -> None:
        """Kafka's answer to a failing disk: stop using the dir, keep serving the others."""
        for lg in self.take_offline(log_dir, exc).values():
            close_offline_log(lg)

    def take_offline(self, log_dir: str, exc: BaseException) -> dict[TopicPartition, Log]:
        """Mark a dir that failed a write offline and stop managing its logs (KIP-112); returns them.

        Quick and safe on the event loop: the caller closes the returned logs (close_offline_log)
        elsewhere, since closing files on a failing disk may block. The dir stays offline until a
        restart finds it usable again; nothing in it is deleted or rewritten.
        """
        log_dir = os.path.abspath(log_dir)
        with self._lock:
            if log_dir in self.offline_log_dirs:
                return {}
            log.error("log dir %s is offline: %s; its partitions answer KAFKA_STORAGE_ERROR", log_dir, exc)
            self.offline_log_dirs.add(log_dir)
            self._failed_while_serving.add(log_dir)
            dropped = {tp: self._logs.pop(tp) for tp, d in list(self._log_dir_of.items()) if d == log_dir}
            for tp in dropped:
                self._log_dir_of.pop(tp)
            return dropped

    def bring_online(self, log_dir: str, topic_configs: Mapping[str, LogConfig] | None = None
                     ) -> list[TopicPartition]:
        """Serve a dir that failed while serving again, once it takes writes (an operator freed space or
        replaced the disk); returns the partitions loaded. Raises OSError if it is still unusable.

        A probe file is written and fsynced first; then every log is recovered as after a crash (the
        clean-shutdown marker is gone), which truncates a torn write at the tail. Nothing is deleted.
        """
        log_dir = os.path.abspath(log_dir)
        with self._lock:
            if log_dir not in self._failed_while_serving or self._shutdown:
                raise KafkaStorageError(f"log dir {log_dir} did not fail while serving: restart to use it")
        probe = os.path.join(log_dir, ".strom-probe")
        try:
            with open(probe, "wb") as f:
                f.write(b"\0" * 4096)
                f.flush()
                os.fsync(f.fileno())
        finally:
            _unlink_quietly(probe)
        before = set(self._logs)
        self._load_logs_in([log_dir], topic_configs, None, None)
        with self._lock:
            self.offline_log_dirs.discard(log_dir)
            self._failed_while_serving.discard(log_dir)
            loaded = sorted(tp for tp in self._logs if tp not in before and self._log_dir_of.get(tp) == log_dir)
        log.info("log dir %s is online again: %d partitions loaded", log_dir, len(loaded))
        return loaded

    # -- future logs (moves between log dirs: log_dir_moves) -------------------------------------------

    def attach_log(self, tp: TopicPartition, lg: Log, log_dir: str) -> None:
        """Serve ``lg`` as the partition's log (a future log that replaced the current one)."""
        with self._lock:
            lg.storage_executor = self.executor_for(log_dir)
            self._logs[tp] = lg
            self._log_dir_of[tp] = log_dir
            if self.future_logs.get(tp) is lg:
                del self.future_logs[tp]
            self.preferred_log_dirs.pop(tp, None)

    def attach_future_log(self, tp: TopicPartition, future: Log, log_dir: str) -> None:
        with self._lock:
            future.storage_executor = self.executor_for(log_dir)
            self.future_logs[tp] = future

    def detach_future_log(self, tp: TopicPartition, future: Log) -> bool:
        """Stop tracking a future log (the caller deletes it); False if it is not the partition's future log."""
        with self._lock:
            if self.future_logs.get(tp) is not future:
                return False
            del self.future_logs[tp]
            return True

    def _detach(self, topic: str, partition: int) -> Log | None:
        """Stop managing a partition's log (the caller closes it and moves its directory)."""
        with self._lock:
            self._log_dir_of.pop((topic, partition), None)
            return self._logs.pop((topic, partition), None)

    def delete_log(self, topic: str, partition: int, topic_id: uuid.UUID | None = None) -> bool:
        """Tombstone the partition dir, then remove its files, so deleting frees space even on a full disk.

        The rename to ``<topic>-<partition>.<topic-id-hex>-delete`` needs no free space and is
        fsynced: it records the deletion before the metadata does (see purge_tombstones).  The
        empty tombstone dir stays until the metadata no longer lists the topic.  Without a topic
        id (orphan logs, rolled-back creations) nothing needs recording and the dir goes at once.
        """
        victim = self._detach(topic, partition)
        if victim is None:
            return False
        with victim._lock:
            try:
                victim.close(snapshot=False)
            except Exception as exc:
                log.warning("error closing %r before deleting it: %s", victim, exc)
            tag = topic_id.hex if topic_id is not None else uuid.uuid4().hex
            target = f"{victim.directory}.{tag}{DELETE_DIR_SUFFIX}"
            os.replace(victim.directory, target)
        fsync_dir(os.path.dirname(target))
        if topic_id is None:
            shutil.rmtree(target, ignore_errors=True)
        else:
            _empty_dir(target)
        return True

    def remove_unattached_dirs(self, topic: str, partitions: Iterable[int]) -> None:
        """Remove ``<topic>-<p>`` dirs no log is attached to (left by a creation that failed half way)."""
        for p in partitions:
            if (topic, p) in self._logs:
                continue
            for log_dir in self.log_dirs:
                path = os.path.join(log_dir, f"{topic}-{p}")
                if log_dir not in self.offline_log_dirs and os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)

    def tombstones(self, only_dir: str | None = None) -> list[Tombstone]:
        """Every ``-delete`` dir in the online log dirs (or in ``only_dir`` alone)."""
        found = []
        for log_dir in self.log_dirs if only_dir is None else [os.path.abspath(only_dir)]:
            if log_dir in self.offline_log_dirs:
                continue
            try:
                names = os.listdir(log_dir)
            except OSError:
                continue
            for name in names:
                stone = parse_tombstone(log_dir, name)
                if stone is not None and os.path.isdir(stone.path):
                    found.append(stone)
        return found

    def purge_tombstones(self, live_topic_ids: Iterable[str] | None, log_dir: str | None = None) -> int:
        """Remove tombstones of topics the durable metadata no longer lists; returns how many.

        ``None``: the metadata file is behind (a write is pending), so every tombstone may still
        be needed; only the space inside them is freed. ``log_dir``: only that dir's tombstones.
        """
        live = set(live_topic_ids) if live_topic_ids is not None else None
        removed = 0
        for stone in self.tombstones(log_dir):
            if live is None or stone.topic_id in live:
                _empty_dir(stone.path)  # free the space now; the dir itself must wait
                continue
            shutil.rmtree(stone.path, ignore_errors=True)
            removed += 1
        return removed

    def set_aside_stray_log(self, topic: str, partition: int) -> str | None:
        """Close a log and rename its directory to ``<dir>.<uuid>-stray``: kept on disk, never loaded again."""
        victim = self._detach(topic, partition)
        if victim is None:
            return None
        with victim._lock:
            victim.close()
            return _set_aside_stray(victim.directory)

    def update_config(self, topic: str, config: LogConfig) -> None:
        with self._lock:
            logs = [lg for (t, _), lg in self._logs.items() if t == topic]
        for lg in logs:
            lg.update_config(config)

    # -- periodic work ------------------------------------------------------------------------------

    def checkpoint(self) -> bool:
        """Write recovery-point, log-start-offset and replication (HW) checkpoints for every online log dir.

        A failing write (a full disk) is logged and skipped: the previous checkpoint stays valid,
        it only means more recovery after a crash.  Returns whether every write succeeded.
        """
        with self._lock:
            by_dir: dict[str, dict[TopicPartition, Log]] = {
                d: {} for d in self.log_dirs if d not in self.offline_log_dirs
            }
            for tp, lg in self._logs.items():
                by_dir.setdefault(self._log_dir_of[tp], {})[tp] = lg
        ok = True
        for log_dir, logs in by_dir.items():
            for name, values in (
                (RECOVERY_POINT_CHECKPOINT, {tp: lg.recovery_point for tp, lg in logs.items()}),
                (LOG_START_OFFSET_CHECKPOINT, {tp: lg.log_start_offset for tp, lg in logs.items()}),
                (REPLICATION_OFFSET_CHECKPOINT, {tp: lg.high_watermark for tp, lg in logs.items()}),
            ):
                path = os.path.join(log_dir, name)
                try:
                    OffsetCheckpointFile(path).write(values)
                except OSError as exc:
                    ok = False
                    log.warning("could not write checkpoint %s: %s", path, exc)
                    _unlink_quietly(path + ".tmp")
        return ok

    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """Retention pass over all logs; returns the number of segments deleted."""
        now = now_ms if now_ms is not None else time_ms()
        total = 0
        for lg in self.all_logs().values():
            try:
                total += lg.delete_old_segments(now)
            except Exception:
                log.exception("retention failed for %r", lg)
        return total

    def remove_expired_producers(self, expiration_ms: int, now_ms: int | None = None) -> int:
        """Producer-id expiration over all logs (producer.id.expiration.ms); returns the producers removed."""
        now = now_ms if now_ms is not None else time_ms()
        total = 0
        for lg in self.all_logs().values():
            try:
                total += lg.remove_expired_producers(now, expiration_ms)
            except Exception:
                log.exception("producer id expiration failed for %r", lg)
        return total

    def flush_dirty(self, now_ms: int | None = None) -> int:
        """Flush logs whose flush.ms elapsed or that rolled a segment; returns logs flushed."""
        now = now_ms if now_ms is not None else time_ms()
        flushed = 0
        for lg in self.all_logs().values():
            if lg.needs_flush(now):
                lg.flush(now_ms=now)
                flushed += 1
        return flushed

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown marker.

        Never raises on I/O errors (a full disk must not crash shutdown): each failure is
        logged and the rest continues; but if anything failed the marker is not written,
        so the next start runs recovery instead of trusting incomplete state.
        """
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            logs = dict(self._logs)
            futures = list(self.future_logs.values())
        self.close_executors()  # file mutations already queued finish before the logs close
        # Logs are independent and their shutdown is fsyncs of the segments written since the last flush
        # (and of index files where written): several in flight wait on the disk together instead of one
        # partition after another. A log nothing was written to since its last flush (or since a clean
        # load) costs no fsync. Only batches and checkpoints must be durable before the marker: a small
        # active segment's indexes are not written, and producer snapshots are written without fsync
        # (or not at all when the replay is short), see Log.close and ADR 0044.
        started = time.monotonic()
        closed = self.fan_out(_flush_and_close, [*logs.values(), *futures])
        self._close_fan_out()
        closed_at = time.monotonic()
        clean = self.checkpoint() and all(closed)
        log.info("closed %d logs in %.2f s and wrote checkpoints in %.2f s", len(logs), closed_at - started,
                 time.monotonic() - closed_at)
        if not clean:
            log.warning("shutdown was incomplete (see above): not writing %s, the next start runs recovery",
                        CLEAN_SHUTDOWN_FILE)
            return
        for log_dir in self.log_dirs:
            if log_dir in self.offline_log_dirs:
                continue
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
            try:
                with open(marker, "wb") as f:
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                log.warning("could not write %s: %s", marker, exc)
                _unlink_quietly(marker)


def _flush_and_close(lg: Log) -> bool:
    """Flush and close one log at shutdown; False (logged, never raised) if either failed."""
    ok = True
    try:
        lg.flush()
    except Exception as exc:
        ok = False
        log.error("could not flush %r at shutdown: %s", lg, exc)
    try:
        ok = lg.close() and ok
    except Exception as exc:
        ok = False
        log.error("could not close %r at shutdown: %s", lg, exc)
    return ok


def close_offline_log(lg: Log) -> None:
    """Close a log of an offline dir without writing to it (no snapshot, no index trim)."""
    try:
        lg.close(snapshot=False)
    except Exception as exc:  # the dir is failing: closing may fail too
        log.warning("error closing %r in an offline log dir: %s", lg, exc)


def is_log_dir_failure(exc: BaseException) -> bool:
    """Whether a storage error says the dir is unusable (no space, I/O error, read-only), as opposed to
    the process being short of descriptors or memory, which another dir would suffer as well."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__
    if cause is None:
        return False
    return cause.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOMEM)


def partition_dirs(log_dir: str) -> dict[TopicPartition, str]:
    """``<topic>-<partition>`` directories of a log dir that load_logs would open (by partition)."""
    out: dict[TopicPartition, str] = {}
    try:
        names = sorted(os.listdir(log_dir))
    except FileNotFoundError:
        return out
    for name in names:
        path = os.path.join(log_dir, name)
        if name.startswith(".") or name.endswith(_SKIP_DIR_SUFFIXES) or not os.path.isdir(path):
            continue
        try:
            out[parse_topic_partition(name)] = path
        except ValueError:
            continue
    return out


def _is_expected(path: str, tp: TopicPartition, expected: Mapping[TopicPartition, uuid.UUID]) -> bool:
    topic_id = expected.get(tp)
    if topic_id is None:
        log.warning("partition directory %s is not in the cluster metadata", path)
        return False
    recorded = read_topic_id(path)
    if recorded is not None and recorded != topic_id:
        log.warning("partition directory %s belongs to an older topic %s (id %s; the topic now has id %s)",
                    path, tp[0], encode_topic_id(recorded), encode_topic_id(topic_id))
        return False
    return True


def _set_aside_stray(path: str) -> str:
    """Rename aside as Kafka does for stray logs; only an explicit topic deletion removes data."""
    target = f"{path}.{uuid.uuid4().hex}{STRAY_DIR_SUFFIX}"
    os.replace(path, target)
    fsync_dir(os.path.dirname(path))
    log.warning("moved stray partition directory %s aside to %s; its data is kept and no longer served: "
                "inspect it and delete it by hand once it is not needed", path, target)
    return target


def _read_checkpoint(path: str) -> dict[TopicPartition, int] | None:
    try:
        return OffsetCheckpointFile(path).read()
    except (CorruptCheckpointError, OSError) as exc:
        log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
        return None


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _empty_dir(path: str) -> None:
    """Remove everything inside ``path`` (frees the space) but keep the dir itself."""
    try:
        entries = list(os.scandir(path))
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            log.warning("could not list %s: %s", path, exc)
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError as exc:
            log.warning("could not remove %s: %s", entry.path, exc)
