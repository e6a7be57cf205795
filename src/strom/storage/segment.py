"""LogSegment: one ``.log`` file plus its sparse ``.index`` and ``.timeindex``.

Files are named after the segment's base offset (the offset of its first batch),
zero-padded to 20 digits, e.g. ``00000000000000170410.log``.  Finding an offset
means: pick the segment by base offset (done by the Log), look up the greatest
index entry <= the offset, then scan batch headers forward from that position.
Batches are appended and served whole, never decoded.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kafka.errors import CorruptRecordError, KafkaStorageError

from strom.protocol.record_batch import (
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    Buffer,
    RecordBatchHeader,
    compute_crc,
)
from strom.protocol.record_stream import iter_record_heads
from strom.storage.index import NO_TIMESTAMP, AbstractIndex, CorruptIndexError, OffsetIndex, TimeIndex
from strom.storage.log_config import INT_MAX, LogConfig
from strom.storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"  # a compacted copy being prepared beside the segment it replaces

_SCAN_CHUNK = 16 * 1024
# An active segment at most this big keeps its indexes in memory only (flush and close do not create
# their files): a load rebuilds them from its few batches for less than creating two files costs, and
# a clean shutdown of thousands of partitions holding a little data each then creates no file.
SMALL_SEGMENT_BYTES = 64 * 1024
SMALL_SEGMENT_BATCHES = 64
_RECOVERY_WINDOW = 1024 * 1024
try:
    _IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))
except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
    _IOV_MAX = 1024


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


def segment_path(directory: str, base_offset: int, suffix: str) -> str:
    return os.path.join(directory, filename_prefix(base_offset) + suffix)


class SegmentFile(io.FileIO):
    """A segment's log file that readers on other threads can borrow without racing its close.

    The delete scheduler (after ``file.delete.delay.ms``), the cleaner and topic deletion close
    segment files from other threads while the event loop may still be sending a slice of one. A
    bare descriptor number is unsafe then: once closed, the number can be reused by another file
    and a send would carry that file's bytes. So a sender takes its own descriptor with ``dup``
    (the same open file, alive until the sender closes it) and small reads go through ``pread``;
    both hold a lock that ``close`` takes too, so they see the file either open or closed, never
    a reused number.
    """

    def __init__(self, fd: int) -> None:
        self._close_lock = threading.Lock()
        super().__init__(fd, "r+", closefd=True)

    def close(self) -> None:
        with self._close_lock:
            super().close()

    def dup(self) -> int:
        """A new descriptor of this file for the caller to close; ValueError if the file is closed."""
        with self._close_lock:
            return os.dup(self.fileno())

    def pread(self, size: int, position: int) -> bytes:
        """Read at an explicit position; ValueError if the file is closed."""
        with self._close_lock:
            return os.pread(self.fileno(), size, position)


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of an open segment file, ready for ``os.sendfile``/``loop.sendfile``.

    Holds the file object (not a bare fd) so a slice of a since-closed segment
    fails loudly instead of reading whatever file reused the descriptor.
    """

    file: SegmentFile
    position: int
    size: int

    def fileno(self) -> int:
        return self.file.fileno()

    def read(self) -> bytes:
        """pread the range (copying); for tests, tools and non-sendfile transports."""
        parts: list[bytes] = []
        done = 0
        while done < self.size:
            chunk = self.file.pread(self.size - done, self.position + done)
            if not chunk:
                raise KafkaStorageError(f"unexpected end of segment file at {self.position + done}")
            parts.append(chunk)
            done += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)


class LogSegment:
    """An append-only file of whole record batches with offset and time indexes."""

    def __init__(
        self,
        directory: str,
        base_offset: int,
        config: LogConfig,
        now_ms: int | None = None,
        active: bool = True,
        suffix: str = "",
    ) -> None:
        """``suffix`` opens the files under another name (``.cleaned``): a segment built beside
        the one it will replace, renamed into place later with ``change_suffix("")``."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = config.index_interval_bytes
        self.log_path = segment_path(directory, base_offset, LOG_SUFFIX + suffix)
        fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._file = SegmentFile(fd)
        self._fd = fd
        self._size = os.fstat(fd).st_size
        max_index = config.segment_index_bytes
        self.offset_index = OffsetIndex(
            segment_path(directory, base_offset, INDEX_SUFFIX + suffix), base_offset, max_index,
            on_corrupt=self._rebuild_index, log_size=lambda: self._size,
        )
        self.time_index = TimeIndex(
            segment_path(directory, base_offset, TIME_INDEX_SUFFIX + suffix), base_offset, max_index,
            on_corrupt=self._rebuild_index,
        )
        self.txn_index = TransactionIndex(segment_path(directory, base_offset, TXN_INDEX_SUFFIX + suffix))
        self.created_ms = int(time.time() * 1000) if now_ms is None else now_ms
        self._bytes_since_last_index_entry = 0
        # Largest timestamp and its offset: read lazily from the time index's last entry.
        self._max_timestamp_so_far: int | None = None if self._size else NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        self._rolling_based_timestamp: int | None = None
        self._next_offset: int | None = base_offset if self._size == 0 else None
        # Batches in the file, where known (created empty, or every batch seen by recovery or an index
        # rebuild); None otherwise. Decides whether the segment is small (keeps_indexes_in_memory).
        self._batch_count: int | None = 0 if self._size == 0 else None
        self.deleted = False

    # -- basic properties --------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self._size

    @property
    def file(self) -> SegmentFile:
        return self._file

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self._size})"

    def _max_timestamp(self) -> int:
        ts = self._max_timestamp_so_far
        if ts is None:
            ts, self._offset_of_max_timestamp = self.time_index.last_entry
            self._max_timestamp_so_far = ts
        return ts

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp()

    @property
    def offset_of_max_timestamp(self) -> int:
        self._max_timestamp()
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """Largest batch timestamp, falling back to file mtime (Kafka) when no batch has one."""
        ts = self._max_timestamp()
        if ts >= 0:
            return ts
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return int(os.fstat(self._fd).st_mtime * 1000)

    def next_offset(self) -> int:
        """Offset the next appended batch would get (= base offset when empty)."""
        if self._next_offset is None:
            last_offset, pos = self.offset_index.last_entry
            nxt = last_offset + 1 if self.offset_index.entries else self.base_offset
            for header in self._scan(pos):
                nxt = max(nxt, header.next_offset)
            self._next_offset = nxt
        return self._next_offset

    def can_convert_to_relative(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT_MAX

    # -- rolling -----------------------------------------------------------------------------------

    def _first_batch_timestamp(self) -> int | None:
        if self._rolling_based_timestamp is None and self._size >= HEADER_SIZE:
            header = RecordBatchHeader(0, HEADER.unpack_from(os.pread(self._fd, HEADER_SIZE, 0)))
            self._rolling_based_timestamp = header.max_timestamp
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's rule: age measured from the first batch's timestamp if it has one, else creation."""
        first = self._first_batch_timestamp()
        if first is not None and first >= 0 and message_timestamp >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def should_roll(
        self, config: LogConfig, incoming_bytes: int, max_timestamp: int, max_offset: int, now_ms: int
    ) -> str | None:
        """Return why the segment must roll before this append (for logging), or None."""
        if self._size > 0 and self._size > config.segment_bytes - incoming_bytes:
            return "segment.bytes"
        if self._size > 0 and self.time_waited_for_roll(now_ms, max_timestamp) > (
            config.segment_ms - config.segment_jitter_ms
        ):
            return "segment.ms"
        if self.offset_index.is_full():
            return "offset index full"
        if self.time_index.is_full():
            return "time index full"
        if not self.can_convert_to_relative(max_offset):
            return "relative offset overflow"
        return None

    # -- append ------------------------------------------------------------------------------------

    def append(self, buffers: Sequence[Buffer], batches: Sequence[tuple[int, int, int]]) -> None:
        """Write ``buffers`` (whole batches, possibly split header/body) at the end of the file.

        ``batches`` describes the written batches as (last_offset, max_timestamp, size)
        so index entries can be added without re-parsing.  Bytes are written once,
        straight from the caller's buffers (pwritev), never concatenated.
        """
        start = self._size
        pos = start
        try:
            for i in range(0, len(buffers), _IOV_MAX):
                group = list(buffers[i : i + _IOV_MAX])
                want = sum(map(len, group))
                written = os.pwritev(self._fd, group, pos)
                if written != want:  # rare: partial write, finish it piece by piece
                    self._finish_partial_write(group, written, pos)
                pos += want
        except OSError as exc:
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass
            raise KafkaStorageError(f"error appending to {self.log_path}: {exc}") from exc
        pos = start
        max_ts = self._max_timestamp()  # loaded from the time index once, lazily
        for last_offset, max_timestamp, size in batches:
            if max_timestamp > max_ts:
                max_ts = self._max_timestamp_so_far = max_timestamp
                self._offset_of_max_timestamp = last_offset
            if self._bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(last_offset, pos)
                self.time_index.maybe_append(max_ts, self._offset_of_max_timestamp)
                self._bytes_since_last_index_entry = 0
            pos += size
            self._bytes_since_last_index_entry += size
        if self._rolling_based_timestamp is None and start == 0 and batches:
            self._rolling_based_timestamp = batches[0][1]
        self._size = pos
        if batches:
            self._next_offset = batches[-1][0] + 1
            if self._batch_count is not None:
                self._batch_count += len(batches)

    def _finish_partial_write(self, group: list[Buffer], written: int, pos: int) -> None:
        skip = written
        for buf in group:
            view = memoryview(buf)
            if skip >= len(view):
                skip -= len(view)
                continue
            view = view[skip:]
            at = pos + written
            skip = 0
            while len(view):
                n = os.pwrite(self._fd, view, at)
                view = view[n:]
                at += n
                written += n

    def append_records(self, records: Buffer) -> None:
        """Append already-offset-assigned batches from one buffer (followers, tools, tests)."""
        from strom.protocol.record_batch import iter_batches

        view = memoryview(records)
        batches = [(h.last_offset, h.max_timestamp, h.size) for h in iter_batches(view)]
        self.append([view], batches)

    # -- scanning and lookup -----------------------------------------------------------------------

    def _scan(self, start: int, end: int | None = None) -> Iterator[RecordBatchHeader]:
        """Yield batch headers from file position ``start`` using chunked preads (no payload reads)."""
        limit = self._size if end is None else min(end, self._size)
        fd = self._fd
        buf = b""
        buf_start = start
        pos = start
        while pos + HEADER_SIZE <= limit:
            off = pos - buf_start
            if off < 0 or off + HEADER_SIZE > len(buf):
                buf = os.pread(fd, max(HEADER_SIZE, min(_SCAN_CHUNK, limit - pos)), pos)
                buf_start = pos
                off = 0
                if len(buf) < HEADER_SIZE:
                    return
            header = RecordBatchHeader(pos, HEADER.unpack_from(buf, off))
            if header.batch_length < MIN_BATCH_LENGTH or header.magic != MAGIC_V2:
                raise CorruptRecordError(f"corrupt batch header at position {pos} of {self.log_path}")
            yield header
            pos = header.end

    def batches_from(self, offset: int) -> Iterator[RecordBatchHeader]:
        """Headers of batches from (at most one index interval before) ``offset`` to the end."""
        _, pos = self.offset_index.lookup(offset)
        return self._scan(pos)

    def translate_offset(self, offset: int, starting_position: int = 0) -> RecordBatchHeader | None:
        """Header (with file position) of the first batch whose last offset is >= ``offset``."""
        _, pos = self.offset_index.lookup(offset)
        for header in self._scan(max(pos, starting_position)):
            if header.last_offset >= offset:
                return header
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = True,
    ) -> tuple[FileSlice, RecordBatchHeader] | None:
        """Whole batches from the one containing ``start_offset``, ending at or before ``max_position``.

        At most ``max_size`` bytes, except that with ``min_one_message`` the first batch
        is returned whole even if larger.  Returns the slice and the first batch header.
        """
        first = self.translate_offset(start_offset)
        if first is None:
            return None
        limit_pos = self._size if max_position is None else min(max_position, self._size)
        start = first.position
        if start >= limit_pos:
            return None
        limit = min(limit_pos, start + max(0, max_size))
        if first.end > limit:
            if min_one_message and first.end <= limit_pos:
                return FileSlice(self._file, start, first.size), first
            return None
        if limit == limit_pos:
            end = limit_pos
        else:
            _, index_pos = self.offset_index.lookup_by_position(limit)
            end = max(index_pos, first.end)
            for header in self._scan(end, limit_pos):
                if header.end > limit:
                    break
                end = header.end
        return FileSlice(self._file, start, end - start), first

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int = 0) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at/after ``start_offset`` with timestamp >= target."""
        max_ts = self._max_timestamp()
        if max_ts < timestamp and max_ts >= 0:
            return None
        # Strictly-lower entry: everything up to its offset is older than the target.
        _, index_offset = self.time_index.lookup(timestamp - 1)
        _, pos = self.offset_index.lookup(max(index_offset, start_offset))
        for header in self._scan(pos):
            if header.last_offset < start_offset or header.max_timestamp < timestamp:
                continue
            if header.timestamp_type == LOG_APPEND_TIME:
                return max(header.base_offset, start_offset), header.max_timestamp
            data = os.pread(self._fd, header.size, header.position)
            for record in iter_record_heads(data):
                if record.offset >= start_offset and record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        return None

    # -- recovery ----------------------------------------------------------------------------------

    def recover(self) -> int:
        """Validate every batch (length, magic, CRC, offsets), rebuild both indexes, cut a bad tail.

        Returns the number of bytes truncated.  Called for segments past the recovery
        point after an unclean shutdown and for segments with a missing/corrupt index.
        """
        file_size = os.fstat(self._fd).st_size
        pos, next_offset, batches = self._index_valid_batches(file_size)
        truncated = file_size - pos
        if truncated:
            os.ftruncate(self._fd, pos)
        self._size = pos
        self._next_offset = next_offset
        self._batch_count = batches
        return truncated

    def index_from_batches(self, below: int | None = None) -> bool:
        """Build both indexes in memory from the batches, validated as recovery does, without cutting
        anything; False (indexes left partial: recover next) if a batch is torn or corrupt, or ends at or
        past ``below``.

        For index files that are absent as expected: a small active segment keeps its indexes in memory
        only (``keeps_indexes_in_memory``). Its batches were fsynced by the flush or clean shutdown that
        skipped the files, so this finds them whole; the next offset, the largest timestamp and the
        batch count come with the pass.
        """
        file_size = os.fstat(self._fd).st_size
        pos, next_offset, batches = self._index_valid_batches(file_size)
        if pos != file_size or (below is not None and next_offset > below):
            return False
        self._size = pos
        self._next_offset = next_offset
        self._batch_count = batches
        return True

    def _index_valid_batches(self, file_size: int) -> tuple[int, int, int]:
        """Rebuild the indexes (in memory) from the valid batches at the start of the file; returns the
        position where they end, the next offset and how many there are."""
        self.offset_index.reset()
        self.time_index.reset()
        self._max_timestamp_so_far = NO_TIMESTAMP
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp = None
        fd = self._fd
        pos = 0
        batches = 0
        next_offset = self.base_offset
        window = b""
        window_start = 0
        while pos + LOG_OVERHEAD <= file_size:
            off = pos - window_start
            if off + HEADER_SIZE > len(window):
                window = os.pread(fd, min(_RECOVERY_WINDOW, file_size - pos), pos)
                window_start = pos
                off = 0
            if len(window) - off < HEADER_SIZE:
                break
            header = RecordBatchHeader(pos, HEADER.unpack_from(window, off))
            size = header.size
            if (
                header.magic != MAGIC_V2
                or header.batch_length < MIN_BATCH_LENGTH
                or pos + size > file_size
                or header.base_offset < next_offset
                or header.last_offset_delta < 0
                or not self.can_convert_to_relative(header.last_offset)
            ):
                break
            if off + size <= len(window):
                crc_ok = compute_crc(memoryview(window), off, size) == header.crc
            else:
                data = os.pread(fd, size, pos)
                crc_ok = len(data) == size and compute_crc(data, 0, size) == header.crc
            if not crc_ok:
                break
            if header.max_timestamp > self._max_timestamp_so_far:  # type: ignore[operator]
                self._max_timestamp_so_far = header.max_timestamp
                self._offset_of_max_timestamp = header.last_offset
            if self._bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(header.last_offset, pos)
                self.time_index.maybe_append(
                    self._max_timestamp_so_far, self._offset_of_max_timestamp, skip_full_check=True
                )
                self._bytes_since_last_index_entry = 0
            if self._rolling_based_timestamp is None:
                self._rolling_based_timestamp = header.max_timestamp
            self._bytes_since_last_index_entry += size
            next_offset = header.next_offset
            pos += size
            batches += 1
        return pos, next_offset, batches

    def sanity_check(self) -> None:
        """Index checks (done lazily when an index is first read); raises CorruptIndexError."""
        self.offset_index.sanity_check(self._size)
        self.time_index.sanity_check()

    def index_files_absent(self) -> bool:
        """Neither index file exists (known after the first check: see AbstractIndex.file_exists)."""
        return not self.offset_index.file_exists() and not self.time_index.file_exists()

    def keeps_indexes_in_memory(self) -> bool:
        """Whether this segment, if active, leaves its index files unwritten at flush and close: it has
        none yet and is small (SMALL_SEGMENT_BYTES, SMALL_SEGMENT_BATCHES), so a load rebuilds its indexes
        from its batches (``index_from_batches``) for less than creating the files costs a shutdown.
        A roll always writes them: inactive segments are indexed on disk."""
        count = self._batch_count
        return (count is not None and count <= SMALL_SEGMENT_BATCHES and self._size <= SMALL_SEGMENT_BYTES
                and self.index_files_absent())

    def index_files_usable(self) -> bool:
        """Cheap load-time check (stat only): both index files exist and hold whole entries.

        An empty log's indexes are empty, so their files may be absent: a segment that never
        held a batch (most partitions of ``__consumer_offsets``) is not written at shutdown,
        which keeps a clean shutdown of thousands of partitions from creating a file per index.
        """
        missing_ok = self._size == 0
        return (self.offset_index.file_size_ok(missing_ok) and self.time_index.file_size_ok(missing_ok)
                and self.txn_index.file_size_ok())

    def holds_only_below(self, offset: int) -> bool:
        """Whether every batch ends below ``offset`` (a recovery point: the batches below it and their
        index entries were fsynced before it moved), so a crash left nothing here to validate.

        Reads the index files' last entries and the batches after them (at most an index interval in
        the common case), checking their CRCs as recovery would: the recovery point is only as fresh as
        its last checkpoint, and a truncation since may have rewritten them. The scan must end exactly
        at the end of the file (a torn tail does not). Learns the next offset and the largest timestamp
        on the way: the batches after the last index entry are not in the time index yet.
        """
        if not self.index_files_usable():
            return False
        try:
            _, pos = self.offset_index.last_entry
            max_ts, offset_of_max_ts = self.time_index.last_entry
            nxt, end = None, pos
            for header in self._scan(pos):
                if header.next_offset > offset:
                    return False
                data = os.pread(self._fd, header.size, header.position)
                if len(data) != header.size or compute_crc(data, 0, header.size) != header.crc:
                    return False
                if header.max_timestamp > max_ts:
                    max_ts, offset_of_max_ts = header.max_timestamp, header.last_offset
                nxt, end = header.next_offset, header.end
        except (CorruptRecordError, OSError):
            return False
        if nxt is None or end != self._size:
            return False
        self._next_offset = nxt
        self._max_timestamp_so_far, self._offset_of_max_timestamp = max_ts, offset_of_max_ts
        return True

    def _rebuild_index(self, index: AbstractIndex, exc: CorruptIndexError) -> None:
        """A lazily loaded index failed its sanity check: rebuild it from batch headers.

        Only the index is rebuilt; the log is not touched (its batches were validated
        when they were appended or recovered), so nothing is ever truncated here.
        """
        log.warning("rebuilding index %s from its log: %s", index.path, exc)
        since_entry = 0
        max_ts, offset_of_max_ts = NO_TIMESTAMP, self.base_offset
        try:
            for header in self._scan(0):
                if header.max_timestamp > max_ts:
                    max_ts, offset_of_max_ts = header.max_timestamp, header.last_offset
                if since_entry > self.index_interval_bytes:
                    if isinstance(index, OffsetIndex):
                        index.append(header.last_offset, header.position)
                    elif isinstance(index, TimeIndex):
                        index.maybe_append(max_ts, offset_of_max_ts, skip_full_check=True)
                    since_entry = 0
                since_entry += header.size
        except CorruptRecordError as scan_error:
            log.error("index rebuild of %s stopped early: %s", index.path, scan_error)
        if isinstance(index, TimeIndex) and max_ts >= 0:
            index.maybe_append(max_ts, offset_of_max_ts, skip_full_check=True)

    # -- truncation, lifecycle ---------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove batches whose base offset is >= the batch containing ``offset``; return bytes removed."""
        header = self.translate_offset(offset)
        if header is None:
            return 0
        pos = header.position
        self.offset_index.truncate_to_position(pos)
        self.time_index.truncate_to(header.base_offset)
        removed = self._size - pos
        os.ftruncate(self._fd, pos)
        self._size = pos
        self._next_offset = header.base_offset
        self._batch_count = 0 if pos == 0 else None
        self.txn_index.truncate_to(header.base_offset)
        self._max_timestamp_so_far = None  # re-read from the truncated time index
        self._bytes_since_last_index_entry = 0
        self.offset_index.persist()
        self.time_index.persist()
        if pos == 0:
            self._rolling_based_timestamp = None
            self.created_ms = int(time.time() * 1000)
        return removed

    def on_become_inactive(self) -> None:
        """Called at roll/close: record the final max timestamp and write the indexes out."""
        if self._max_timestamp_so_far is not None and self._max_timestamp_so_far >= 0:
            self.time_index.maybe_append(
                self._max_timestamp_so_far, self._offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.persist()
        self.time_index.persist()
        if self._size:  # a single small batch adds no offset-index entry, but the file must exist
            self.offset_index.ensure_file()
            self.time_index.ensure_file()

    def flush(self, indexes: bool = True) -> None:
        """fsync the log file and the index files (written first); ``indexes`` False leaves the offset
        and time index files unwritten (an active segment that keeps_indexes_in_memory)."""
        os.fsync(self._fd)
        if indexes:
            self.offset_index.flush()
            self.time_index.flush()
        self.txn_index.flush()

    def close(self, indexes: bool = True) -> None:
        """Close the file, writing the indexes out first unless deleted or ``indexes`` is False."""
        if self._file.closed:
            return
        if not self.deleted and indexes:
            self.on_become_inactive()
        self._file.close()

    def change_suffix(self, new_suffix: str) -> None:
        """Rename all three files to carry ``new_suffix`` (``.deleted``; ``""`` for the plain names).

        Open handles stay valid. The log file goes first, so a crash in between leaves the
        log under its new name without an index, which a restart rebuilds.
        """
        new_log_path = segment_path(self.directory, self.base_offset, LOG_SUFFIX + new_suffix)
        os.replace(self.log_path, new_log_path)
        self.log_path = new_log_path
        self.offset_index.rename(segment_path(self.directory, self.base_offset, INDEX_SUFFIX + new_suffix))
        self.time_index.rename(segment_path(self.directory, self.base_offset, TIME_INDEX_SUFFIX + new_suffix))
        self.txn_index.rename(segment_path(self.directory, self.base_offset, TXN_INDEX_SUFFIX + new_suffix))

    def move_to_dir(self, directory: str) -> None:
        """Point the file paths into ``directory``, where the partition dir was just renamed to."""
        self.directory = directory
        self.log_path = os.path.join(directory, os.path.basename(self.log_path))
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.path = os.path.join(directory, os.path.basename(index.path))

    def delete_files(self) -> None:
        """Close and unlink. A fetch still sending from the file has its own descriptor (SegmentFile.dup) and
        finishes; one that had not started sending yet fails and closes its connection."""
        self.deleted = True
        if not self._file.closed:
            self._file.close()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        try:
            os.unlink(self.log_path)
        except FileNotFoundError:
            pass
