"""TransactionIndex: the aborted transactions whose ABORT marker lies in one segment (``.txnindex``).

A read_committed fetch must tell the consumer which producers' records in the returned range
belong to aborted transactions, without decoding the log. Kafka keeps, per segment, one entry
per aborted transaction completed there: producer id, first offset, last offset (the marker)
and the last stable offset right after it completed. The LSO lets a search stop early: once an
entry's LSO is past the fetch's upper bound, no later aborted transaction can start inside it.

On disk: Kafka's layout, 34-byte big-endian entries (int16 version 0, int64 producer id,
int64 first offset, int64 last offset, int64 last stable offset). Entries are few (one per
aborted transaction), so the file is opened per operation rather than held open, and the
entries are cached in memory once read. Appends go to the page cache; ``flush`` fsyncs them with
the segment. A torn tail is cut at load; a segment recovered after a crash gets its index rebuilt
by the LogLoader's producer-state replay.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass

log = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: str) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None
        self._dirty = False

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._load()
        return self._entries

    def _load(self) -> list[AbortedTxn]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        whole = len(data) - len(data) % ENTRY_SIZE
        if whole != len(data):
            log.warning("cutting a torn entry of %d bytes off %s", len(data) - whole, self.path)
            os.truncate(self.path, whole)
        out: list[AbortedTxn] = []
        for pos in range(0, whole, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != _VERSION:
                log.error("unknown entry version %d at position %d of %s; ignoring the rest", version, pos, self.path)
                break
            out.append(AbortedTxn(pid, first, last, lso))
        return out

    def file_size_ok(self) -> bool:
        """Cheap load-time check: a missing file is an empty index; a partial entry means a torn write."""
        try:
            return os.stat(self.path).st_size % ENTRY_SIZE == 0
        except FileNotFoundError:
            return True

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            # Replays may meet a marker already indexed (recovery of a segment whose index survived).
            if txn in entries:
                return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, _ENTRY.pack(_VERSION, txn.producer_id, txn.first_offset, txn.last_offset,
                                     txn.last_stable_offset))
        finally:
            os.close(fd)
        entries.append(txn)
        self._dirty = True

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound); True once no later segment can add any."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or past ``offset`` (the segment was cut there)."""
        entries = self.entries
        keep = [t for t in entries if t.last_offset < offset]
        if len(keep) == len(entries):
            return
        self._entries = keep
        if os.path.exists(self.path):
            os.truncate(self.path, len(keep) * ENTRY_SIZE)
            self._dirty = True

    def reset(self) -> None:
        self._entries = []
        if os.path.exists(self.path):
            os.truncate(self.path, 0)
            self._dirty = True

    def flush(self) -> None:
        if not self._dirty:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._dirty = False
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def rename(self, new_path: str) -> None:
        if self._entries is None:
            self._entries = self._load()
        try:
            os.replace(self.path, new_path)
        except FileNotFoundError:
            pass
        self.path = new_path

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
