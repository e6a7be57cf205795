"""LogLoader: bring a partition directory back to a consistent state when it is opened.

Steps (following Kafka's LogLoader):
1. delete leftovers of interrupted operations (``.deleted``, ``.cleaned``, ``.swap``, ``.tmp``)
   and index files whose ``.log`` is gone;
2. open every segment; rebuild a missing or insane index from its log;
3. after an unclean shutdown, recover every segment from the one holding the
   recovery point on (length + CRC validation, index rebuild); at the first torn
   or corrupt batch truncate there and drop all later segments;
4. compute the log end offset and rebuild producer state from the newest
   snapshot plus a replay of batch headers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from strom.storage.index import CorruptIndexError
from strom.storage.log_config import LogConfig
from strom.storage.producer_state import SNAPSHOT_SUFFIX, ProducerStateManager
from strom.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_path

log = logging.getLogger(__name__)

_LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")


@dataclass
class LoadedLog:
    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    producer_state: ProducerStateManager


def rebuild_producer_state(
    producer_state: ProducerStateManager, segments: Sequence[LogSegment], log_end_offset: int
) -> None:
    """Load the newest snapshot <= LEO, then replay batch headers from its offset to the LEO."""
    loaded = producer_state.load_latest_snapshot(log_end_offset)
    start = loaded if loaded is not None else (segments[0].base_offset if segments else 0)
    if loaded is None:
        producer_state.reset(start)
    for i, seg in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else log_end_offset
        if upper <= start:
            continue
        for header in seg.batches_from(start):
            if header.base_offset >= start:
                producer_state.update(header)
    producer_state.map_end_offset = log_end_offset


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
        bases = self._clean_directory()
        segments: list[LogSegment] = []
        self._recovered: set[int] = set()
        for i, base in enumerate(bases):
            seg = self._open_segment(base)
            segments.append(seg)
            if seg.base_offset in self._recovered and self._truncated_on_open:
                # A torn/corrupt batch ends the log: later segments cannot be trusted.
                for later in bases[i + 1 :]:
                    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                        _unlink(segment_path(self.directory, later, suffix))
                break
        if not self.clean_shutdown and segments:
            segments = self._recover_unflushed(segments)
        if not segments:
            base = max(0, self.log_start_offset)
            segments.append(LogSegment(self.directory, base, self.config, self.now_ms, active=True))
        for seg in segments[:-1]:
            seg.on_become_inactive()
        segments[-1].make_active()
        log_end_offset = segments[-1].next_offset()
        log_start_offset = min(max(self.log_start_offset, segments[0].base_offset), log_end_offset)
        recovery_point = log_end_offset if self.clean_shutdown else min(self.recovery_point, log_end_offset)
        producer_state = ProducerStateManager(self.directory)
        rebuild_producer_state(producer_state, segments, log_end_offset)
        producer_state.delete_snapshots_before(segments[0].base_offset)
        return LoadedLog(segments, log_start_offset, log_end_offset, recovery_point, producer_state)

    def _clean_directory(self) -> list[int]:
        names = os.listdir(self.directory)
        bases: list[int] = []
        for name in names:
            path = os.path.join(self.directory, name)
            if name.endswith(_LEFTOVER_SUFFIXES):
                log.info("deleting leftover file %s", path)
                _unlink(path)
                continue
            if name.endswith(LOG_SUFFIX):
                stem = name[: -len(LOG_SUFFIX)]
                if stem.isdigit():
                    bases.append(int(stem))
        present = set(bases)
        for name in os.listdir(self.directory):
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                if name.endswith(suffix):
                    stem = name[: -len(suffix)]
                    if stem.isdigit() and int(stem) not in present:
                        log.info("deleting orphaned index %s", name)
                        _unlink(os.path.join(self.directory, name))
        return sorted(bases)

    def _open_segment(self, base: int) -> LogSegment:
        missing_index = not (
            os.path.exists(segment_path(self.directory, base, INDEX_SUFFIX))
            and os.path.exists(segment_path(self.directory, base, TIME_INDEX_SUFFIX))
        )
        seg = LogSegment(self.directory, base, self.config, self.now_ms, active=False)
        self._truncated_on_open = 0
        rebuild = missing_index
        if not rebuild:
            try:
                seg.sanity_check()
            except CorruptIndexError as exc:
                log.warning("rebuilding index of %s: %s", seg.log_path, exc)
                rebuild = True
        if rebuild:
            truncated = seg.recover()
            self._recovered.add(base)
            self._truncated_on_open = truncated
            if truncated:
                log.warning(
                    "truncated %d invalid bytes from %s while rebuilding its index", truncated, seg.log_path
                )
        return seg

    def _recover_unflushed(self, segments: list[LogSegment]) -> list[LogSegment]:
        start = 0
        for i, seg in enumerate(segments):
            if seg.base_offset <= self.recovery_point:
                start = i
        for i in range(start, len(segments)):
            seg = segments[i]
            if seg.base_offset in self._recovered:
                continue
            truncated = seg.recover()
            if truncated:
                log.warning(
                    "recovery truncated %d bytes of %s (torn or corrupt tail); dropping %d later segments",
                    truncated,
                    seg.log_path,
                    len(segments) - i - 1,
                )
                for later in segments[i + 1 :]:
                    later.delete_files()
                return segments[: i + 1]
        return segments


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = ["LoadedLog", "LogLoader", "rebuild_producer_state", "SNAPSHOT_SUFFIX"]
