"""Log: the ordered list of LogSegments of one partition, in ``<log.dir>/<topic>-<partition>``.

Offsets: ``log_start_offset`` (first visible offset, moved by retention and
DeleteRecords), ``log_end_offset`` (LEO, next offset to assign), the
``high_watermark`` (set by the broker's Partition; exclusive: consumers see
offsets < HW) and the ``recovery_point`` (everything below it is fsynced).

Appends and reads work on whole batches.  A leader append validates headers
and CRCs (LogValidator), checks idempotent sequences (ProducerStateManager),
then rewrites only each batch's 61-byte header and writes header + untouched
body with one pwritev.  Reads return file ranges (FileSlice) for sendfile.

The LeaderEpochFileCache (``leader-epoch-checkpoint``) records where each leader epoch
starts; it changes only when an append carries a new epoch (one int compare per append
otherwise), on truncation and when the log start moves.  OffsetForLeaderEpoch answers from it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from kafka.errors import InvalidRecordError, OffsetOutOfRangeError

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
from strom.storage.checkpoints import fsync_dir
from strom.storage.leader_epoch_cache import LeaderEpochFileCache
from strom.storage.log_config import LogConfig
from strom.storage.log_loader import LogLoader, rebuild_producer_state
from strom.storage.producer_state import Marker, ProducerStateManager
from strom.storage.recompression import recompress
from strom.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    FileSlice,
    LogSegment,
    segment_path,
)
from strom.storage.transaction_index import AbortedTxn
from strom.storage.validator import AppendOrigin, LogValidator

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


def time_ms() -> int:
    return int(time.time() * 1000)


def parse_topic_partition(dirname: str) -> tuple[str, int]:
    """``my-topic-3`` -> ("my-topic", 3); topic names may contain dashes, so split on the last one."""
    topic, sep, partition = dirname.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{dirname!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


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


@dataclass(slots=True)
class FetchDataInfo:
    """Result of Log.read: file ranges of whole batches, in offset order."""

    slices: list[FileSlice] = field(default_factory=list)
    size: int = 0
    first_batch_offset: int = -1

    def to_bytes(self) -> bytes:
        return b"".join(s.read() for s in self.slices)


class _DeleteScheduler:
    """One daemon thread running delayed file deletions (file.delete.delay.ms)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def schedule(self, delay_s: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="strom-log-delete", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    timeout = None if not self._heap else self._heap[0][0] - time.monotonic()
                    self._cond.wait(timeout)
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:  # pragma: no cover - background best effort
                log.exception("delayed delete failed")


DELETE_SCHEDULER = _DeleteScheduler()


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
    """One partition's log. All mutating methods take the per-log lock (safe from a thread pool)."""

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
        self.topic, self.partition = parse_topic_partition(os.path.basename(self.directory))
        self.config = config
        self._lock = threading.RLock()
        loaded = LogLoader(
            self.directory, config, recovery_point, log_start_offset, clean_shutdown, now_ms
        ).load()
        self._segments: list[LogSegment] = loaded.segments
        self._bases: list[int] = [s.base_offset for s in self._segments]
        self.log_start_offset = loaded.log_start_offset
        self._leo = loaded.log_end_offset
        self.recovery_point = loaded.recovery_point
        self.producer_state: ProducerStateManager = loaded.producer_state
        self.leader_epoch_cache: LeaderEpochFileCache = loaded.leader_epoch_cache
        hw = self.log_start_offset if high_watermark is None else high_watermark
        self.high_watermark = min(max(hw, self.log_start_offset), self._leo)
        self._last_flush_ms = now_ms if now_ms is not None else time_ms()
        self._rolled_since_flush = False
        self.closed = False
        # The log dir's storage thread (LogManager.executor_for) for file mutations off the event loop;
        # None (a log no LogManager owns) runs them on the loop's default executor.
        self.storage_executor: Executor | None = None
        # Segments retention took out of the list, still to be renamed to .deleted: renamed outside
        # _lock (the event loop takes it for every append), or first thing by anything creating segments.
        self._doomed: list[LogSegment] = []
        self._doomed_lock = threading.Lock()
        self._snapshots_below = -1

    # -- properties ---------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

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
            start = self._leo if start_offset is None else start_offset
        self.assign_epoch_starts([(leader_epoch, start)])

    def assign_epoch_starts(self, starts: list[tuple[int, int]]) -> None:
        """Record where leader epochs start before the data that needs them is appended.

        Run on the dir's storage thread: the fsynced checkpoint write happens outside ``_lock``,
        which the event loop takes for every append; only deciding and adopting the new entries
        hold it. An append that later meets these epochs finds them assigned and writes nothing.
        Raises OSError if the write fails.
        """
        cache = self.leader_epoch_cache
        with self._lock:
            version = cache.version
            entries = cache.prepare_assign_all(starts)
        if entries is None:
            return
        cache.write(entries)
        with self._lock:
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
            return self.leader_epoch_cache.end_offset_for(leader_epoch, self._leo)

    @property
    def last_stable_offset(self) -> int:
        unstable = self.producer_state.first_unstable_offset(self.high_watermark)
        return self.high_watermark if unstable is None else min(self.high_watermark, unstable)

    def update_high_watermark(self, hw: int) -> int:
        """Set by the Partition (leader: min follower LEO; follower: from the leader); clamped to [LSO, LEO]."""
        with self._lock:
            self.high_watermark = min(max(hw, self.log_start_offset), self._leo)
            self.producer_state.on_high_watermark(self.high_watermark)
            return self.high_watermark

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config
            self.active_segment.index_interval_bytes = config.index_interval_bytes

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def segment_for(self, offset: int) -> LogSegment:
        """The segment whose base offset is the greatest <= ``offset`` (binary search on base offsets)."""
        with self._lock:
            return self._segments[self._segment_index_for(offset)]

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
        config = self.config
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
            first_offset = offset = self._leo
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
            self.active_segment.append(buffers, batches)
            self._leo = offset
            if markers is None:
                for h in result.headers:
                    self.producer_state.update(h)
            else:
                self._update_producer_state(result.headers, markers)
            if self._leo - self.recovery_point >= config.flush_messages:
                self.flush()
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
            expected = self._leo
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
            self.active_segment.append([view], [(h.last_offset, h.max_timestamp, h.size) for h in headers])
            self._leo = last + 1
            self._update_producer_state(headers, _markers_in(view, headers))
            if self._leo - self.recovery_point >= self.config.flush_messages:
                self.flush()
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
                self.active_segment.txn_index.append(AbortedTxn(
                    done.producer_id, done.first_offset, done.last_offset, state.last_stable_offset_after(done)))

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound), for a read_committed fetch.

        An aborted transaction is indexed in the segment of its marker, which lies at or after
        any of its records, so the search starts at the segment holding ``start_offset`` and stops at
        an entry whose LSO reaches the bound (no later abort can start below it)."""
        with self._lock:
            segments = self._segments[self._segment_index_for(start_offset):]
        found: list[AbortedTxn] = []
        for seg in segments:
            txns, complete = seg.txn_index.collect(start_offset, upper_bound)
            found.extend(txns)
            if complete:
                break
        return found

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
        reason = self.active_segment.should_roll(self.config, incoming, max_ts, max_offset, now)
        if reason is not None:
            log.debug("rolling %s-%d at offset %d: %s", self.topic, self.partition, self._leo, reason)
            self.roll(now)

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the LEO (no-op if the active one is empty and already there)."""
        with self._lock:
            self._check_open()
            active = self.active_segment
            new_base = self._leo
            if active.base_offset == new_base and active.size == 0:
                return active
            self._rename_doomed()  # their names must be free before new files appear
            active.on_become_inactive()
            self.producer_state.take_snapshot(new_base)
            for suffix in (".log", ".index", ".timeindex"):
                path = os.path.join(self.directory, f"{new_base:020d}{suffix}")
                if os.path.exists(path):
                    os.unlink(path)
            seg = LogSegment(self.directory, new_base, self.config, now_ms, active=True)
            self._segments.append(seg)
            self._bases.append(new_base)
            self._rolled_since_flush = True
            return seg

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
            leo = self._leo
            if start_offset < self.log_start_offset or start_offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} is out of range for {self.topic}-{self.partition}: "
                    f"log start {self.log_start_offset}, log end {leo}"
                )
            limit_offset = leo if max_offset is None else min(max_offset, leo)
            info = FetchDataInfo()
            if start_offset >= limit_offset:
                return info
            segments = self._segments
            i = self._segment_index_for(start_offset)
            offset = start_offset
            remaining = max_bytes
            while i < len(segments) and offset < limit_offset:
                seg = segments[i]
                nxt = self._bases[i + 1] if i + 1 < len(segments) else None
                if nxt is not None and limit_offset >= nxt:
                    max_pos = seg.size
                else:
                    stop = seg.translate_offset(limit_offset)
                    max_pos = stop.position if stop is not None else seg.size
                res = seg.read(offset, remaining, max_pos, min_one_message and not info.slices)
                if res is not None:
                    fslice, first = res
                    if not info.slices:
                        info.first_batch_offset = first.base_offset
                    info.slices.append(fslice)
                    info.size += fslice.size
                    remaining -= fslice.size
                    if fslice.position + fslice.size < max_pos or remaining <= 0:
                        break
                elif info.slices or offset < seg.next_offset():
                    break  # limits stop us inside this segment; never skip ahead past its data
                if nxt is None:
                    break
                offset = nxt
                i += 1
            return info

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
                return self._leo, -1
            segments = list(self._segments)
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
        upper = nxt.base_offset if nxt is not None else self._leo
        return upper <= self.log_start_offset

    def _delete_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Delete the oldest segments while ``predicate`` holds and they lie wholly below the HW."""
        doomed: list[LogSegment] = []
        segs = self._segments
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self._leo
            if nxt is None and seg.size == 0:
                break
            if upper > self.high_watermark or not predicate(seg, nxt):
                break
            doomed.append(seg)
        if not doomed:
            return 0
        if len(doomed) == len(segs):
            self.roll()  # keep an (empty) active segment at the LEO
        del self._segments[: len(doomed)]
        del self._bases[: len(doomed)]
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.high_watermark = max(self.high_watermark, self.log_start_offset)
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        with self._doomed_lock:
            self._doomed.extend(doomed)
            self._snapshots_below = self._segments[0].base_offset
        return len(doomed)

    def _rename_doomed(self) -> None:
        """Rename the segments retention dropped to ``.deleted`` (and drop older producer snapshots)."""
        with self._doomed_lock:
            doomed, self._doomed = self._doomed, []
            snapshots_below, self._snapshots_below = self._snapshots_below, -1
        for seg in doomed:
            self._async_delete(seg)
        if snapshots_below >= 0:
            self.producer_state.delete_snapshots_before(snapshots_below)

    def _async_delete(self, seg: LogSegment) -> None:
        """Rename to ``.deleted`` now, unlink after file.delete.delay.ms so open FileSlices stay valid."""
        try:
            seg.change_suffix(DELETED_SUFFIX)
        except FileNotFoundError:
            pass
        delay = self.config.file_delete_delay_ms
        if delay <= 0:
            seg.delete_files()
        else:
            DELETE_SCHEDULER.schedule(delay / 1000.0, seg.delete_files)

    # -- truncation ---------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at/after ``offset`` (follower divergence). Returns whether anything changed."""
        with self._lock:
            self._check_open()
            if offset < 0:
                raise ValueError(f"cannot truncate to negative offset {offset}")
            if offset >= self._leo:
                return False
            if offset < self._segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
                seg = self._segments.pop()
                self._bases.pop()
                self._async_delete(seg)
            active = self.active_segment
            active.truncate_to(offset)
            self._leo = active.next_offset()
            self.leader_epoch_cache.truncate_from_end(self._leo)
            self._after_truncation()
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Drop every segment and the epoch cache; the log restarts empty at ``new_offset``."""
        with self._lock:
            self._check_open()
            self._rename_doomed()
            self.leader_epoch_cache.clear()  # first: if it cannot be written, nothing has changed yet
            for seg in self._segments:
                self._async_delete(seg)
            seg = LogSegment(self.directory, new_offset, self.config, None, active=True)
            self._segments = [seg]
            self._bases = [new_offset]
            self.log_start_offset = new_offset
            self._leo = new_offset
            self.producer_state.delete_snapshots_after(-1)
            self._after_truncation()

    def _after_truncation(self) -> None:
        self.recovery_point = min(self.recovery_point, self._leo)
        self.high_watermark = min(self.high_watermark, self._leo)
        self.log_start_offset = min(self.log_start_offset, self._leo)
        rebuild_producer_state(self.producer_state, self._segments, self._leo)

    # -- durability & lifecycle ---------------------------------------------------------------------

    def flush(self, offset: int | None = None, now_ms: int | None = None) -> None:
        """fsync segments holding offsets in [recovery_point, offset) and advance the recovery point."""
        with self._lock:
            if self.closed:
                return
            target = self._leo if offset is None else min(offset, self._leo)
            self._last_flush_ms = now_ms if now_ms is not None else time_ms()
            if target <= self.recovery_point and not self._rolled_since_flush:
                return
            to_flush = []
            for i, seg in enumerate(self._segments):
                upper = self._bases[i + 1] if i + 1 < len(self._segments) else self._leo + 1
                if seg.base_offset < target and upper > self.recovery_point:
                    to_flush.append(seg)
            rolled = self._rolled_since_flush
            self._rolled_since_flush = False
        for seg in to_flush:
            try:
                seg.flush()
            except (OSError, ValueError):
                if not seg.deleted:
                    raise
        if rolled:
            fsync_dir(self.directory)
        with self._lock:
            self.recovery_point = max(self.recovery_point, target)

    def needs_flush(self, now_ms: int) -> bool:
        """flush.ms elapsed with unflushed data, or a segment was rolled (Kafka flushes those async)."""
        if self.closed:
            return False
        if self._rolled_since_flush:
            return True
        return self._leo > self.recovery_point and now_ms - self._last_flush_ms >= self.config.flush_ms

    def close(self, snapshot: bool = True) -> bool:
        """Snapshot producer state at the LEO, trim indexes, close files (no fsync: see LogManager).

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
            if snapshot:
                try:
                    self.producer_state.take_snapshot(self._leo, fsync=True)
                except OSError as exc:
                    ok = False
                    log.warning("could not snapshot producer state of %s-%d: %s", self.topic, self.partition, exc)
            for seg in self._segments:
                if not snapshot:
                    seg.deleted = True  # closing for deletion: nothing to trim
                try:
                    seg.close()
                except OSError as exc:
                    ok = False
                    log.warning("error closing segment %s: %s", seg.log_path, exc)
            self.closed = True
            return ok

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        with self._lock:
            if not self.closed:
                for seg in self._segments:
                    seg.deleted = True
                    seg.close()
                self.closed = True
            shutil.rmtree(self.directory, ignore_errors=True)

    def _check_open(self) -> None:
        if self.closed:
            from kafka.errors import KafkaStorageError

            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self._leo}, "
            f"hw={self.high_watermark}, segments={len(self._segments)})"
        )

    # --- used by LogCleaner ---

    def replace_segment(self, old: LogSegment, cleaned_path: str) -> LogSegment | None:
        """Swap a compacted copy in for an inactive segment; None if the segment went away meanwhile.

        The slow part (scanning the cleaned file, building and fsyncing its indexes under
        ``<base>.index.cleaned`` and ``<base>.timeindex.cleaned``) runs before the log lock is
        taken, so appends on the event loop (``__consumer_offsets`` above all) never wait for it.
        Under the lock only the swap happens, in a crash-safe order: drop the old indexes (a
        restart rebuilds missing ones), atomically rename ``<base>.log.cleaned`` over
        ``<base>.log``, then rename the new indexes into place. A crash at any point leaves
        either the old or the new segment complete, and any ``.cleaned`` leftover is deleted
        at load. Offsets keep their values; the old file stays readable through open
        FileSlices until it is closed after file.delete.delay.ms.
        """
        expected = segment_path(self.directory, old.base_offset, LOG_SUFFIX + CLEANED_SUFFIX)
        if os.path.abspath(cleaned_path) != os.path.abspath(expected):
            raise ValueError(f"a cleaned copy must be at {expected}, not {cleaned_path}")
        new = LogSegment(self.directory, old.base_offset, self.config, old.created_ms, active=False,
                         suffix=CLEANED_SUFFIX)
        try:
            new.recover()
            new.on_become_inactive()
            new.flush()
        except BaseException:
            new.delete_files()
            raise
        with self._lock:
            try:
                i = next(k for k, seg in enumerate(self._segments) if seg is old)
            except StopIteration:
                i = -1
            if self.closed or i < 0 or old is self._segments[-1] or old.deleted:
                new.delete_files()
                return None
            for index in (old.offset_index, old.time_index):
                _ = index.entries  # load it now: after the swap its path names the new segment's file
                try:
                    os.unlink(index.path)
                except FileNotFoundError:
                    pass
            new.change_suffix("")
            new.txn_index = old.txn_index  # same offsets, same aborted transactions, same file
            self._segments[i] = new
            old.deleted = True  # its paths now name the new files: never rename or unlink through it
        fsync_dir(self.directory)  # the renames are atomic already; this only makes them durable
        delay = self.config.file_delete_delay_ms
        if delay <= 0:
            old.close()
        else:
            DELETE_SCHEDULER.schedule(delay / 1000.0, old.close)
        return new
