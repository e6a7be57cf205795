"""LogCleaner: log compaction for topics with ``cleanup.policy=compact``.

Compaction keeps, for every key, only the latest record, so a compacted topic is
a changelog whose replay yields the current state (``__consumer_offsets`` is the
prime user). As in Kafka, a log has a *clean* head (already compacted, below the
first dirty offset kept in ``cleaner-offset-checkpoint``) and a *dirty* tail.
A round:

1. picks the cleanable range: whole inactive segments below the high watermark and
   older than ``min.compaction.lag.ms``;
2. cleans only if dirty bytes / cleanable bytes >= ``min.cleanable.dirty.ratio``
   (or ``max.compaction.lag.ms`` is exceeded, or expired tombstones wait);
3. builds the offset map (key -> latest offset) from the dirty range;
4. rewrites each cleanable segment, keeping a record only if it is the latest for
   its key; a tombstone (null value) also goes once its batch is older than
   ``delete.retention.ms``, so consumers have that long to see the deletion;
5. swaps each rewritten segment in through ``<base>.log.cleaned`` and an atomic
   rename (``Log.replace_segment``). Offsets never change; they just get gaps.

Batches are kept whole when nothing in them is dropped (bytes copied verbatim,
compression untouched); otherwise they are rebuilt with the survivors, keeping
base offset, base timestamp, last offset delta, producer id/epoch/sequence, compression and
timestamp type. Records are read out of a batch a chunk at a time (``RecordReader``) and the
survivors' bytes are copied through a streaming compressor straight into the cleaned file, so
a compressed batch that inflates to gigabytes costs the cleaner a bounded buffer, never its
inflated size; every codec (gzip, snappy, lz4, zstd) is read. Control batches (transaction markers) are kept as they are; records of
aborted transactions (found in the transaction indexes) are dropped and never enter the
offset map, so an aborted write can never erase a committed one; the cleanable range stops at
the last stable offset, so open transactions are never compacted. Records without a key are
kept (Kafka rejects them on produce for compacted topics; Strom keeps what it has).

Simplification: segments are cleaned one by one and never merged, so cleaned
segments can be small; a crash can only leave a ``.cleaned`` file, which the
LogLoader deletes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.config import BrokerConfig

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from strom.protocol.record_batch import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
)
from strom.protocol.record_stream import BatchRewriter, RecordHead, RecordReader
from strom.server_common.types import TopicPartition
from strom.storage.checkpoints import OffsetCheckpointFile
from strom.storage.log import Log
from strom.storage.segment import CLEANED_SUFFIX, LogSegment
from strom.storage.transaction_index import AbortedTxn

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
_READ_CHUNK = 1024 * 1024


def time_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class CleanerStats:
    topic: str
    partition: int
    segments_rewritten: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_removed: int = 0
    first_dirty_offset: int = 0
    end_offset: int = 0
    elapsed_s: float = 0.0


@dataclass(slots=True)
class _LogState:
    """What the cleaner remembers about a log between rounds."""

    first_dirty_offset: int = 0
    # Batch timestamp of the oldest tombstone kept in the clean head (-1: none), so
    # a round runs when it expires even if nothing else is dirty.
    oldest_kept_tombstone_ts: int = -1


def iter_segment_batches(seg: LogSegment, end_position: int | None = None
                         ) -> Iterator[tuple[RecordBatchHeader, bytes]]:
    """(header, whole batch bytes) for each batch of a segment, reading in large chunks."""
    fd = seg.file.fileno()
    limit = seg.size if end_position is None else min(end_position, seg.size)
    pos = 0
    buf = b""
    buf_start = 0
    while pos + HEADER_SIZE <= limit:
        off = pos - buf_start
        if off + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(max(_READ_CHUNK, HEADER_SIZE), limit - pos), pos)
            buf_start, off = pos, 0
            if len(buf) < HEADER_SIZE:
                return
        header = RecordBatchHeader(pos, HEADER.unpack_from(buf, off))
        size = header.batch_length + LOG_OVERHEAD
        if off + size > len(buf):
            buf = os.pread(fd, max(size, min(_READ_CHUNK, limit - pos)), pos)
            buf_start, off = pos, 0
            if len(buf) < size:
                return  # torn tail: recovery's business, not ours
        yield header, buf[off:off + size]
        pos += size


@dataclass(slots=True)
class _BatchPlan:
    """What the rewrite does with one batch: copy it, drop it, or rebuild it with ``kept`` records."""

    position: int
    kept: int
    max_timestamp: int
    whole: bool


def _rebuild(f: BinaryIO, header: RecordBatchHeader, data: bytes, plan: _BatchPlan,
             keep: Callable[[RecordHead], bool]) -> int:
    """Write the survivors of ``data`` as one batch of the same codec at the end of ``f``; its size."""
    start = f.tell()
    f.write(bytes(HEADER_SIZE))  # the header's length and CRC are known once the body is written
    with RecordReader(data) as reader:
        rewriter = BatchRewriter(header, data, header.compression, plan.kept, plan.max_timestamp, f.write)
        for head in reader.heads():
            if keep(head):
                rewriter.add(reader, head)
        new_header = rewriter.finish()
    end = f.tell()
    f.seek(start)
    f.write(new_header)
    f.seek(end)
    return end - start


class _AbortedRanges:
    """Offsets of aborted transactions per producer, from the logs' transaction indexes."""

    def __init__(self, txns: list[AbortedTxn]) -> None:
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for t in txns:
            self._by_producer.setdefault(t.producer_id, []).append((t.first_offset, t.last_offset))

    def holds(self, header: RecordBatchHeader) -> bool:
        if not header.is_transactional or not self._by_producer:
            return False
        ranges = self._by_producer.get(header.producer_id) or []
        return any(first <= header.base_offset < last for first, last in ranges)


class LogCleaner:
    """Compacts the logs of compacted topics; ``clean_logs`` is one round over all of them.

    Runs in a worker thread (the broker calls it from a periodic job through an
    executor); each Log's own lock guards the final segment swap.
    """

    def __init__(self, log_dirs: list[str] | None = None) -> None:
        self.log_dirs = [os.path.abspath(d) for d in log_dirs or []]
        self._state: dict[TopicPartition, _LogState] = {}
        self._loaded_dirs: set[str] = set()

    # -- checkpoints -----------------------------------------------------------------
    def _checkpoint_path(self, plog: Log) -> str:
        return os.path.join(os.path.dirname(plog.directory), CLEANER_OFFSET_CHECKPOINT)

    def _state_of(self, plog: Log) -> _LogState:
        tp = (plog.topic, plog.partition)
        parent = os.path.dirname(plog.directory)
        if parent not in self._loaded_dirs:
            self._loaded_dirs.add(parent)
            try:
                for key, offset in OffsetCheckpointFile(self._checkpoint_path(plog)).read().items():
                    self._state.setdefault(key, _LogState(first_dirty_offset=offset))
            except (OSError, ValueError):
                pass
        return self._state.setdefault(tp, _LogState())

    def _write_checkpoint(self, plog: Log) -> None:
        parent = os.path.dirname(plog.directory)
        offsets = {tp: st.first_dirty_offset for tp, st in self._state.items()
                   if os.path.isdir(os.path.join(parent, f"{tp[0]}-{tp[1]}"))}
        try:
            OffsetCheckpointFile(self._checkpoint_path(plog)).write(offsets)
        except OSError:
            log.exception("could not write %s", self._checkpoint_path(plog))

    def forget(self, topic: str, partition: int) -> None:
        self._state.pop((topic, partition), None)

    # -- rounds ----------------------------------------------------------------------
    def clean_logs(self, logs: dict[TopicPartition, Log], now_ms: int | None = None) -> list[CleanerStats]:
        now = time_ms() if now_ms is None else now_ms
        done = []
        for plog in logs.values():
            if not plog.config.compact_enabled or plog.closed:
                continue
            try:
                stats = self.clean_log(plog, now)
            except Exception:
                log.exception("cleaning %s-%d failed", plog.topic, plog.partition)
                continue
            if stats is not None:
                done.append(stats)
        return done

    def _cleanable_segments(self, plog: Log, now: int) -> tuple[list[LogSegment], int]:
        """Inactive segments wholly below the first uncleanable offset, and that offset."""
        segments = plog.segments
        config = plog.config
        upper = min(segments[-1].base_offset, plog.last_stable_offset)  # open transactions stay dirty
        picked: list[LogSegment] = []
        for seg, nxt in zip(segments, segments[1:], strict=False):
            if nxt.base_offset > upper:
                break
            if config.min_compaction_lag_ms > 0 and seg.largest_timestamp > now - config.min_compaction_lag_ms:
                break
            picked.append(seg)
        end = segments[len(picked)].base_offset if picked else segments[0].base_offset
        return picked, end

    def clean_log(self, plog: Log, now_ms: int | None = None, force: bool = False) -> CleanerStats | None:
        """Clean one log if it is dirty enough; returns what was done, or None."""
        now = time_ms() if now_ms is None else now_ms
        started = time.monotonic()
        state = self._state_of(plog)
        config = plog.config
        segments, end_offset = self._cleanable_segments(plog, now)
        if not segments:
            return None
        first_dirty = max(state.first_dirty_offset, plog.log_start_offset)
        if first_dirty > end_offset:
            first_dirty = plog.log_start_offset  # the log was truncated or recreated
        clean_bytes = sum(s.size for s, nxt in zip(segments, [*segments[1:], None], strict=True)
                          if (nxt.base_offset if nxt else end_offset) <= first_dirty)
        total = sum(s.size for s in segments)
        dirty_bytes = total - clean_bytes
        ratio = dirty_bytes / total if total else 0.0
        horizon = now - config.delete_retention_ms
        tombstones_due = 0 <= state.oldest_kept_tombstone_ts <= horizon
        lag_due = any(s.base_offset >= first_dirty and 0 <= s.largest_timestamp <= now - config.max_compaction_lag_ms
                      for s in segments) if config.max_compaction_lag_ms < 2**62 else False
        if not force and not tombstones_due and not lag_due and (dirty_bytes == 0
                                                                 or ratio < config.min_cleanable_dirty_ratio):
            return None
        stats = CleanerStats(plog.topic, plog.partition, first_dirty_offset=first_dirty, end_offset=end_offset)

        # 1. offset map of the dirty range: key -> offset of its latest record (aborted ones never count)
        aborted = _AbortedRanges(plog.collect_aborted_transactions(plog.log_start_offset, end_offset))
        offset_map: dict[bytes, int] = {}
        for seg in segments:
            for header, data in iter_segment_batches(seg):
                if header.next_offset <= first_dirty or header.is_control or aborted.holds(header):
                    continue
                with RecordReader(data) as reader:
                    for head in reader.heads():
                        if head.key is not None:
                            offset_map[head.key] = head.offset

        # 2. rewrite every cleanable segment that loses something
        oldest_tombstone = -1

        def keep(head: RecordHead, batch: RecordBatchHeader) -> bool:
            if head.key is not None and offset_map.get(head.key, -1) > head.offset:
                return False  # superseded by a later record with the same key
            return not (head.key is not None and head.value_size < 0 and batch.max_timestamp <= horizon)

        for seg in segments:
            plans: list[_BatchPlan] = []
            changed = False
            for header, data in iter_segment_batches(seg):
                stats.bytes_read += len(data)
                if header.is_control:
                    # markers stay: consumers and producer state rely on them
                    plans.append(_BatchPlan(header.position, header.records_count, header.max_timestamp, True))
                    continue
                if aborted.holds(header):
                    stats.records_read += header.records_count
                    changed = True  # an aborted transaction's records are never read by anyone again
                    continue
                kept = read = 0
                max_ts = -1
                with RecordReader(data) as reader:
                    for head in reader.heads():
                        read += 1
                        if not keep(head, header):
                            if head.key is not None and head.value_size < 0 and \
                                    offset_map.get(head.key, -1) <= head.offset:
                                stats.tombstones_removed += 1
                            continue
                        if head.key is not None and head.value_size < 0 and (
                                oldest_tombstone < 0 or header.max_timestamp < oldest_tombstone):
                            oldest_tombstone = header.max_timestamp
                        kept += 1
                        max_ts = max(max_ts, head.timestamp)
                stats.records_read += read
                stats.records_retained += kept
                if kept == read:
                    plans.append(_BatchPlan(header.position, kept, header.max_timestamp, True))
                    continue
                changed = True
                if kept:
                    if header.attributes & TIMESTAMP_TYPE_MASK:
                        max_ts = header.max_timestamp  # LogAppendTime: the batch's time stands for all
                    plans.append(_BatchPlan(header.position, kept, max_ts, False))
            if not changed:
                continue
            cleaned_path = seg.log_path + CLEANED_SUFFIX
            by_position = {p.position: p for p in plans}
            written = 0
            with open(cleaned_path, "wb") as f:
                for header, data in iter_segment_batches(seg):
                    plan = by_position.get(header.position)
                    if plan is None:
                        continue
                    if plan.whole:
                        f.write(data)
                        written += len(data)
                    else:
                        written += _rebuild(f, header, data, plan, functools.partial(keep, batch=header))
                f.flush()
                os.fsync(f.fileno())
            if plog.replace_segment(seg, cleaned_path) is not None:
                stats.segments_rewritten += 1
                stats.bytes_written += written
        state.first_dirty_offset = end_offset
        state.oldest_kept_tombstone_ts = oldest_tombstone
        self._write_checkpoint(plog)
        stats.elapsed_s = time.monotonic() - started
        log.info("cleaned %s-%d up to offset %d: %d segments rewritten, %d of %d records kept, "
                 "%d tombstones removed, %d bytes read, %d written, %.3f s", plog.topic, plog.partition,
                 end_offset, stats.segments_rewritten, stats.records_retained, stats.records_read,
                 stats.tombstones_removed, stats.bytes_read, stats.bytes_written, stats.elapsed_s)
        return stats


def cleaner_backoff_ms(config: BrokerConfig) -> int:
    """Pause between cleaner passes: ``log.cleaner.backoff.ms`` (Kafka's default 15 s)."""
    return int(config.get("log.cleaner.backoff.ms"))
