"""Incremental fetch sessions (KIP-227): the broker remembers what a fetcher asked for last time.

A full fetch (epoch 0) may open a session holding every partition it named; later fetches of
that session (epoch 1, 2, ...) carry only the partitions whose fetch state changed plus the
ones to forget, and the answer carries only partitions with something new: records, a moved
high watermark, last stable offset or log start offset, or an error. An idle consumer or
follower of thousands of partitions then exchanges a few dozen bytes per fetch instead of
every partition twice.

The cache has a fixed number of slots (``max.incremental.fetch.session.cache.slots``). When it
is full a new session may take the slot of one that is stale (unused past
``min.incremental.fetch.session.eviction.ms``), or of one that is smaller than itself and not
new; followers' sessions (privileged) are protected from consumers until they are no longer new.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import kafka.errors as Errors

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that asks for a new session
FINAL_EPOCH = -1  # a full fetch that closes its session (or never wants one)
_MAX_EPOCH = 0x7FFFFFFF
TOPIC_IDS_FROM = 13  # Fetch v13+ names topics (and forgotten topics) by id

FETCH_SESSION_ID_NOT_FOUND = Errors.FetchSessionIdNotFoundError.errno  # 70
INVALID_FETCH_SESSION_EPOCH = Errors.InvalidFetchSessionEpochError.errno  # 71
FETCH_SESSION_TOPIC_ID_ERROR = Errors.FetchSessionTopicIdError.errno  # 106

# How a session names its partitions: (topic name, partition) before v13, (topic id, partition) from v13.
PartitionKey = tuple[Any, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: 1 follows the largest int32; a closed session stays closed."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: what the fetcher last asked for, and what it was last told."""

    topic: str | None  # None while a topic id names no topic we know
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1  # the fetcher's own (a follower's log start offset)
    # Last answered; -1 forces the next answer to include the partition.
    high_watermark: int = -1
    last_stable_offset: int = -1
    leader_log_start_offset: int = -1

    def key(self, uses_topic_ids: bool) -> PartitionKey:
        return (self.topic_id if uses_topic_ids else self.topic, self.partition)

    def update_request(self, other: CachedPartition) -> None:
        """The fetcher sent this partition again: its fetch state changed."""
        self.fetch_offset = other.fetch_offset
        self.max_bytes = other.max_bytes
        self.current_leader_epoch = other.current_leader_epoch
        self.log_start_offset = other.log_start_offset

    def must_respond(self, result: Any) -> bool:
        """Whether an incremental answer includes this partition; remembers what it tells."""
        respond = bool(result.records is not None and result.size > 0)
        if result.high_watermark != self.high_watermark:
            self.high_watermark = result.high_watermark
            respond = True
        if result.last_stable_offset != self.last_stable_offset:
            self.last_stable_offset = result.last_stable_offset
            respond = True
        if result.log_start_offset != self.leader_log_start_offset:
            self.leader_log_start_offset = result.log_start_offset
            respond = True
        if result.error_code:
            self.high_watermark = -1  # so the partition is answered again once the error is gone
            respond = True
        if getattr(result, "preferred_read_replica", -1) >= 0:
            respond = True  # KIP-392: the consumer must learn where to read
        return respond

    def remember(self, result: Any) -> None:
        """A full answer told the fetcher all of this partition's offsets."""
        self.high_watermark = -1 if result.error_code else result.high_watermark
        self.last_stable_offset = result.last_stable_offset
        self.leader_log_start_offset = result.log_start_offset


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's: consumers cannot evict it while it is new
    uses_topic_ids: bool
    partitions: dict[PartitionKey, CachedPartition]
    creation_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch the next fetch of this session must carry

    @property
    def size(self) -> int:
        return len(self.partitions)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class FetchSessionCache:
    """At most ``max_entries`` sessions, shared by every fetcher of this broker."""

    def __init__(self, max_entries: int = 1000, eviction_ms: int = 120_000) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0  # IncrementalFetchSessionEvictionsPerSec, as a total

    @property
    def num_partitions(self) -> int:
        """NumIncrementalFetchPartitionsCached."""
        return sum(s.size for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms

    def maybe_create(self, now_ms: int, privileged: bool, uses_topic_ids: bool,
                     partitions: dict[PartitionKey, CachedPartition]) -> int:
        """A new session's id, or INVALID_SESSION_ID when no slot is free and none may be taken."""
        if self.max_entries <= 0:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self.sessions:
            session_id = random.randint(1, _MAX_EPOCH)
        self.sessions[session_id] = FetchSession(session_id, privileged, uses_topic_ids, partitions,
                                                 creation_ms=now_ms, last_used_ms=now_ms,
                                                 epoch=next_epoch(INITIAL_EPOCH))
        return session_id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Make room for a session of ``size`` partitions: first the least recently used one if it is
        stale; else the least valuable one the newcomer may displace (fewer partitions, then
        unprivileged, then lower id), if it is worth no more than the newcomer."""
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: s.last_used_ms)
        if now_ms - lru.last_used_ms > self.eviction_ms:
            return self._evict(lru)
        candidates = [s for s in self.sessions.values()
                      if now_ms - s.creation_ms > self.eviction_ms or (privileged and not s.privileged)]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (s.size, s.privileged, s.id))
        if (size, privileged, 0) < (victim.size, victim.privileged, victim.id):
            return False
        return self._evict(victim)

    def _evict(self, session: FetchSession) -> bool:
        del self.sessions[session.id]
        self.evictions += 1
        return True


class ContextKind(Enum):
    SESSIONLESS = "sessionless"  # epoch -1: every partition asked and answered, nothing kept
    FULL = "full"  # epoch 0: every partition asked and answered; a session opens if a slot is free
    INCREMENTAL = "incremental"  # epoch > 0: changes asked, changes answered
    ERROR = "error"  # an unknown session or a wrong epoch: no partitions answered


@dataclass(slots=True)
class FetchContext:
    """What one Fetch request reads, and how its answer is cut."""

    kind: ContextKind
    partitions: list[CachedPartition] = field(default_factory=list)
    error_code: int = 0
    session: FetchSession | None = None
    privileged: bool = False
    uses_topic_ids: bool = False


class FetchManager:
    """Turns a Fetch request's session fields into a FetchContext (Kafka's FetchManager)."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def new_context(self, version: int, session_id: int, epoch: int, privileged: bool,
                    fetch_data: Sequence[CachedPartition], forgotten: Sequence[PartitionKey],
                    now_ms: int | None = None) -> FetchContext:
        now = _now_ms() if now_ms is None else now_ms
        uses_ids = version >= TOPIC_IDS_FROM
        if version < 7 or epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if version >= 7 and session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)  # a full fetch of a known session starts it over (or closes it)
            kind = ContextKind.FULL if version >= 7 and epoch == INITIAL_EPOCH else ContextKind.SESSIONLESS
            return FetchContext(kind, _dedup(fetch_data, uses_ids), privileged=privileged, uses_topic_ids=uses_ids)
        session = self.cache.get(session_id)
        if session is None:
            return FetchContext(ContextKind.ERROR, error_code=FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(ContextKind.ERROR, error_code=INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_ids:
            return FetchContext(ContextKind.ERROR, error_code=FETCH_SESSION_TOPIC_ID_ERROR)
        parts = session.partitions
        for cp in fetch_data:
            key = cp.key(uses_ids)
            cached = parts.get(key)
            if cached is None:
                parts[key] = cp
            else:
                cached.update_request(cp)
        for key in forgotten:
            parts.pop(key, None)
        if not parts:
            # Nothing left to fetch: the session ends; this fetch is answered without one.
            self.cache.remove(session.id)
            return FetchContext(ContextKind.SESSIONLESS, privileged=privileged, uses_topic_ids=uses_ids)
        self.cache.touch(session, now)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(ContextKind.INCREMENTAL, list(parts.values()), session=session,
                            privileged=privileged, uses_topic_ids=uses_ids)

    def answer(self, context: FetchContext, results: Sequence[Any],
               now_ms: int | None = None) -> tuple[int, list[tuple[CachedPartition, Any]]]:
        """(session id for the response, the partitions it carries) once ``results`` (one per
        ``context.partitions``) are read. A full fetch opens its session here."""
        pairs = list(zip(context.partitions, results, strict=True))
        if context.kind is ContextKind.FULL:
            partitions: dict[PartitionKey, CachedPartition] = {}
            for cp, r in pairs:
                cp.remember(r)
                partitions[cp.key(context.uses_topic_ids)] = cp
            now = _now_ms() if now_ms is None else now_ms
            session_id = self.cache.maybe_create(now, context.privileged, context.uses_topic_ids, partitions)
            return session_id, pairs
        if context.kind is ContextKind.INCREMENTAL:
            session = context.session
            assert session is not None
            out = []
            for cp, r in pairs:
                if cp.must_respond(r):
                    out.append((cp, r))
                    if r.records is not None and r.size > 0:
                        # Partitions that returned data go to the back, so a response cut by max_bytes
                        # does not always serve the same partitions first.
                        key = cp.key(session.uses_topic_ids)
                        session.partitions[key] = session.partitions.pop(key)
            return session.id, out
        return INVALID_SESSION_ID, pairs

    def throttled_session_id(self, context: FetchContext) -> int:
        """A throttled answer carries no partitions; a full fetch opens no session for it."""
        if context.kind is ContextKind.INCREMENTAL and context.session is not None:
            return context.session.id
        return INVALID_SESSION_ID


def _dedup(fetch_data: Sequence[CachedPartition], uses_ids: bool) -> list[CachedPartition]:
    """A full fetch's partitions, each once (the last mention wins)."""
    seen: dict[PartitionKey, CachedPartition] = {}
    for cp in fetch_data:
        seen[cp.key(uses_ids)] = cp
    return list(seen.values())
