"""Sparse segment indexes: OffsetIndex (.index) and TimeIndex (.timeindex).

As in Kafka, an index file is preallocated to ``segment.index.bytes`` while its
segment is active and memory-mapped, so appending an entry is a store into the
page cache; on roll/close it is trimmed to its real size.  Entries hold offsets
relative to the segment's base offset in 4 bytes, which is why a segment may
not span more than 2^31-1 offsets.

- OffsetIndex entry (8 bytes):  relativeOffset int32, position int32
- TimeIndex entry (12 bytes):   timestamp int64, relativeOffset int32
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import ClassVar

NO_TIMESTAMP = -1


class CorruptIndexError(Exception):
    """An index failed its sanity check; the loader rebuilds it from the log."""


class AbstractIndex:
    """Memory-mapped array of fixed-size entries with binary search on the first key."""

    ENTRY: ClassVar[struct.Struct]

    def __init__(self, path: str, base_offset: int, max_index_size: int, writable: bool = True) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entry_size = self.ENTRY.size
        self.max_index_size = max(self._entry_size * 2, max_index_size - max_index_size % self._entry_size)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        length = os.fstat(self._fd).st_size
        self._mm: mmap.mmap | None = None
        self._length = 0
        self._entries = 0
        self._map(length)
        self._entries = self._count_non_zero_entries(length // self._entry_size)
        if writable:
            self.resize(self.max_index_size)

    # -- mapping -----------------------------------------------------------------------------------

    def _map(self, length: int) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._length = length
        if length > 0:
            self._mm = mmap.mmap(self._fd, length)

    def resize(self, new_size: int) -> None:
        """Grow (preallocate) or shrink the file to ``new_size`` rounded to whole entries."""
        new_size = max(new_size - new_size % self._entry_size, self._entries * self._entry_size)
        if new_size == self._length:
            return
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        os.ftruncate(self._fd, new_size)
        self._map(new_size)

    def trim_to_valid_size(self) -> None:
        """Drop the preallocated tail, done when the segment stops being active."""
        self.resize(self._entries * self._entry_size)

    # -- entries -----------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self.max_index_size // self._entry_size

    @property
    def size_in_bytes(self) -> int:
        return self._entries * self._entry_size

    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def _count_non_zero_entries(self, slots: int) -> int:
        """A preallocated file left by a crash ends in all-zero slots; they are not data.

        Binary search for the start of that zero tail (a real entry is never all zero
        after slot 0), so reopening a 10 MiB index costs ~20 probes, not a full scan.
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
        assert self._mm is not None
        start = n * self._entry_size
        return self._mm[start : start + self._entry_size] == bytes(self._entry_size)

    def _raw(self, n: int) -> tuple[int, int]:
        assert self._mm is not None
        return self.ENTRY.unpack_from(self._mm, n * self._entry_size)  # type: ignore[return-value]

    def _key(self, n: int) -> int:
        raise NotImplementedError

    def _ensure_room(self) -> None:
        if self._entries >= self._length // self._entry_size:
            # Not preallocated (e.g. reopened read-only segment being written again): grow.
            self.resize(max(self.max_index_size, (self._entries + 1) * self._entry_size))

    def _write(self, values: tuple[int, int]) -> None:
        self._ensure_room()
        assert self._mm is not None
        self.ENTRY.pack_into(self._mm, self._entries * self._entry_size, *values)
        self._entries += 1

    def _largest_lower_bound(self, target: int, key: int = 0) -> int:
        """Index of the greatest entry whose field ``key`` is <= target, or -1."""
        lo, hi = 0, self._entries - 1
        if hi < 0:
            return -1
        unpack = self.ENTRY.unpack_from
        mm = self._mm
        size = self._entry_size
        if unpack(mm, 0)[key] > target:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(mm, mid * size)[key] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _truncate_entries(self, n: int) -> None:
        if n < self._entries:
            assert self._mm is not None
            start = n * self._entry_size
            end = self._entries * self._entry_size
            self._mm[start:end] = bytes(end - start)
            self._entries = n

    def reset(self) -> None:
        """Remove every entry (used before rebuilding from the log)."""
        self._truncate_entries(0)

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()
        os.fsync(self._fd)

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename(self, new_path: str) -> None:
        os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(AbstractIndex):
    """Maps relative offset -> file position of the batch; one entry per ~index.interval.bytes.

    The offset stored is the *last* offset of the indexed batch (as in Kafka 3.x),
    so the greatest entry <= target always points at or before the target's batch.
    """

    ENTRY = struct.Struct(">ii")

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._entries and rel <= self._raw(self._entries - 1)[0]:
            raise ValueError(f"offset {offset} is not larger than the last indexed offset in {self.path}")
        if not 0 <= rel <= 0x7FFFFFFF:
            raise ValueError(f"offset {offset} cannot be stored relative to base {self.base_offset}")
        self._write((rel, position))

    def entry(self, n: int) -> tuple[int, int]:
        rel, pos = self._raw(n)
        return self.base_offset + rel, pos

    @property
    def last_entry(self) -> tuple[int, int]:
        if self._entries == 0:
            return self.base_offset, 0
        return self.entry(self._entries - 1)

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
        if os.fstat(self._fd).st_size % self._entry_size:
            raise CorruptIndexError(f"index file {self.path} size is not a multiple of {self._entry_size}")
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

    def is_full(self) -> bool:
        # One slot stays free for the final entry written when the segment is rolled.
        return self._entries >= self.max_entries - 1

    def entry(self, n: int) -> tuple[int, int]:
        ts, rel = self._raw(n)
        return ts, self.base_offset + rel

    @property
    def last_entry(self) -> tuple[int, int]:
        if self._entries == 0:
            return NO_TIMESTAMP, self.base_offset
        return self.entry(self._entries - 1)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append if ``timestamp`` exceeds the last entry's; returns whether an entry was written."""
        if not skip_full_check and self.is_full():
            raise ValueError(f"time index {self.path} is full")
        if self._entries:
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
        if os.fstat(self._fd).st_size % self._entry_size:
            raise CorruptIndexError(f"time index {self.path} size is not a multiple of {self._entry_size}")
        if self._entries:
            first_ts, first_rel = self._raw(0)
            last_ts, last_rel = self._raw(self._entries - 1)
            if last_ts < first_ts or first_rel < 0 or last_rel < first_rel:
                raise CorruptIndexError(f"corrupt time index {self.path}: entries are not monotonic")
