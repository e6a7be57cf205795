"""LocalLog: the segments of one partition on this broker's disk, in ``<log.dir>/<topic>-<partition>``.

The layer under Log, as Kafka's LocalLog sits under its UnifiedLog: the directory and the ordered
segment list, appends to the active segment, rolling, reads of file ranges (FileSlice) for sendfile,
fsync and the recovery point, truncation, and taking segments out (retention) or swapping one for
a compacted copy (the cleaner). It knows the log end offset (the next offset the active segment
takes) and nothing of the log start offset, the high watermark, producers or leader epochs:
which segments may go, where a reader may start and what a batch means are Log's decisions.

Tiered storage seam: today the base offset of the first local segment is where local data starts,
and Log's ``log_start_offset`` lies at or above it. A remote tier would keep the older segments
elsewhere: Log would then track a *local* log start offset (``first_base_offset`` here) beside its
log start offset, read below it from the remote tier, and let retention take local segments only
once they are copied. This class would stay as it is.

Locking: a LocalLog has no lock of its own. Its state is guarded by the lock of the Log that owns
it (passed in; the event loop takes it for every append), and callers hold that lock unless a
method says it takes it itself: ``flush``, ``replace_segment`` and ``delete_removed_segments`` do
their file work (fsyncs, index building, renames) outside it.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from strom.protocol.record_batch import Buffer
from strom.storage.checkpoints import fsync_dir
from strom.storage.log_config import LogConfig
from strom.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    FileSlice,
    LogSegment,
    segment_path,
)
from strom.storage.transaction_index import AbortedTxn

log = logging.getLogger(__name__)


def time_ms() -> int:
    return int(time.time() * 1000)


FUTURE_DIR_SUFFIX = "-future"


def parse_topic_partition(dirname: str) -> tuple[str, int]:
    """``my-topic-3`` -> ("my-topic", 3); topic names may contain dashes, so split on the last one.

    A future log's ``<topic>-<partition>.<unique id>-future`` (a move between log dirs) names its partition too."""
    if dirname.endswith(FUTURE_DIR_SUFFIX):
        dirname = dirname[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")[0]
    topic, sep, partition = dirname.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{dirname!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


@dataclass(slots=True)
class FetchDataInfo:
    """Result of a log read: file ranges of whole batches, in offset order."""

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


class LocalLog:
    """The segment files of one partition; see the module docstring for what it owns and its locking."""

    def __init__(
        self,
        directory: str,
        config: LogConfig,
        segments: list[LogSegment],
        end_offset: int,
        recovery_point: int,
        lock: threading.RLock,
        now_ms: int | None = None,
    ) -> None:
        if not segments:
            raise ValueError("a local log needs at least its active segment")
        self.directory = os.path.abspath(directory)
        self.topic, self.partition = parse_topic_partition(os.path.basename(self.directory))
        self.config = config
        self.lock = lock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        # The log end offset: the offset the next appended batch gets. A plain attribute like the
        # recovery point (read on every append and fetch); only this class changes it.
        self.end_offset = end_offset
        self.recovery_point = recovery_point  # every offset below it is fsynced
        self.closed = False
        self._last_flush_ms = now_ms if now_ms is not None else time_ms()
        self._rolled_since_flush = False
        # Segments taken out of the list (retention), still to be renamed to .deleted: renamed outside the
        # lock (the event loop takes it for every append), or first thing by anything creating segments.
        self._removed: list[LogSegment] = []
        self._removed_lock = threading.Lock()

    # -- the segment list ----------------------------------------------------------------------------

    @property
    def first_base_offset(self) -> int:
        """Where local data starts: the base offset of the oldest segment on disk."""
        return self._bases[0]

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def segment_for(self, offset: int) -> LogSegment:
        """The segment whose base offset is the greatest <= ``offset`` (binary search on base offsets)."""
        return self._segments[self._segment_index_for(offset)]

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self.active_segment.index_interval_bytes = config.index_interval_bytes

    # -- append and roll -----------------------------------------------------------------------------

    def roll_reason(self, incoming: int, max_ts: int, max_offset: int, now: int) -> str | None:
        """Why the active segment cannot take ``incoming`` more bytes (segment.bytes, segment.ms, index
        full, offset overflow); None if it can."""
        return self._segments[-1].should_roll(self.config, incoming, max_ts, max_offset, now)

    def append(self, buffers: Sequence[Buffer], batches: Sequence[tuple[int, int, int]], next_offset: int) -> None:
        """Write whole batches at the end of the active segment; ``next_offset`` becomes the log end offset.

        ``batches`` holds (last offset, max timestamp, size) per batch for the indexes."""
        self._segments[-1].append(buffers, batches)
        self.end_offset = next_offset

    @property
    def active_is_empty_at_end(self) -> bool:
        """Whether rolling now would change nothing: the active segment is empty and starts at the end."""
        active = self._segments[-1]
        return active.base_offset == self.end_offset and active.size == 0

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty and already there)."""
        active = self._segments[-1]
        new_base = self.end_offset
        if active.base_offset == new_base and active.size == 0:
            return active
        self.delete_removed_segments()  # their names must be free before new files appear
        active.on_become_inactive()
        for suffix in (".log", ".index", ".timeindex"):
            path = os.path.join(self.directory, f"{new_base:020d}{suffix}")
            if os.path.exists(path):
                os.unlink(path)
        seg = LogSegment(self.directory, new_base, self.config, now_ms, active=True)
        self._segments.append(seg)
        self._bases.append(new_base)
        self._rolled_since_flush = True
        return seg

    # -- read ----------------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, limit_offset: int, min_one_message: bool) -> FetchDataInfo:
        """Whole batches from the one containing ``start_offset`` up to ``limit_offset`` (exclusive, <= end).

        May span segments. ``max_bytes`` bounds the total except that the first batch is always whole
        when ``min_one_message``. The caller checked ``start_offset`` against the offsets it serves.
        """
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

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound), from the segments' txn indexes.

        An aborted transaction is indexed in the segment of its marker, which lies at or after
        any of its records, so the search starts at the segment holding ``start_offset`` and stops at
        an entry whose LSO reaches the bound (no later abort can start below it). Takes the lock."""
        with self.lock:
            segments = self._segments[self._segment_index_for(start_offset):]
        found: list[AbortedTxn] = []
        for seg in segments:
            txns, complete = seg.txn_index.collect(start_offset, upper_bound)
            found.extend(txns)
            if complete:
                break
        return found

    # -- durability ----------------------------------------------------------------------------------

    def flush(self, offset: int | None = None, now_ms: int | None = None) -> None:
        """fsync segments holding offsets in [recovery_point, offset) and advance the recovery point.

        Takes the lock to pick the segments and to move the recovery point, not for the fsyncs."""
        with self.lock:
            if self.closed:
                return
            target = self.end_offset if offset is None else min(offset, self.end_offset)
            self._last_flush_ms = now_ms if now_ms is not None else time_ms()
            if target <= self.recovery_point and not self._rolled_since_flush:
                return
            to_flush = []
            for i, seg in enumerate(self._segments):
                upper = self._bases[i + 1] if i + 1 < len(self._segments) else self.end_offset + 1
                if seg.base_offset < target and upper > self.recovery_point:
                    to_flush.append(seg)
            rolled = self._rolled_since_flush
            self._rolled_since_flush = False
            # A small active segment's indexes stay in memory: a load rebuilds them from its batches.
            in_memory = self._segments[-1] if self._segments[-1].keeps_indexes_in_memory() else None
        for seg in to_flush:
            try:
                seg.flush(indexes=seg is not in_memory)
            except (OSError, ValueError):
                if not seg.deleted:
                    raise
        if in_memory is not None and in_memory in to_flush:
            with self.lock:
                rolled_meanwhile = in_memory is not self._segments[-1] and not in_memory.deleted
            if rolled_meanwhile:  # the roll wrote its index files: make them as durable as its batches
                in_memory.offset_index.flush()
                in_memory.time_index.flush()
        if rolled:
            fsync_dir(self.directory)
        with self.lock:
            self.recovery_point = max(self.recovery_point, target)

    def needs_flush(self, now_ms: int) -> bool:
        """flush.ms elapsed with unflushed data, or a segment was rolled (Kafka flushes those async)."""
        if self.closed:
            return False
        if self._rolled_since_flush:
            return True
        return self.end_offset > self.recovery_point and now_ms - self._last_flush_ms >= self.config.flush_ms

    # -- removing segments ---------------------------------------------------------------------------

    def remove_oldest_segments(self, count: int) -> None:
        """Take the ``count`` oldest segments out of the list; ``delete_removed_segments`` renames them.

        At least the active segment must stay (roll first to remove every segment with data)."""
        if not 0 < count < len(self._segments):
            raise ValueError(f"cannot remove {count} of {len(self._segments)} segments")
        removed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        with self._removed_lock:
            self._removed.extend(removed)

    def delete_removed_segments(self) -> None:
        """Rename the segments ``remove_oldest_segments`` took out to ``.deleted``; safe without the lock."""
        with self._removed_lock:
            removed, self._removed = self._removed, []
        for seg in removed:
            self.delete_segment_files(seg)

    def delete_segment_files(self, seg: LogSegment) -> None:
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

    # -- truncation ----------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything at/after ``offset``, which lies in [first_base_offset, end_offset)."""
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            seg = self._segments.pop()
            self._bases.pop()
            self.delete_segment_files(seg)
        active = self._segments[-1]
        active.truncate_to(offset)
        self.end_offset = active.next_offset()
        self.recovery_point = min(self.recovery_point, self.end_offset)

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment; the local log restarts with one empty segment at ``new_offset``."""
        for seg in self._segments:
            self.delete_segment_files(seg)
        seg = LogSegment(self.directory, new_offset, self.config, None, active=True)
        self._segments = [seg]
        self._bases = [new_offset]
        self.end_offset = new_offset
        self.recovery_point = min(self.recovery_point, new_offset)

    # -- the cleaner's swap --------------------------------------------------------------------------

    def replace_segment(self, old: LogSegment, cleaned_path: str) -> LogSegment | None:
        """Swap a compacted copy in for an inactive segment; None if the segment went away meanwhile.

        The slow part (scanning the cleaned file, building and fsyncing its indexes under
        ``<base>.index.cleaned`` and ``<base>.timeindex.cleaned``) runs before the lock is
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
        with self.lock:
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

    # -- lifecycle -----------------------------------------------------------------------------------

    def rename_dir(self, new_directory: str) -> None:
        """Rename the partition directory and repoint every file path (open files stay valid).

        The caller holds the log's lock, so no roll, flush or snapshot creates a file meanwhile."""
        new_directory = os.path.abspath(new_directory)
        os.replace(self.directory, new_directory)
        self.directory = new_directory
        with self._removed_lock:
            segments = [*self._segments, *self._removed]
        for seg in segments:
            seg.move_to_dir(new_directory)

    def close(self, for_deletion: bool = False) -> bool:
        """Close every segment (trimming indexes unless ``for_deletion``); False if some close failed.

        I/O errors (a full disk) are logged, not raised: the files are closed regardless."""
        ok = True
        active = self._segments[-1]
        for seg in self._segments:
            if for_deletion:
                seg.deleted = True  # nothing to trim
            try:
                seg.close(indexes=seg is not active or not seg.keeps_indexes_in_memory())
            except OSError as exc:
                ok = False
                log.warning("error closing segment %s: %s", seg.log_path, exc)
        self.closed = True
        return ok

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        if not self.closed:
            for seg in self._segments:
                seg.deleted = True
                seg.close()
            self.closed = True
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"LocalLog({self.topic}-{self.partition}, first={self._bases[0]}, end={self.end_offset}, "
                f"recovery_point={self.recovery_point}, segments={len(self._segments)})")
