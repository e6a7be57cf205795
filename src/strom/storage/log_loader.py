"""LogLoader: bring a partition directory back to a consistent state when it is opened.

Steps (following Kafka's LogLoader):
1. delete leftovers of interrupted operations (``.deleted``, ``.cleaned``, ``.swap``, ``.tmp``)
   and index files whose ``.log`` is gone;
2. open every segment without reading its indexes (they load lazily on first use);
3. after an unclean shutdown, recover every segment from the one holding the
   recovery point on (length + CRC validation, index rebuild), except that one if all its
   batches lie below the recovery point (fsynced with their indexes): expected, so not warned
   about per segment (LogManager logs one summary per start); empty segments have
   nothing to recover, and their index files may be absent (an empty log's indexes are
   empty), as may a small active segment's (it keeps its indexes in memory; a load builds them
   from its batches, counted in LogManager's summary); any other segment whose index file is
   missing or torn was damaged (a clean shutdown, a roll and every flush write them), so it is
   recovered too, with a WARNING naming it;
4. compute the log end offset and rebuild producer state from the newest
   snapshot plus a replay of batch headers; recovered segments get their transaction
   index (aborted transactions) rebuilt by the same replay;
5. load the leader epoch cache, rebuild it from batch headers if its file is missing or
   unreadable (after an unclean shutdown, check it against the headers from the recovery point
   on), and cut it to the recovered [log start, LEO).

Recovery cuts a segment at its first torn or corrupt batch, and only that segment:
unlike Kafka, later segments are kept (their batches passed the same validation),
so a damaged byte costs the records behind it in its own segment, never the rest of
the log. A cut in the last segment is the expected torn tail of a crash (WARN); a
cut anywhere else loses records and is logged at ERROR with the offsets dropped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

from strom.protocol.record_batch import RecordBatchHeader, read_control_marker
from strom.storage.leader_epoch_cache import LeaderEpochFileCache
from strom.storage.log_config import LogConfig
from strom.storage.producer_state import SNAPSHOT_SUFFIX, Marker, ProducerStateManager
from strom.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment
from strom.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn

log = logging.getLogger(__name__)

_LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")


@dataclass
class LoadedLog:
    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    producer_state: ProducerStateManager
    leader_epoch_cache: LeaderEpochFileCache
    recovered_segments: int = 0  # segments validated and re-indexed by this load
    indexed_segments: int = 0  # small active segments indexed from their batches (no index files, as expected)


def marker_of(seg: LogSegment, header: RecordBatchHeader) -> Marker | None:
    """The COMMIT/ABORT marker a control batch in ``seg`` holds (one small read)."""
    return read_control_marker(os.pread(seg.file.fileno(), header.size, header.position))


def rebuild_producer_state(
    producer_state: ProducerStateManager, segments: Sequence[LogSegment], log_end_offset: int,
    reindex: Collection[int] = (),
) -> None:
    """Load the newest snapshot <= LEO, then replay batch headers from its offset to the LEO.

    ``reindex`` names segments (by base offset) whose transaction index was lost with a crash:
    the replay then starts at a snapshot no later than the first of them and re-adds the
    aborted transactions whose markers lie in them."""
    limit = min([log_end_offset, *reindex])
    loaded = producer_state.load_latest_snapshot(limit)
    start = loaded if loaded is not None else (segments[0].base_offset if segments else 0)
    if loaded is None:
        producer_state.reset(start)
    for i, seg in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else log_end_offset
        if upper <= start:
            continue
        rebuild_index = seg.base_offset in reindex
        for header in seg.batches_from(start):
            if header.base_offset < start:
                continue
            if not header.is_control or header.producer_id < 0:
                producer_state.update(header)
                continue
            done = producer_state.update(header, marker_of(seg, header))
            if done is not None and done.aborted and rebuild_index:
                seg.txn_index.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                                producer_state.last_stable_offset_after(done)))
    producer_state.map_end_offset = log_end_offset


def load_leader_epoch_cache(
    directory: str, segments: Sequence[LogSegment], log_start_offset: int, log_end_offset: int,
    unflushed_from: int | None = None,
) -> LeaderEpochFileCache:
    """The partition's epoch cache, consistent with the recovered log.

    A missing or unreadable ``leader-epoch-checkpoint`` on a log holding data (a log written
    before epochs were tracked, a garbled file) is rebuilt from the batch headers: one pass over
    headers only, and only in that case. After an unclean shutdown (``unflushed_from``: the
    recovery point) the entries are checked against the headers of the segments holding offsets
    from there on, since assignments are not fsynced when made (ADR 0047): a power loss may have
    kept an older file that misses an epoch those batches were written in. Entries at or past the
    LEO (a torn tail cut by recovery, a truncation whose lazy write was lost) and below the log
    start are then dropped.
    """
    cache = LeaderEpochFileCache(directory)
    if not cache.loaded_from_file and any(seg.size for seg in segments):
        found: list[tuple[int, int]] = []
        latest = -1
        for epoch, base_offset in _batch_epochs(segments, log_start_offset, log_end_offset):
            if epoch >= 0 and epoch != latest:
                found.append((epoch, base_offset))
                latest = epoch
        cache.rebuild(found)
        log.info("rebuilt %s from the batch headers: %d entries", cache.path, len(found))
    elif unflushed_from is not None and any(seg.size for seg in segments):
        cache.reconcile(_batch_epochs(segments, log_start_offset, log_end_offset, unflushed_from))
    cache.truncate_from_end(log_end_offset)
    cache.truncate_from_start(log_start_offset)
    return cache


def _batch_epochs(segments: Sequence[LogSegment], log_start_offset: int, log_end_offset: int,
                  from_offset: int = 0) -> Iterator[tuple[int, int]]:
    """``(partition leader epoch, base offset)`` of every batch in [log start, LEO), from the segment
    holding ``from_offset`` on (headers only). A batch the log start cuts counts from the log start,
    where the cache's entry for it starts."""
    for i, seg in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else log_end_offset
        if upper <= max(from_offset, log_start_offset) and i + 1 < len(segments):
            continue
        for header in seg.batches_from(seg.base_offset):
            if header.base_offset >= upper:
                break
            if header.last_offset >= log_start_offset:
                yield header.partition_leader_epoch, max(header.base_offset, log_start_offset)


class LogLoader:
    def __init__(
        self,
        directory: str,
        config: LogConfig,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        now_ms: int | None = None,
    ) -> None:
        self.directory = directory
        self.config = config
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.clean_shutdown = clean_shutdown
        self.now_ms = now_ms

    def load(self) -> LoadedLog:
        os.makedirs(self.directory, exist_ok=True)
        bases, names = self._clean_directory()
        segments = [LogSegment(self.directory, base, self.config, self.now_ms, active=False) for base in bases]
        listed = set(names)
        for seg in segments:  # absent index files are known from the listing, not a stat each
            seg.offset_index.note_listed(listed)
            seg.time_index.note_listed(listed)
        recovered: set[int] = set()
        indexed: set[int] = set()  # small active segments indexed from their batches, as expected
        if not self.clean_shutdown:
            # Expected after a crash: segments past the recovery point were never flushed, so their
            # indexes may be missing or stale. The count is reported once per start (LogManager).
            start = 0
            for i, seg in enumerate(segments):
                if seg.base_offset <= self.recovery_point:
                    start = i
            # An empty segment has nothing to validate or index; nor has the one holding the recovery
            # point if all its batches lie below it (a crash after a clean start that wrote nothing).
            unflushed = [seg for seg in segments[start:] if seg.size]
            if unflushed and unflushed[0].base_offset <= self.recovery_point:
                first = unflushed[0]
                if first is segments[-1] and first.index_files_absent():  # kept its indexes in memory
                    if first.index_from_batches(below=self.recovery_point):
                        indexed.add(unflushed.pop(0).base_offset)
                elif first.holds_only_below(self.recovery_point):
                    unflushed.pop(0)
            recovered.update(seg.base_offset for seg in unflushed)
        for seg in segments:
            if seg.base_offset in recovered or seg.base_offset in indexed or seg.index_files_usable():
                continue
            # A small active segment keeps its indexes in memory (flush and close leave its files
            # unwritten): absent files are expected there, and its batches, fsynced by the clean shutdown,
            # rebuild them. Anywhere else a clean shutdown, a roll and a flush wrote the files (if the
            # segment holds data): missing or torn is damage.
            if self.clean_shutdown and seg is segments[-1] and seg.index_files_absent() \
                    and seg.index_from_batches():
                indexed.add(seg.base_offset)
                if not seg.keeps_indexes_in_memory():
                    log.warning("index files of %s were missing after a clean shutdown; rebuilt them from "
                                "its batches", seg.log_path)
                continue
            log.warning("index files of %s are missing or torn; recovering the segment", seg.log_path)
            recovered.add(seg.base_offset)
        for i, seg in enumerate(segments):
            if seg.base_offset in recovered:
                self._recover_segment(seg, segments[i + 1] if i + 1 < len(segments) else None)
                seg.txn_index.reset()  # rebuilt by the producer-state replay below
        if not segments:
            base = max(0, self.log_start_offset)
            segments.append(LogSegment(self.directory, base, self.config, self.now_ms, active=True))
        for seg in segments[:-1]:
            if seg.base_offset in recovered:
                seg.on_become_inactive()
        if segments[-1].base_offset in recovered and not segments[-1].keeps_indexes_in_memory():
            segments[-1].offset_index.persist()
            segments[-1].time_index.persist()
        log_end_offset = segments[-1].next_offset()
        log_start_offset = min(max(self.log_start_offset, segments[0].base_offset), log_end_offset)
        recovery_point = log_end_offset if self.clean_shutdown else min(self.recovery_point, log_end_offset)
        producer_state = ProducerStateManager(self.directory)
        producer_state.snapshot_offsets(names)  # from the listing above, not another listdir
        rebuild_producer_state(producer_state, segments, log_end_offset, reindex=recovered)
        producer_state.delete_snapshots_before(segments[0].base_offset)
        epochs = load_leader_epoch_cache(self.directory, segments, log_start_offset, log_end_offset,
                                         None if self.clean_shutdown else recovery_point)
        return LoadedLog(segments, log_start_offset, log_end_offset, recovery_point, producer_state, epochs,
                         recovered_segments=len(recovered), indexed_segments=len(indexed))

    def _clean_directory(self) -> tuple[list[int], list[str]]:
        """Delete leftovers and orphaned indexes; returns the segments' base offsets and the names left
        (one listdir per partition: start-up with thousands of partitions pays per syscall)."""
        names: list[str] = []
        bases: list[int] = []
        for name in os.listdir(self.directory):
            if name.endswith(_LEFTOVER_SUFFIXES):
                path = os.path.join(self.directory, name)
                log.info("deleting leftover file %s", path)
                _unlink(path)
                continue
            names.append(name)
            if name.endswith(LOG_SUFFIX):
                stem = name[: -len(LOG_SUFFIX)]
                if stem.isdigit():
                    bases.append(int(stem))
        present = set(bases)
        kept: list[str] = []
        for name in names:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                if name.endswith(suffix):
                    stem = name[: -len(suffix)]
                    if stem.isdigit() and int(stem) not in present:
                        log.info("deleting orphaned index %s", name)
                        _unlink(os.path.join(self.directory, name))
                        break
            else:
                kept.append(name)
        return sorted(bases), kept

    def _recover_segment(self, seg: LogSegment, nxt: LogSegment | None) -> None:
        """Validate every batch of ``seg``, rebuild its indexes, cut it at the first bad batch."""
        size_before = seg.size
        truncated = seg.recover()
        if not truncated:
            return
        first_lost = seg.next_offset()
        if nxt is None:
            log.warning(
                "recovery truncated %d bytes at position %d of %s (torn or corrupt tail of the log); "
                "the log now ends at offset %d",
                truncated, size_before - truncated, seg.log_path, first_lost,
            )
            return
        last_lost = nxt.base_offset - 1
        log.error(
            "recovery found a corrupt batch at position %d of %s: dropped offsets %d to %d (%d offsets, "
            "%d bytes) of that segment; later segments are kept",
            size_before - truncated, seg.log_path, first_lost, last_lost,
            max(0, last_lost - first_lost + 1), truncated,
        )


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = ["LoadedLog", "LogLoader", "load_leader_epoch_cache", "rebuild_producer_state", "SNAPSHOT_SUFFIX"]
