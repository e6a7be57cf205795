"""LeaderEpochFileCache: which leader epoch wrote which offsets (KIP-101, KIP-279).

A follower that truncates to its high watermark after a leader change can lose records that
were acknowledged, or keep records the new leader never had. Instead it asks the leader
(OffsetForLeaderEpoch) where its own latest epoch ends in the leader's log and truncates to
that divergence point. This cache answers that question: one ``(epoch, start_offset)`` entry
per epoch, the start offset being the first offset written under that epoch.

It is kept in ``leader-epoch-checkpoint`` inside the partition directory, Kafka's format::

    0               version
    2               number of entries
    0 0             epoch start_offset
    3 1200

The file is rewritten whole (temp file, rename) only when an entry changes, which on the hot
path means once per leader change, never per append. A missing, torn or garbled file reads
as an empty cache (``loaded_from_file`` is False) and LogLoader rebuilds it from the batch
headers; the log is the authority, the file only spares a scan.

Assignments are written without fsync (ADR 0047): a process crash keeps the page cache, and
``flush`` makes the file durable before the log's recovery point passes the data it covers
(Log.flush). After an unclean shutdown the loader checks the entries against the batch headers
of the unflushed tail and repairs them (``reconcile``), so an entry a power loss took is
re-derived from the batches that needed it.

The caller (Log) serializes changes to the entries with its own lock. File writes are
serialized here (``_file_lock``), so Log can write an assignment's file on its dir's storage
thread without holding its own lock, which the event loop takes for every append
(see ``prepare_assign`` / ``write`` / ``adopt``).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections.abc import Iterable
from typing import NamedTuple

from strom.storage.checkpoints import fsync_dir, write_atomically

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
LEADER_EPOCH_CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
SECTOR_SIZE = 512  # files up to this size are rewritten in place when not fsynced (``_overwrite_small``)


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """Epoch entries of one partition, ascending in both epoch and start offset."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        self._entries: list[EpochEntry] = []
        self._file_lock = threading.Lock()
        self.version = 0  # bumped whenever the entries change: prepare_assign / adopt detect a race
        self.loaded_from_file = False  # False: file missing or unreadable, the log should rebuild it
        self._unsynced = False  # the file was rewritten without fsync since it was last made durable
        self._read()

    # -- reads --------------------------------------------------------------------------------------

    @property
    def epoch_entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` for OffsetForLeaderEpoch, as Kafka 3.x answers it.

        - requested epoch undefined (-1), or newer than every entry (an empty cache included):
          ``(-1, -1)``, nothing is known;
        - the latest epoch: ``(epoch, log_end_offset)``, it is still being written;
        - otherwise the largest epoch <= requested, ending where the next higher epoch starts;
        - older than the first entry (its records were deleted): ``(requested, first start
          offset)``, so a follower truncates to the leader's start rather than to its HW.
          (Kafka before 2.1 answered (-1, -1) here and the follower fell back to its HW.)
        """
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(entries, requested_epoch, key=lambda e: e.epoch)
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        end_offset = entries[higher].start_offset
        if higher == 0:
            return requested_epoch, end_offset
        return entries[higher - 1].epoch, end_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset`` (the last entry starting at or before it), if known."""
        i = bisect.bisect_right(self._entries, offset, key=lambda e: e.start_offset)
        return self._entries[i - 1].epoch if i else None

    # -- writes -------------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed.

        The same epoch again at a later offset is the common no-op. As in Kafka 3.x, an entry
        that contradicts the newest ones (an epoch not above them, or a start offset not after
        them) means the log was rewritten below them: those entries are dropped and this one
        appended, since the log, not the cache, is the authority.
        """
        merged = self._with(epoch, start_offset)
        if merged is None:
            return False
        self._replace(merged, fsync=False)
        return True

    def prepare_assign(self, epoch: int, start_offset: int) -> list[EpochEntry] | None:
        """The entries ``assign`` would write, or None if nothing changes; writes nothing."""
        return self._with(epoch, start_offset)

    def write(self, entries: list[EpochEntry], fsync: bool = False) -> None:
        """Write ``entries`` without adopting them (raises OSError); see ``adopt`` and ``flush``."""
        self._write_file(entries, fsync=fsync)

    def adopt(self, entries: list[EpochEntry]) -> None:
        """Take ``entries`` just written by ``write`` as the cache's entries."""
        self._entries = entries
        self.version += 1

    def assign_all(self, entries: Iterable[tuple[int, int]]) -> bool:
        """Assign many ``(epoch, start_offset)`` pairs in order with one file write (rebuilds, follower batches)."""
        current = self.prepare_assign_all(entries)
        if current is None:
            return False
        self._replace(current, fsync=False)
        return True

    def prepare_assign_all(self, entries: Iterable[tuple[int, int]]) -> list[EpochEntry] | None:
        """The entries ``assign_all`` would write, or None if nothing changes; writes nothing."""
        current: list[EpochEntry] | None = None
        for epoch, start_offset in entries:
            merged = self._with(epoch, start_offset, current)
            if merged is not None:
                current = merged
        return current

    def rebuild(self, entries: Iterable[tuple[int, int]]) -> None:
        """Replace every entry with ``(epoch, start_offset)`` pairs found by scanning the log.

        Written even when empty, so the next load need not scan again; a failed write is only
        logged (the log loads; the file stays missing or unreadable and the next load rescans).
        """
        current: list[EpochEntry] = []
        for epoch, start_offset in entries:
            merged = self._with(epoch, start_offset, current)
            if merged is not None:
                current = merged
        self._replace(current, fsync=True, strict=False)

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        entries = self._entries
        if end_offset < 0 or not entries or entries[-1].start_offset < end_offset:
            return False
        keep = bisect.bisect_left(entries, end_offset, key=lambda e: e.start_offset)
        self._replace(entries[:keep], fsync=False, strict=False)
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """Forget offsets below ``start_offset`` (the log start moved up).

        The epoch that was current at ``start_offset`` stays, its start moved up to it, so the
        answer for that epoch is still right; entries of older epochs go.
        """
        entries = self._entries
        n = bisect.bisect_right(entries, start_offset, key=lambda e: e.start_offset)
        if n == 0 or (n == 1 and entries[0].start_offset == start_offset):
            return False
        first = EpochEntry(entries[n - 1].epoch, start_offset)
        self._replace([first, *entries[n:]], fsync=False, strict=False)
        return True

    def reconcile(self, batch_epochs: Iterable[tuple[int, int]]) -> bool:
        """Check the entries against ``(epoch, base_offset)`` of consecutive batches read from the log
        (the tail an unclean shutdown may have left ahead of the file); returns whether they changed.

        From the first batch whose epoch the entries place wrongly (an assignment lost with an
        unsynced write, an entry the log no longer backs), the entries are rebuilt from the batches,
        as Kafka's ``assign`` would have made them; the repaired file is fsynced.
        """
        diverged_at: int | None = None
        found: list[tuple[int, int]] = []
        # Batches below the first entry lie below a log start the file already recorded (the log-start
        # checkpoint may lag behind a DeleteRecords): they are not brought back.
        floor = self._entries[0].start_offset if self._entries else 0
        for epoch, base_offset in batch_epochs:
            if epoch < 0 or base_offset < floor:
                continue
            if diverged_at is None:
                if self.epoch_for_offset(base_offset) == epoch:
                    continue
                diverged_at = base_offset
            if not found or found[-1][0] != epoch:
                found.append((epoch, base_offset))
        if diverged_at is None:
            return False
        keep = bisect.bisect_left(self._entries, diverged_at, key=lambda e: e.start_offset)
        current = self._entries[:keep]
        for epoch, start_offset in found:
            merged = self._with(epoch, start_offset, current)
            if merged is not None:
                current = merged
        log.warning("leader epoch entries in %s did not match the log from offset %d on: %s, now %s",
                    self.path, diverged_at, self._entries[keep:], current[keep:] if len(current) > keep else [])
        self._replace(current, fsync=True, strict=False)
        return True

    def flush(self) -> None:
        """Make the file durable if it was rewritten without fsync (raises OSError): called before the
        log's recovery point moves past data whose epochs it records, and at shutdown."""
        with self._file_lock:
            if not self._unsynced:
                return
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:  # gone with its directory (a deleted or moved log): nothing to sync
                self._unsynced = False
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(os.path.dirname(self.path) or ".")
            self._unsynced = False

    def clear(self) -> None:
        """Drop every entry (the log was emptied: truncate_fully_and_start_at)."""
        self._replace([], fsync=True)

    # -- internals ----------------------------------------------------------------------------------

    def _with(self, epoch: int, start_offset: int, base: list[EpochEntry] | None = None) -> list[EpochEntry] | None:
        """The entries after assigning, or None when nothing changes."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        entries = self._entries if base is None else base
        if entries and entries[-1].epoch == epoch and entries[-1].start_offset <= start_offset:
            return None
        keep = len(entries)
        while keep and (entries[keep - 1].epoch >= epoch or entries[keep - 1].start_offset >= start_offset):
            keep -= 1
        removed = entries[keep:]
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning("leader epoch entry (%d, %d) in %s replaces conflicting entries %s",
                        epoch, start_offset, self.path, removed)
        return [*entries[:keep], EpochEntry(epoch, start_offset)]

    def _replace(self, entries: list[EpochEntry], fsync: bool, strict: bool = True) -> None:
        """Write the file, then adopt the entries.

        ``strict`` (assignments, clear): a failed write raises and leaves memory as the file
        was, because a lost assignment could not be recovered from the file. Truncations are
        not strict and skip the fsync, as Kafka flushes them lazily: the entries they drop are
        past the LEO or below the log start, and the load-time truncation against the recovered
        log drops them again if the write was lost (a full disk, a crash).
        """
        try:
            self._write_file(entries, fsync)
        except OSError as exc:
            if strict:
                raise
            log.warning("could not write %s (%s); the next load truncates it again", self.path, exc)
        self.adopt(entries)

    def _write_file(self, entries: list[EpochEntry], fsync: bool) -> None:
        """Rewrite the file; unless fsynced, ``flush`` syncs it later. The partition's first file needs
        no sync: a crash can only lose or tear it (no older version exists to fall back to), and the
        load then rebuilds it from the batches, so a partition created and written in its first epoch
        costs no checkpoint fsync, at its flushes or at shutdown (as in ADR 0040)."""
        lines = [str(LEADER_EPOCH_CHECKPOINT_VERSION), str(len(entries))]
        lines += [f"{e.epoch} {e.start_offset}" for e in entries]
        data = ("\n".join(lines) + "\n").encode()
        with self._file_lock:  # one writer at a time: they share the temp file
            older_version = self._unsynced or os.path.exists(self.path)
            if fsync or not older_version or len(data) > SECTOR_SIZE or not _overwrite_small(self.path, data):
                write_atomically(self.path, data, fsync=fsync)
            self._unsynced = not fsync and older_version

    def _read(self) -> None:
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("cannot read %s (%s); rebuilding it from the log", self.path, exc)
            return
        try:
            entries = _parse(raw)
        except ValueError as exc:
            log.warning("ignoring malformed %s (%s); rebuilding it from the log", self.path, exc)
            return
        self._entries = entries
        self.loaded_from_file = True


def _overwrite_small(path: str, data: bytes) -> bool:
    """Rewrite a file of at most one sector in place; False (nothing written) if it is missing or bigger.

    Creating a temp file and renaming it over the old one costs about as much as an fsync on ext4
    (a new inode, and the rename starts the old file's write-back), so 1,500 new leader epochs paid
    most of their time there even without fsyncs. A rewrite of one sector cannot be torn (sector
    writes are atomic, the assumption PostgreSQL's control file relies on), but the file's size is
    metadata the disk may keep apart from it: a power loss leaves the old content or the new, or the
    new cut to the old size (no final newline), or either padded by zeros or old bytes (surplus lines).
    The cut and padded ones read as malformed (``_parse``) and the load rebuilds the entries from the
    batches; the old content is what ADR 0047's repair handles. A kill -9 loses nothing but, between
    the write and a shortening truncate, may likewise leave surplus lines.
    """
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        if size > SECTOR_SIZE:
            return False
        os.pwrite(fd, data, 0)
        if size > len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    return True


def _parse(raw: bytes) -> list[EpochEntry]:
    """Entries of a checkpoint file; ValueError unless it is well formed and monotonic.

    Every writer ends the file with a newline. A file without one was cut short: an in-place rewrite
    (``_overwrite_small``) to longer content whose new data reached the disk but not its new size. Its
    last line may still parse, as a smaller offset ("2 12" of "2 1234"), so it is refused as a whole.
    """
    if raw and not raw.endswith(b"\n"):
        raise ValueError("no newline at the end: cut short")
    lines = raw.decode("ascii").splitlines()  # UnicodeDecodeError is a ValueError
    if len(lines) < 2:
        raise ValueError("truncated header")
    if int(lines[0]) != LEADER_EPOCH_CHECKPOINT_VERSION:
        raise ValueError(f"unrecognized version {lines[0]!r}")
    count = int(lines[1])
    body = lines[2:]
    if count < 0 or len(body) < count or any(line.strip() for line in body[count:]):
        raise ValueError(f"expected {count} entries, found {len(body)} lines")
    entries: list[EpochEntry] = []
    for line in body[:count]:
        epoch_text, offset_text = line.split(" ")
        entry = EpochEntry(int(epoch_text), int(offset_text))
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"negative entry {line!r}")
        if entries and (entry.epoch <= entries[-1].epoch or entry.start_offset < entries[-1].start_offset):
            raise ValueError(f"entries out of order at {line!r}")
        entries.append(entry)
    return entries


__all__ = [
    "LEADER_EPOCH_CHECKPOINT",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "LeaderEpochFileCache",
]
