"""LogManager: owns every partition directory under ``log.dirs``.

It loads logs at startup (fast path after a clean shutdown, recovery otherwise),
creates and deletes partition logs, runs retention and time-based flushes, and
writes the per-directory checkpoint files.  Topic metadata (ids, partition
counts, configs) lives in the broker; this class only manages directories.
All methods are synchronous and thread-safe; call slow ones from an executor.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Mapping

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

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
_SKIP_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, "-future", STRAY_DIR_SUFFIX)


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
        self._log_dir_of: dict[TopicPartition, str] = {}
        self._lock = threading.RLock()
        self._shutdown = False

    # -- startup ------------------------------------------------------------------------------------

    def load_logs(
        self,
        topic_configs: Mapping[str, LogConfig] | None = None,
        now_ms: int | None = None,
        expected: Mapping[TopicPartition, uuid.UUID] | None = None,
    ) -> None:
        """Open every ``<topic>-<partition>`` directory; full recovery unless the last shutdown was clean.

        With ``expected`` (partition -> topic id from the metadata), a directory the metadata does
        not know, or whose recorded topic id differs, is set aside as stray without being opened:
        missing metadata must never cost data, so nothing is deleted here.
        """
        topic_configs = topic_configs or {}
        with self._lock:
            for log_dir in self.log_dirs:
                os.makedirs(log_dir, exist_ok=True)
                marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
                clean = os.path.exists(marker)
                recovery_points = _read_checkpoint(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT))
                start_offsets = _read_checkpoint(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT))
                hws = _read_checkpoint(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT))
                if recovery_points is None:
                    clean = False  # unreadable recovery points: trust nothing
                    recovery_points = {}
                for name in sorted(os.listdir(log_dir)):
                    path = os.path.join(log_dir, name)
                    if not os.path.isdir(path):
                        continue
                    if name.endswith(DELETE_DIR_SUFFIX):
                        _remove_dir_in_background(path)
                        continue
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
                    self._log_dir_of[tp] = log_dir
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
        self, topic: str, partition: int, config: LogConfig | None = None, now_ms: int | None = None
    ) -> Log:
        tp = (topic, partition)
        with self._lock:
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            if self._shutdown:
                raise RuntimeError("log manager is shut down")
            log_dir = self._next_log_dir()
            path = os.path.join(log_dir, f"{topic}-{partition}")
            new = Log(path, config or self.default_config, clean_shutdown=True, now_ms=now_ms)
            self._logs[tp] = new
            self._log_dir_of[tp] = log_dir
            return new

    def _next_log_dir(self) -> str:
        """Directory holding the fewest partitions (Kafka's placement rule)."""
        counts = dict.fromkeys(self.log_dirs, 0)
        for d in self._log_dir_of.values():
            counts[d] = counts.get(d, 0) + 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def delete_log(self, topic: str, partition: int) -> bool:
        """Rename the directory to ``<topic>-<partition>.<uuid>-delete`` and remove it in the background."""
        tp = (topic, partition)
        with self._lock:
            victim = self._logs.pop(tp, None)
            self._log_dir_of.pop(tp, None)
        if victim is None:
            return False
        with victim._lock:
            victim.close()
            target = f"{victim.directory}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
            os.replace(victim.directory, target)
        _remove_dir_in_background(target)
        return True

    def set_aside_stray_log(self, topic: str, partition: int) -> str | None:
        """Close a log and rename its directory to ``<dir>.<uuid>-stray``: kept on disk, never loaded again."""
        tp = (topic, partition)
        with self._lock:
            victim = self._logs.pop(tp, None)
            self._log_dir_of.pop(tp, None)
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

    def checkpoint(self) -> None:
        """Write recovery-point, log-start-offset and replication (HW) checkpoints for every log dir."""
        with self._lock:
            by_dir: dict[str, dict[TopicPartition, Log]] = {d: {} for d in self.log_dirs}
            for tp, lg in self._logs.items():
                by_dir.setdefault(self._log_dir_of[tp], {})[tp] = lg
        for log_dir, logs in by_dir.items():
            OffsetCheckpointFile(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT)).write(
                {tp: lg.recovery_point for tp, lg in logs.items()}
            )
            OffsetCheckpointFile(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT)).write(
                {tp: lg.log_start_offset for tp, lg in logs.items()}
            )
            OffsetCheckpointFile(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT)).write(
                {tp: lg.high_watermark for tp, lg in logs.items()}
            )

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
        """Flush and close every log, write checkpoints, then the clean-shutdown marker."""
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            logs = dict(self._logs)
        for lg in logs.values():
            lg.flush()
            lg.close()
        self.checkpoint()
        for log_dir in self.log_dirs:
            with open(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), "wb") as f:
                f.flush()
                os.fsync(f.fileno())


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


def _remove_dir_in_background(path: str) -> None:
    threading.Thread(
        target=shutil.rmtree,
        args=(path,),
        kwargs={"ignore_errors": True},
        name="strom-dir-delete",
        daemon=True,
    ).start()
