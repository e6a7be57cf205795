"""Sparse segment indexes: OffsetIndex (.index) and TimeIndex (.timeindex).

Entries hold offsets relative to the segment's base offset in 4 bytes, which is
why a segment may not span more than 2^31-1 offsets.

- OffsetIndex entry (8 bytes):  relativeOffset int32, position int32
- TimeIndex entry (12 bytes):   timestamp int64, relativeOffset int32

Unlike Kafka, entries live in process memory, not in a memory-mapped file:

- no descriptor is held open per index (Python's mmap keeps a duplicate one, so an
  mmapped segment cost five descriptors), which lets a broker host thousands of
  partitions under an ordinary ``ulimit -n``;
- a full disk can never kill the broker with SIGBUS through a store into a sparse
  mapping: writing the file is a plain ``pwrite`` whose ENOSPC is an ordinary error;
- indexes of old segments are read only when first used (Kafka's LazyIndex), so a
  restart touches no index file it does not need.

The file is written when the segment is rolled, flushed or closed, except a small
active segment's, which a load rebuilds from its batches instead (see
LogSegment.keeps_indexes_in_memory). An index file that is stale after a crash is
harmless: segments past the recovery point are recovered (their indexes rebuilt from
the log) and older ones were written at flush.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable, Container
from typing import ClassVar

NO_TIMESTAMP = -1

log = logging.getLogger(__name__)


class CorruptIndexError(Exception):
    """An index failed its sanity check; it is rebuilt from the log."""


class AbstractIndex:
    """Array of fixed-size entries with binary search on a field, loaded lazily from its file."""

    ENTRY: ClassVar[struct.Struct]

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if the entries cannot be right (each index kind knows how)."""
        raise NotImplementedError

    def __init__(self, path: str, base_offset: int, max_index_size: int,
                 on_corrupt: Callable[[AbstractIndex, CorruptIndexError], None] | None = None) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entry_size = self.ENTRY.size
        self.max_index_size = max(self._entry_size * 2, max_index_size - max_index_size % self._entry_size)
        self.max_entries = self.max_index_size // self._entry_size  # asked on every append (is_full)
        self._buf: bytearray | None = None  # None until loaded
        self._entries = 0
        self._written = -1  # entries known to be in the file as a prefix; -1: the file needs a full rewrite
        self._partial_entry = False  # the file ended in a partial entry (torn or foreign)
        self._on_corrupt = on_corrupt
        self._file_lock = threading.RLock()
        # Whether the file exists, once a stat, load or write told us (None: not known yet). A small active
        # segment asks at every flush and close whether its files were ever written.
        self._exists: bool | None = None

    # -- loading -----------------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._buf is not None

    def _data(self) -> bytearray:
        buf = self._buf
        if buf is None:
            with self._file_lock:
                buf = self._buf if self._buf is not None else self._load()
        return buf

    def _load(self) -> bytearray:
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
            self._exists = True
        except FileNotFoundError:
            raw = b""
            self._exists = False
        whole = len(raw) - len(raw) % self._entry_size
        self._partial_entry = whole != len(raw)
        self._buf = bytearray(memoryview(raw)[:whole])
        self._entries = self._count_non_zero_entries(whole // self._entry_size)
        del self._buf[self._entries * self._entry_size :]
        self._written = self._entries if whole == len(raw) == self._entries * self._entry_size else -1
        if self._on_corrupt is not None:
            try:
                self.sanity_check()
            except CorruptIndexError as exc:
                self.reset()
                self._on_corrupt(self, exc)
        assert self._buf is not None
        return self._buf

    def _count_non_zero_entries(self, slots: int) -> int:
        """A file preallocated by older versions and left by a crash ends in all-zero slots; not data.

        Binary search for the start of that zero tail (a real entry is never all zero
        after slot 0).
        """
        if slots == 0 or not self._is_zero_entry(slots - 1):
            return slots
        lo, hi = 0, slots - 1  # answer in [lo, hi]: first zero slot of the tail
        while lo < hi:
            mid = (lo + hi) // 2
            if self._is_zero_entry(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _is_zero_entry(self, n: int) -> bool:
        assert self._buf is not None
        start = n * self._entry_size
        return not any(self._buf[start : start + self._entry_size])

    # -- entries -----------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        if self._buf is None:  # asked on every append (is_full): no call once loaded
            self._data()
        return self._entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self._entry_size

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _peek_last(self) -> tuple[int, int] | None:
        """The last entry, or None when empty, reading only the first and last entries if not loaded.

        Retention asks every segment for its largest timestamp; this keeps that from
        loading every old time index into memory. Entries that do not look sane fall
        back to a full load, which runs the sanity check (and a rebuild if it fails).
        """
        if self._buf is None:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                fd = -1
            if fd >= 0:
                try:
                    size = os.fstat(fd).st_size
                    if size and size % self._entry_size == 0:
                        first = os.pread(fd, self._entry_size, 0)
                        last = os.pread(fd, self._entry_size, size - self._entry_size)
                        if len(last) == self._entry_size and any(last):
                            peeked = self.ENTRY.unpack(last)
                            if self._plausible(self.ENTRY.unpack(first), peeked):
                                return peeked  # type: ignore[return-value]
                finally:
                    os.close(fd)
        if self.entries == 0:
            return None
        return self._raw(self._entries - 1)

    def _plausible(self, first: tuple[int, ...], last: tuple[int, ...]) -> bool:
        raise NotImplementedError

    def _raw(self, n: int) -> tuple[int, int]:
        return self.ENTRY.unpack_from(self._data(), n * self._entry_size)  # type: ignore[return-value]

    def _write(self, values: tuple[int, int]) -> None:
        buf = self._data()
        buf += self.ENTRY.pack(*values)
        self._entries += 1

    def _largest_lower_bound(self, target: int, key: int = 0) -> int:
        """Index of the greatest entry whose field ``key`` is <= target, or -1."""
        buf = self._data()
        lo, hi = 0, self._entries - 1
        if hi < 0:
            return -1
        unpack = self.ENTRY.unpack_from
        size = self._entry_size
        if unpack(buf, 0)[key] > target:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(buf, mid * size)[key] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _truncate_entries(self, n: int) -> None:
        buf = self._data()
        if n < self._entries:
            with self._file_lock:
                del buf[n * self._entry_size :]
                self._entries = n
                if self._written > n:
                    self._written = -1

    def reset(self) -> None:
        """Remove every entry without reading the file (used before rebuilding from the log)."""
        with self._file_lock:
            self._buf = bytearray()
            self._entries = 0
            self._written = -1
            self._partial_entry = False

    # -- file --------------------------------------------------------------------------------------

    def write_file(self, fsync: bool = False) -> None:
        """Write entries not yet in the file (a rewrite after truncation); optionally fsync.

        On failure (a full disk) the file is removed rather than left stale, so the next
        load rebuilds it from the log; the error propagates.
        """
        with self._file_lock:
            if self._buf is None or (self._written == self._entries and not fsync):
                return
            entries = self._entries
            start = 0 if self._written < 0 else self._written * self._entry_size
            data = bytes(self._buf[start : entries * self._entry_size])
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    view = memoryview(data)
                    at = start
                    while view:
                        n = os.pwrite(fd, view, at)
                        view, at = view[n:], at + n
                    os.ftruncate(fd, entries * self._entry_size)
                    if fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError:
                self._written = -1
                self._exists = None
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
                raise
            self._written = entries
            self._exists = True

    def flush(self) -> None:
        self.write_file(fsync=True)

    def ensure_file(self) -> None:
        """Create the file even with no entries: an inactive segment holding data keeps both index files
        on disk, so that a load can tell a missing file (damage) from an index with nothing in it."""
        if self.file_exists():
            return
        self._data()
        with self._file_lock:
            self._written = -1
        self.persist()

    def persist(self) -> None:
        """Write what is not in the file yet; a failure is logged (the next load rebuilds the index)."""
        try:
            self.write_file()
        except OSError as exc:
            log.warning("could not write index %s (it will be rebuilt from the log): %s", self.path, exc)

    def rename(self, new_path: str) -> None:
        try:
            os.replace(self.path, new_path)
        except FileNotFoundError:
            self._exists = False
        self.path = new_path

    def delete(self) -> None:
        with self._file_lock:
            self._buf = bytearray()
            self._entries = 0
            self._written = 0
            self._exists = False
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def file_exists(self) -> bool:
        """Whether the index file exists (a stat the first time, then known from this object's writes)."""
        if self._exists is None:
            self._exists = os.path.exists(self.path)
        return self._exists

    def note_listed(self, names: Container[str]) -> None:
        """The directory's listing (taken by the loader) does not name the file: it does not exist."""
        if os.path.basename(self.path) not in names:
            self._exists = False

    def file_size_ok(self, missing_ok: bool = False) -> bool:
        """Cheap check at load (one stat, no read): the file exists (unless ``missing_ok``) and holds
        whole entries."""
        if self._exists is False:
            return missing_ok
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            self._exists = False
            return missing_ok
        self._exists = True
        return size % self._entry_size == 0


class OffsetIndex(AbstractIndex):
    """Maps relative offset -> file position of the batch; one entry per ~index.interval.bytes.

    The offset stored is the *last* offset of the indexed batch (as in Kafka 3.x),
    so the greatest entry <= target always points at or before the target's batch.
    """

    ENTRY = struct.Struct(">ii")

    def __init__(self, path: str, base_offset: int, max_index_size: int,
                 on_corrupt: Callable[[AbstractIndex, CorruptIndexError], None] | None = None,
                 log_size: Callable[[], int] | None = None) -> None:
        super().__init__(path, base_offset, max_index_size, on_corrupt)
        self._log_size = log_size

    def _plausible(self, first: tuple[int, ...], last: tuple[int, ...]) -> bool:
        return 0 <= first[0] <= last[0] and 0 <= first[1] <= last[1]

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self.entries and rel <= self._raw(self._entries - 1)[0]:
            raise ValueError(f"offset {offset} is not larger than the last indexed offset in {self.path}")
        if not 0 <= rel <= 0x7FFFFFFF:
            raise ValueError(f"offset {offset} cannot be stored relative to base {self.base_offset}")
        self._write((rel, position))

    def entry(self, n: int) -> tuple[int, int]:
        rel, pos = self._raw(n)
        return self.base_offset + rel, pos

    @property
    def last_entry(self) -> tuple[int, int]:
        last = self._peek_last()
        if last is None:
            return self.base_offset, 0
        return self.base_offset + last[0], last[1]

    @property
    def last_offset(self) -> int:
        return self.last_entry[0]

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Greatest (offset, position) with offset <= target; (base_offset, 0) when none is."""
        n = self._largest_lower_bound(target_offset - self.base_offset, 0)
        if n < 0:
            return self.base_offset, 0
        return self.entry(n)

    def lookup_by_position(self, position: int) -> tuple[int, int]:
        """Greatest (offset, position) with position <= ``position``; lets reads skip ahead."""
        n = self._largest_lower_bound(position, 1)
        if n < 0:
            return self.base_offset, 0
        return self.entry(n)

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= ``offset``."""
        n = self._largest_lower_bound(offset - self.base_offset - 1, 0)
        self._truncate_entries(n + 1)

    def truncate_to_position(self, position: int) -> None:
        """Remove entries pointing at or past ``position`` (log truncated there)."""
        n = self._largest_lower_bound(position - 1, 1)
        self._truncate_entries(n + 1)

    def sanity_check(self, log_size: int | None = None) -> None:
        self._data()
        if self._partial_entry:
            raise CorruptIndexError(f"index file {self.path} size is not a multiple of {self._entry_size}")
        if log_size is None and self._log_size is not None:
            log_size = self._log_size()
        if self._entries:
            first_rel, _ = self._raw(0)
            last_rel, last_pos = self._raw(self._entries - 1)
            if first_rel < 0 or last_rel < first_rel:
                raise CorruptIndexError(
                    f"corrupt index {self.path}: last offset {self.base_offset + last_rel} "
                    f"is below base offset {self.base_offset} or first entry"
                )
            if log_size is not None and last_pos >= log_size:
                raise CorruptIndexError(
                    f"corrupt index {self.path}: position {last_pos} is beyond log size {log_size}"
                )


class TimeIndex(AbstractIndex):
    """Maps max-timestamp-so-far -> relative offset; timestamps strictly increase across entries."""

    ENTRY = struct.Struct(">qi")

    def _plausible(self, first: tuple[int, ...], last: tuple[int, ...]) -> bool:
        return first[0] <= last[0] and 0 <= first[1] <= last[1]

    def is_full(self) -> bool:
        # One slot stays free for the final entry written when the segment is rolled.
        return self.entries >= self.max_entries - 1

    def entry(self, n: int) -> tuple[int, int]:
        ts, rel = self._raw(n)
        return ts, self.base_offset + rel

    @property
    def last_entry(self) -> tuple[int, int]:
        last = self._peek_last()
        if last is None:
            return NO_TIMESTAMP, self.base_offset
        return last[0], self.base_offset + last[1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append if ``timestamp`` exceeds the last entry's; returns whether an entry was written."""
        if not skip_full_check and self.is_full():
            raise ValueError(f"time index {self.path} is full")
        if self.entries:
            last_ts, last_rel = self._raw(self._entries - 1)
            if timestamp <= last_ts:
                return False
            if offset - self.base_offset < last_rel:
                raise ValueError(f"offset {offset} is below the last time-index offset in {self.path}")
        self._write((timestamp, offset - self.base_offset))
        return True

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """Greatest (timestamp, offset) with timestamp <= target; (-1, base_offset) when none is."""
        n = self._largest_lower_bound(target_timestamp, 0)
        if n < 0:
            return NO_TIMESTAMP, self.base_offset
        return self.entry(n)

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= ``offset`` (offsets are monotonic, so a suffix)."""
        n = self._largest_lower_bound(offset - self.base_offset - 1, 1)
        self._truncate_entries(n + 1)

    def sanity_check(self) -> None:
        self._data()
        if self._partial_entry:
            raise CorruptIndexError(f"time index {self.path} size is not a multiple of {self._entry_size}")
        if self._entries:
            first_ts, first_rel = self._raw(0)
            last_ts, last_rel = self._raw(self._entries - 1)
            if last_ts < first_ts or first_rel < 0 or last_rel < first_rel:
                raise CorruptIndexError(f"corrupt time index {self.path}: entries are not monotonic")
