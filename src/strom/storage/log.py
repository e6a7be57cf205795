"""Log: one partition's log as the broker sees it, in ``<log.dir>/<topic>-<partition>``.

Offsets: ``log_start_offset`` (first visible offset, moved by retention and
DeleteRecords), ``log_end_offset`` (LEO, next offset to assign), the
``high_watermark`` (set by the broker's Partition; exclusive: consumers see
offsets < HW) and the ``recovery_point`` (everything below it is fsynced).

Log owns what the offsets mean: the log start offset and HW, validation, idempotent
producers and transactions (ProducerStateManager), leader epochs, and the retention
decisions. The segment files under it (the segment list, appends to the active segment,
rolling, reads, fsync, truncation, removing and swapping segments) are its LocalLog, as in
Kafka's UnifiedLog/LocalLog; see local_log.py, also for where a remote tier would plug in.

Appends and reads work on whole batches.  A leader append validates headers
and CRCs (LogValidator), checks idempotent sequences (ProducerStateManager),
then rewrites only each batch's 61-byte header and writes header + untouched
body with one pwritev.  Reads return file ranges (FileSlice) for sendfile.

The LeaderEpochFileCache (``leader-epoch-checkpoint``) records where each leader epoch
starts; it changes only when an append carries a new epoch (one int compare per append
otherwise), on truncation and when the log start moves.  OffsetForLeaderEpoch answers from it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from kafka.errors import InvalidRecordError, KafkaStorageError, OffsetOutOfRangeError

from strom.protocol.record_batch import (
    HEADER_SIZE,
    LOG_APPEND_TIME,
    TIMESTAMP_TYPE_MASK,
    Buffer,
    RecordBatchHeader,
    read_control_marker,
    rewrite_header,
)
from strom.protocol.record_stream import iter_record_heads
from strom.storage.leader_epoch_cache import LeaderEpochFileCache
from strom.storage.local_log import FetchDataInfo, LocalLog, parse_topic_partition, time_ms
from strom.storage.log_config import LogConfig
from strom.storage.log_loader import LogLoader, rebuild_producer_state
from strom.storage.producer_state import Marker, ProducerStateManager
from strom.storage.recompression import recompress
from strom.storage.segment import LogSegment
from strom.storage.transaction_index import AbortedTxn
from strom.storage.validator import AppendOrigin, LogValidator

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


class LogMovedError(KafkaStorageError):
    """A write reached a log that a log dir move replaced meanwhile; retry on the partition's new log."""


@dataclass(slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_count: int
    max_timestamp: int
    duplicate: bool = False
    offset_of_max_timestamp: int = -1
    valid_bytes: int = 0


def _markers_in(view: memoryview, headers: list[RecordBatchHeader]) -> dict[int, Marker] | None:
    """Batch position -> (control type, coordinator epoch) of the control batches; None if there are none
    (the common case: one attribute test per batch)."""
    markers: dict[int, Marker] | None = None
    for h in headers:
        if h.is_control:
            marker = read_control_marker(view, h.position)
            if marker is not None:
                if markers is None:
                    markers = {}
                markers[h.position] = marker
    return markers


class Log:
    """One partition's log above its LocalLog. All mutating methods take the per-log lock (safe from a
    thread pool); the LocalLog is guarded by the same lock."""

    def __init__(
        self,
        directory: str,
        config: LogConfig,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        high_watermark: int | None = None,
        now_ms: int | None = None,
    ) -> None:
        self.directory = os.path.abspath(directory)
        self.topic, self.partition = parse_topic_partition(os.path.basename(self.directory))  # before mkdir
        self._lock = threading.RLock()
        loaded = LogLoader(
            self.directory, config, recovery_point, log_start_offset, clean_shutdown, now_ms
        ).load()
        self.recovered_segments = loaded.recovered_segments  # for LogManager's start-up summary
        self.indexed_segments = loaded.indexed_segments  # likewise
        self._local = LocalLog(self.directory, config, loaded.segments, loaded.log_end_offset,
                               loaded.recovery_point, self._lock, now_ms)
        # The first offset readers see. Local data starts at or below it (LocalLog.first_base_offset);
        # a remote tier would add a local log start offset between the two and read below it remotely.
        self.log_start_offset = loaded.log_start_offset
        self.producer_state: ProducerStateManager = loaded.producer_state
        self.leader_epoch_cache: LeaderEpochFileCache = loaded.leader_epoch_cache
        hw = self.log_start_offset if high_watermark is None else high_watermark
        self.high_watermark = min(max(hw, self.log_start_offset), loaded.log_end_offset)
        # The log dir's storage thread (LogManager.executor_for) for file mutations off the event loop;
        # None (a log no LogManager owns) runs them on the loop's default executor.
        self.storage_executor: Executor | None = None
        self.moved = False  # replaced by a copy in another log dir (mark_moved): writes fail
        # Producer snapshots below the first segment left after retention, deleted with its segments.
        self._snapshots_below = -1
        self._snapshots_lock = threading.Lock()

    # -- properties ---------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._local.end_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below it is fsynced (kept by the LocalLog)."""
        return self._local.recovery_point

    @property
    def config(self) -> LogConfig:
        return self._local.config

    @property
    def closed(self) -> bool:
        return self._local.closed

    @property
    def segments(self) -> list[LogSegment]:
        return self._local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def size_in_bytes(self) -> int:
        return self._local.size_in_bytes

    @property
    def latest_epoch(self) -> int | None:
        """The newest leader epoch that wrote to this log, None if none did (or all of it was truncated)."""
        return self.leader_epoch_cache.latest_epoch

    def assign_epoch_start_offset(self, leader_epoch: int, start_offset: int | None = None) -> None:
        """A new leader's epoch starts at its LEO (Kafka assigns it on becoming leader, not on the
        first append), so followers asking OffsetForLeaderEpoch learn the divergence point at once.

        ``start_offset`` None: the LEO. Run on the dir's storage thread (see ``assign_epoch_starts``).
        """
        with self._lock:
            if leader_epoch < 0 or leader_epoch == self.leader_epoch_cache.latest_epoch:
                return
            start = self._local.end_offset if start_offset is None else start_offset
        self.assign_epoch_starts([(leader_epoch, start)])

    def assign_epoch_starts(self, starts: list[tuple[int, int]]) -> None:
        """Record where leader epochs start before the data that needs them is appended.

        Run on the dir's storage thread: the checkpoint write happens outside ``_lock``, which the
        event loop takes for every append; only deciding and adopting the new entries hold it. An
        append that later meets these epochs finds them assigned and writes nothing. Raises OSError
        if the write fails. The file is not fsynced here: ``flush`` makes it durable before the
        recovery point passes the data, and the loader repairs it from the unflushed tail (ADR 0047).
        """
        cache = self.leader_epoch_cache
        with self._lock:
            self._check_not_moved()
            version = cache.version
            entries = cache.prepare_assign_all(starts)
        if entries is None:
            return
        try:
            cache.write(entries)
        except OSError:
            self._check_not_moved()  # the dir was renamed away under the write: not a disk failure
            raise
        with self._lock:
            self._check_not_moved()
            if cache.version == version:
                cache.adopt(entries)
            else:  # the entries changed meanwhile (rare): decide and write again, under the lock
                cache.assign_all(starts)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end_offset)``, or ``(-1, -1)`` if nothing is known.

        The epoch is the largest one <= ``leader_epoch`` this log has; the end offset is where
        the next epoch starts, or the LEO for the latest one (see LeaderEpochFileCache.end_offset_for).
        """
        with self._lock:
            return self.leader_epoch_cache.end_offset_for(leader_epoch, self._local.end_offset)

    @property
    def last_stable_offset(self) -> int:
        unstable = self.producer_state.first_unstable_offset(self.high_watermark)
        return self.high_watermark if unstable is None else min(self.high_watermark, unstable)

    def update_high_watermark(self, hw: int) -> int:
        """Set by the Partition (leader: min follower LEO; follower: from the leader); clamped to [LSO, LEO]."""
        with self._lock:
            self.high_watermark = min(max(hw, self.log_start_offset), self._local.end_offset)
            self.producer_state.on_high_watermark(self.high_watermark)
            return self.high_watermark

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._local.update_config(config)

    def segment_for(self, offset: int) -> LogSegment:
        """The segment whose base offset is the greatest <= ``offset`` (binary search on base offsets)."""
        with self._lock:
            return self._local.segment_for(offset)

    # -- append -------------------------------------------------------------------------------------

    def append_as_leader(
        self, records: Buffer, leader_epoch: int, now_ms: int | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate, assign offsets from the LEO, stamp the leader epoch (and LogAppendTime), append.

        Raises a kafka.errors exception and writes nothing if any batch is invalid.  An
        idempotent retry returns the original offsets with ``duplicate=True``.
        """
        now = now_ms if now_ms is not None else time_ms()
        local = self._local
        config = local.config
        view = records if isinstance(records, memoryview) else memoryview(records)
        from_client = origin is AppendOrigin.CLIENT
        result = LogValidator.validate(view, config, now, from_client)
        if from_client and config.compression_type != "producer":
            converted = recompress(view, result.headers, config)
            if converted is not None:  # some batch was not in the topic's codec: store it in that codec
                view = memoryview(converted)
                result = LogValidator.validate(view, config, now, from_client)
        append_time = now if config.log_append_time else None
        # Clients cannot write control batches (the validator refused them): only coordinators have markers.
        markers = None if from_client else _markers_in(view, result.headers)
        with self._lock:
            self._check_open()
            dup = self.producer_state.check_batches(result.headers, markers, from_client)
            if dup is not None:
                return LogAppendInfo(
                    first_offset=dup.first_offset,
                    last_offset=dup.last_offset,
                    log_append_time_ms=dup.timestamp if append_time is not None else -1,
                    log_start_offset=self.log_start_offset,
                    record_count=dup.last_offset - dup.first_offset + 1,
                    max_timestamp=dup.timestamp,
                    duplicate=True,
                )
            first_offset = offset = local.end_offset
            if leader_epoch != self.leader_epoch_cache.latest_epoch and leader_epoch >= 0:
                self.leader_epoch_cache.assign(leader_epoch, first_offset)  # before the data: never behind it
            buffers: list[Buffer] = []
            batches: list[tuple[int, int, int]] = []
            max_ts = -1
            offset_of_max_ts = -1
            for h in result.headers:
                body = view[h.position + HEADER_SIZE : h.end]
                buffers.append(rewrite_header(view, h.position, offset, leader_epoch, append_time, body))
                buffers.append(body)
                h.base_offset = offset
                h.partition_leader_epoch = leader_epoch
                if append_time is not None:
                    h.max_timestamp = append_time
                    h.attributes |= TIMESTAMP_TYPE_MASK
                if h.max_timestamp > max_ts:
                    max_ts, offset_of_max_ts = h.max_timestamp, h.last_offset
                batches.append((h.last_offset, h.max_timestamp, h.size))
                offset = h.next_offset
            self._maybe_roll(result.size, max_ts, offset - 1, now)
            local.append(buffers, batches, offset)
            if markers is None:
                for h in result.headers:
                    self.producer_state.update(h)
            else:
                self._update_producer_state(result.headers, markers)
            if offset - local.recovery_point >= config.flush_messages:
                self.leader_epoch_cache.flush()
                local.flush()
            return LogAppendInfo(
                first_offset=first_offset,
                last_offset=offset - 1,
                log_append_time_ms=append_time if append_time is not None else -1,
                log_start_offset=self.log_start_offset,
                record_count=result.record_count,
                max_timestamp=max_ts,
                offset_of_max_timestamp=offset_of_max_ts,
                valid_bytes=result.size,
            )

    def append_as_follower(self, records: Buffer, now_ms: int | None = None) -> LogAppendInfo:
        """Append batches whose offsets the leader assigned; they must start at or after the LEO."""
        now = now_ms if now_ms is not None else time_ms()
        view = records if isinstance(records, memoryview) else memoryview(records)
        result = LogValidator.validate(view, self.config, now, from_client=False)
        with self._lock:
            self._check_open()
            headers = result.headers
            local = self._local
            expected = local.end_offset
            for h in headers:
                if h.base_offset < expected:
                    raise InvalidRecordError(
                        f"follower append at offset {h.base_offset} is below expected offset {expected}"
                    )
                expected = h.next_offset
            first = headers[0].base_offset
            last = headers[-1].last_offset
            self._assign_epochs_of(headers)
            max_ts = max(h.max_timestamp for h in headers)
            self._maybe_roll(result.size, max_ts, last, now)
            local.append([view], [(h.last_offset, h.max_timestamp, h.size) for h in headers], last + 1)
            self._update_producer_state(headers, _markers_in(view, headers))
            if last + 1 - local.recovery_point >= local.config.flush_messages:
                self.leader_epoch_cache.flush()
                local.flush()
            append_time = max_ts if headers[-1].timestamp_type == LOG_APPEND_TIME else -1
            return LogAppendInfo(
                first,
                last,
                append_time,
                self.log_start_offset,
                result.record_count,
                max_ts,
                valid_bytes=result.size,
            )

    def _update_producer_state(self, headers: list[RecordBatchHeader], markers: dict[int, Marker] | None) -> None:
        """Track producers; an ABORT marker adds its transaction to the active segment's txn index."""
        state = self.producer_state
        for h in headers:
            done = state.update(h, markers.get(h.position) if markers else None)
            if done is not None and done.aborted:
                self._local.active_segment.txn_index.append(AbortedTxn(
                    done.producer_id, done.first_offset, done.last_offset, state.last_stable_offset_after(done)))

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound), for a read_committed fetch.

        An aborted transaction is indexed in the segment of its marker, which lies at or after
        any of its records, so the search starts at the segment holding ``start_offset`` and stops at
        an entry whose LSO reaches the bound (no later abort can start below it)."""
        return self._local.collect_aborted_transactions(start_offset, upper_bound)

    def _assign_epochs_of(self, headers: list[RecordBatchHeader]) -> None:
        """Record the start of each new leader epoch among the leader's batches (one file write at most).

        Epochs already recorded where these batches start (written ahead on the storage thread by
        ``assign_epoch_starts``) cost nothing here."""
        cache = self.leader_epoch_cache
        latest = cache.latest_epoch
        changes: list[tuple[int, int]] | None = None
        for h in headers:
            epoch = h.partition_leader_epoch
            if epoch != latest and epoch >= 0:
                if changes is None and cache.epoch_for_offset(h.base_offset) == epoch:
                    latest = epoch  # recorded ahead of this append
                    continue
                if changes is None:
                    changes = []
                changes.append((epoch, h.base_offset))
                latest = epoch
        if changes is not None:
            cache.assign_all(changes)

    def _maybe_roll(self, incoming: int, max_ts: int, max_offset: int, now: int) -> None:
        reason = self._local.roll_reason(incoming, max_ts, max_offset, now)
        if reason is not None:
            log.debug("rolling %s-%d at offset %d: %s", self.topic, self.partition, self._local.end_offset, reason)
            self.roll(now)

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the LEO (no-op if the active one is empty and already there),
        with a producer-state snapshot at its base offset (recovery replays from there)."""
        with self._lock:
            self._check_open()
            local = self._local
            if local.active_is_empty_at_end:
                return local.active_segment
            self._rename_doomed()  # their names must be free before new files appear
            if self.storage_executor is not None:  # written and fsynced on the dir's thread, off the append path
                self.producer_state.snapshot_later(local.end_offset, self.storage_executor)
            else:
                self.producer_state.take_snapshot(local.end_offset)
            return local.roll(now_ms)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms (none with an open transaction)."""
        with self._lock:
            if self.closed:
                return 0
            return self.producer_state.remove_expired_producers(now_ms, expiration_ms)

    # -- read ---------------------------------------------------------------------------------------

    def read(
        self, start_offset: int, max_bytes: int, max_offset: int | None = None, min_one_message: bool = True
    ) -> FetchDataInfo:
        """Whole batches from the one containing ``start_offset`` up to ``max_offset`` (exclusive).

        May span segments.  ``max_bytes`` bounds the total except that the first batch
        is always whole when ``min_one_message``.  Raises OffsetOutOfRangeError outside
        [log_start_offset, LEO].
        """
        with self._lock:
            leo = self._local.end_offset
            # A remote tier would serve offsets below the local log start from remote segments here.
            if start_offset < self.log_start_offset or start_offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} is out of range for {self.topic}-{self.partition}: "
                    f"log start {self.log_start_offset}, log end {leo}"
                )
            limit_offset = leo if max_offset is None else min(max_offset, leo)
            return self._local.read(start_offset, max_bytes, limit_offset, min_one_message)

    # -- timestamps ---------------------------------------------------------------------------------

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) or None when no record qualifies.

        -2 earliest -> (log start, -1); -1 latest -> (LEO, -1); -3 max timestamp ->
        the exact offset of the first record carrying the largest timestamp (like
        Kafka 3.8+, decoding that one batch); otherwise the first record with
        timestamp >= target, found via the time index then a header scan.
        """
        with self._lock:
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return self.log_start_offset, -1
            if timestamp == LATEST_TIMESTAMP:
                return self._local.end_offset, -1
            segments = self._local.segments
            start = self.log_start_offset
        if timestamp == MAX_TIMESTAMP:
            best: LogSegment | None = None
            for seg in segments:
                if seg.max_timestamp_so_far >= 0 and (
                    best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far
                ):
                    best = seg
            if best is None:
                return None
            max_ts = best.max_timestamp_so_far
            header = best.translate_offset(best.offset_of_max_timestamp)
            if header is None:
                return best.offset_of_max_timestamp, max_ts
            if header.timestamp_type == LOG_APPEND_TIME:
                return header.base_offset, max_ts
            data = os.pread(best.file.fileno(), header.size, header.position)
            for record in iter_record_heads(data):
                if record.timestamp == max_ts:
                    return record.offset, max_ts
            return header.last_offset, max_ts
        for seg in segments:
            if seg.max_timestamp_so_far >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, start)
                if found is not None:
                    return found
        return None

    def legacy_fetch_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0 (Kafka's legacy offsets): each segment's base offset (the log start offset for the
        first) paired with its file's last modification time, plus the log end offset paired with now when
        the active segment holds data; the answer lists, newest first and at most ``max_num_offsets`` of
        them, those at and before the last pair modified at or before ``timestamp`` (-1: the newest,
        -2: the oldest)."""
        with self._lock:
            segments = self._local.segments
            start = self.log_start_offset
            points = [max(seg.base_offset, start) for seg in segments]
            if segments[-1].size > 0:
                points.append(self._local.end_offset)
            if timestamp == LATEST_TIMESTAMP:
                last = len(points) - 1
            elif timestamp == EARLIEST_TIMESTAMP:
                last = 0
            else:  # modification times only for this case: one fstat per segment
                times = [seg.last_modified_ms for seg in segments] + [time_ms()] * (len(points) - len(segments))
                last = next((i for i in range(len(points) - 1, -1, -1) if times[i] <= timestamp), -1)
        chosen = points[max(last + 1 - max(max_num_offsets, 0), 0):last + 1]
        return sorted(chosen, reverse=True)

    # -- retention ----------------------------------------------------------------------------------

    def delete_records(self, new_log_start_offset: int) -> int:
        """DeleteRecords: advance the log start offset (<= HW; -1 means HW) and drop whole segments below it."""
        with self._lock:
            self._check_open()
            if new_log_start_offset == -1:
                new_log_start_offset = self.high_watermark
            if new_log_start_offset > self.high_watermark or new_log_start_offset < 0:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self.topic}-{self.partition} before offset "
                    f"{new_log_start_offset}: high watermark is {self.high_watermark}"
                )
            if new_log_start_offset > self.log_start_offset:
                self.log_start_offset = new_log_start_offset
                self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
                self._delete_segments(self._log_start_offset_breached)
            start = self.log_start_offset
        self._rename_doomed()
        return start

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention pass (retention.ms, retention.bytes, log start offset); returns segments deleted."""
        now = now_ms if now_ms is not None else time_ms()
        with self._lock:
            if self.closed:
                return 0
            config = self.config
            deleted = 0
            if config.delete_enabled:
                if config.retention_ms >= 0:
                    deleted += self._delete_segments(
                        lambda seg, _nxt: now - seg.largest_timestamp > config.retention_ms
                    )
                if config.retention_bytes >= 0:
                    excess = [self.size_in_bytes - config.retention_bytes]

                    def size_breached(seg: LogSegment, _nxt: LogSegment | None) -> bool:
                        if excess[0] - seg.size >= 0:
                            excess[0] -= seg.size
                            return True
                        return False

                    deleted += self._delete_segments(size_breached)
            deleted += self._delete_segments(self._log_start_offset_breached)
        self._rename_doomed()  # file renames and unlinks outside the lock
        return deleted

    def _log_start_offset_breached(self, seg: LogSegment, nxt: LogSegment | None) -> bool:
        upper = nxt.base_offset if nxt is not None else self._local.end_offset
        return upper <= self.log_start_offset

    def _delete_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Delete the oldest segments while ``predicate`` holds and they lie wholly below the HW.

        With a remote tier, this is where a segment would leave local disk only once it is copied,
        moving the local log start offset rather than the log start offset."""
        local = self._local
        segs = local.segments
        leo = local.end_offset
        doomed = 0
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else leo
            if nxt is None and seg.size == 0:
                break
            if upper > self.high_watermark or not predicate(seg, nxt):
                break
            doomed += 1
        if not doomed:
            return 0
        if doomed == len(segs):
            self.roll()  # keep an (empty) active segment at the LEO
        local.remove_oldest_segments(doomed)
        first = local.first_base_offset
        self.log_start_offset = max(self.log_start_offset, first)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.high_watermark = max(self.high_watermark, self.log_start_offset)
        local.recovery_point = max(local.recovery_point, self.log_start_offset)
        with self._snapshots_lock:
            self._snapshots_below = first
        return doomed

    def _rename_doomed(self) -> None:
        """Rename the segments retention dropped to ``.deleted`` (and drop older producer snapshots)."""
        self._local.delete_removed_segments()
        with self._snapshots_lock:
            snapshots_below, self._snapshots_below = self._snapshots_below, -1
        if snapshots_below >= 0:
            self.producer_state.delete_snapshots_before(snapshots_below)

    # -- truncation ---------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at/after ``offset`` (follower divergence). Returns whether anything changed."""
        with self._lock:
            self._check_open()
            if offset < 0:
                raise ValueError(f"cannot truncate to negative offset {offset}")
            local = self._local
            if offset >= local.end_offset:
                return False
            if offset < local.first_base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            local.truncate_to(offset)
            self.leader_epoch_cache.truncate_from_end(local.end_offset)
            self._after_truncation()
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Drop every segment and the epoch cache; the log restarts empty at ``new_offset``."""
        with self._lock:
            self._check_open()
            self._rename_doomed()
            self.leader_epoch_cache.clear()  # first: if it cannot be written, nothing has changed yet
            self._local.truncate_fully_and_start_at(new_offset)
            self.log_start_offset = new_offset
            self.producer_state.delete_snapshots_after(-1)
            self._after_truncation()

    def _after_truncation(self) -> None:
        leo = self._local.end_offset
        self.high_watermark = min(self.high_watermark, leo)
        self.log_start_offset = min(self.log_start_offset, leo)
        rebuild_producer_state(self.producer_state, self._local.segments, leo)

    # -- durability & lifecycle ---------------------------------------------------------------------

    def flush(self, offset: int | None = None, now_ms: int | None = None) -> None:
        """fsync segments holding offsets in [recovery_point, offset) and advance the recovery point.

        The leader-epoch checkpoint first: its entries must be durable before the recovery point
        passes the batches they describe (the loader checks only the tail above it)."""
        self.leader_epoch_cache.flush()
        self._local.flush(offset, now_ms)

    def needs_flush(self, now_ms: int) -> bool:
        """flush.ms elapsed with unflushed data, or a segment was rolled (Kafka flushes those async)."""
        return self._local.needs_flush(now_ms)

    def close(self, snapshot: bool = True) -> bool:
        """Snapshot producer state at the LEO (unless cheap to rebuild), write indexes, close files.

        I/O errors (a full disk) are logged, not raised: the files are closed regardless.
        Returns False if something was not persisted, so the caller knows recovery is needed.
        """
        with self._lock:
            if self.closed:
                return True
            ok = True
            try:
                self._rename_doomed()
            except OSError as exc:
                ok = False
                log.warning("could not delete old segments of %s-%d: %s", self.topic, self.partition, exc)
            # A log holding no batches and no producers restarts to the same empty state without a
            # snapshot; skipping it spares a file per empty partition at shutdown. So does a log whose
            # snapshot at the LEO already holds its producer state (nothing written since), and one whose
            # replay from its newest snapshot is a small active segment (a load reads it anyway).
            end = self._local.end_offset
            empty = not self.producer_state.producers and end == self._local.first_base_offset
            if snapshot and not empty and not self.producer_state.snapshot_is_current(end) \
                    and not self._replay_is_short():
                try:
                    # Not fsynced: the snapshot only shortens the replay at load. The marker vouches for
                    # the batches, and a torn or lost snapshot fails its CRC or is not found, so the load
                    # replays them from the previous one instead (the same state).
                    self.producer_state.take_snapshot(end, fsync=False)
                except OSError as exc:
                    ok = False
                    log.warning("could not snapshot producer state of %s-%d: %s", self.topic, self.partition, exc)
            # A closed log's dir may be renamed, deleted or opened by a new Log: a deferred roll snapshot
            # must not land there later (the snapshot at the LEO below supersedes it anyway).
            self.producer_state.cancel_pending_snapshots()
            closed_cleanly = self._local.close(for_deletion=not snapshot)
            return ok and closed_cleanly

    def _replay_is_short(self) -> bool:
        """Whether a load would rebuild the producer state from the newest snapshot file (or the log
        start) by replaying no more than the active segment, and that is small: its few batches are
        read at load anyway (``LogSegment.keeps_indexes_in_memory``), so a snapshot at the LEO saves
        less than creating its file costs the shutdown."""
        active = self._local.active_segment
        if not active.keeps_indexes_in_memory():
            return False
        offsets = self.producer_state.snapshot_offsets()
        newest = offsets[-1] if offsets else self._local.first_base_offset
        return newest >= active.base_offset

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        with self._lock:
            self._local.delete()

    def rename_dir(self, new_directory: str) -> None:
        """Rename the partition directory (a future log taking its real name, see log_dir_moves): under
        the lock, so no roll, flush or snapshot creates a file at the old path meanwhile."""
        with self._lock:
            self.producer_state.cancel_pending_snapshots()  # they would land in the old path
            self._local.rename_dir(new_directory)
            self.directory = self._local.directory
            self.producer_state.directory = self.directory
            self.leader_epoch_cache.path = os.path.join(self.directory, os.path.basename(self.leader_epoch_cache.path))

    def mark_moved(self) -> None:
        """This log was replaced by a copy in another log dir: from now on every write to it fails with
        LogMovedError, so a writer that raced the swap retries on the replacement. Caller holds the lock."""
        self.moved = True
        self.producer_state.cancel_pending_snapshots()

    def _check_not_moved(self) -> None:
        if self.moved:
            raise LogMovedError(f"log {self.topic}-{self.partition} moved to another log dir") from None

    def _check_open(self) -> None:
        if self._local.closed:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")
        self._check_not_moved()

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self._local.end_offset}, "
            f"hw={self.high_watermark}, segments={len(self._local.segments)})"
        )

    # --- used by LogCleaner ---

    def replace_segment(self, old: LogSegment, cleaned_path: str) -> LogSegment | None:
        """Swap a compacted copy in for an inactive segment; None if the segment went away meanwhile.

        The swap is crash-safe and takes the lock only for the renames (see LocalLog.replace_segment)."""
        return self._local.replace_segment(old, cleaned_path)
