"""The fetch session cache and contexts (KIP-227), without a broker: what a session keeps, what an
incremental answer leaves out, which session loses its slot, and the errors a fetcher gets."""

from __future__ import annotations

import uuid

from strom.broker.fetch_session import (
    FETCH_SESSION_ID_NOT_FOUND,
    FETCH_SESSION_TOPIC_ID_ERROR,
    INVALID_FETCH_SESSION_EPOCH,
    CachedPartition,
    ContextKind,
    FetchManager,
    FetchSessionCache,
    next_epoch,
)
from strom.broker.replica_manager import FetchPartitionResult
from strom.protocol.replica_fetch import FetchPartition
from strom.replication.fetch_session_handler import FetchSessionHandler


class Data:
    """Stands for a FetchDataInfo: only its presence matters to the session."""


def cp(topic: str, partition: int, offset: int = 0, topic_id: uuid.UUID | None = None) -> CachedPartition:
    return CachedPartition(topic, topic_id, partition, offset, 1024)


def result(hw: int = 10, size: int = 0, error: int = 0, log_start: int = 0) -> FetchPartitionResult:
    return FetchPartitionResult(error_code=error, high_watermark=hw, last_stable_offset=hw, log_start_offset=log_start,
                                records=Data() if size else None, size=size)


def open_session(manager: FetchManager, parts: list[CachedPartition], version: int = 12, follower: bool = False,
                 now: int = 0) -> int:
    ctx = manager.new_context(version, 0, 0, follower, parts, [], now_ms=now)
    assert ctx.kind is ContextKind.FULL
    session_id, answered = manager.answer(ctx, [result() for _ in ctx.partitions], now_ms=now)
    assert len(answered) == len(parts)
    return session_id


def test_full_fetch_opens_a_session_and_an_idle_incremental_fetch_answers_nothing() -> None:
    manager = FetchManager(FetchSessionCache(10, 1000))
    sid = open_session(manager, [cp("a", 0), cp("a", 1), cp("b", 0)])
    assert sid != 0 and manager.cache.num_partitions == 3
    ctx = manager.new_context(12, sid, 1, False, [], [], now_ms=1)
    assert ctx.kind is ContextKind.INCREMENTAL
    assert [(p.topic, p.partition) for p in ctx.partitions] == [("a", 0), ("a", 1), ("b", 0)]  # all read
    answered_id, answered = manager.answer(ctx, [result() for _ in ctx.partitions])
    assert answered_id == sid and answered == []  # nothing changed: nothing answered


def test_incremental_answer_carries_new_data_changed_offsets_and_errors_only() -> None:
    manager = FetchManager(FetchSessionCache(10, 1000))
    sid = open_session(manager, [cp("a", p) for p in range(5)])
    ctx = manager.new_context(12, sid, 1, False, [], [])
    _, answered = manager.answer(ctx, [result(), result(size=100), result(hw=11), result(log_start=3),
                                       result(error=6)])
    assert [c.partition for c, _ in answered] == [1, 2, 3, 4]
    # The errored partition is answered again once its error is gone; the others are quiet again.
    ctx = manager.new_context(12, sid, 2, False, [], [])
    order = [c.partition for c in ctx.partitions]
    assert order[-1] == 1  # the partition that returned data moved to the back
    by_partition = {0: result(), 1: result(), 2: result(hw=11), 3: result(log_start=3), 4: result()}
    _, answered = manager.answer(ctx, [by_partition[p] for p in order])
    assert [c.partition for c, _ in answered] == [4]


def test_incremental_fetch_updates_changed_partitions_adds_new_ones_and_forgets_topics() -> None:
    manager = FetchManager(FetchSessionCache(10, 1000))
    sid = open_session(manager, [cp("a", 0), cp("a", 1), cp("b", 0)])
    ctx = manager.new_context(12, sid, 1, False, [cp("a", 1, offset=42), cp("c", 0)], [("b", 0)])
    got = {(p.topic, p.partition): p.fetch_offset for p in ctx.partitions}
    assert got == {("a", 0): 0, ("a", 1): 42, ("c", 0): 0}
    _, answered = manager.answer(ctx, [result() for _ in ctx.partitions])
    assert [(c.topic, c.partition) for c, _ in answered] == [("c", 0)]  # new to the session: answered in full
    # Forgetting everything ends the session: the fetch is answered sessionless.
    ctx = manager.new_context(12, sid, 2, False, [], [("a", 0), ("a", 1), ("c", 0)])
    assert ctx.kind is ContextKind.SESSIONLESS and manager.cache.get(sid) is None


def test_epoch_errors_and_closing_a_session() -> None:
    manager = FetchManager(FetchSessionCache(10, 1000))
    sid = open_session(manager, [cp("a", 0)])
    assert manager.new_context(12, sid + 1, 1, False, [], []).error_code == FETCH_SESSION_ID_NOT_FOUND
    assert manager.new_context(12, sid, 2, False, [], []).error_code == INVALID_FETCH_SESSION_EPOCH
    assert manager.new_context(12, sid, 1, False, [], []).kind is ContextKind.INCREMENTAL
    assert manager.new_context(12, sid, 1, False, [], []).error_code == INVALID_FETCH_SESSION_EPOCH  # replayed
    assert manager.new_context(12, sid, 2, False, [], []).kind is ContextKind.INCREMENTAL
    # Epoch -1 closes the session; the fetch itself is answered in full without one.
    ctx = manager.new_context(12, sid, -1, False, [cp("a", 0)], [])
    assert ctx.kind is ContextKind.SESSIONLESS
    assert manager.answer(ctx, [result()])[0] == 0
    assert manager.cache.get(sid) is None
    assert manager.new_context(12, sid, 3, False, [], []).error_code == FETCH_SESSION_ID_NOT_FOUND
    assert next_epoch(0x7FFFFFFF) == 1 and next_epoch(-1) == -1


def test_sessions_by_topic_id_forget_by_id_and_refuse_name_based_fetches() -> None:
    manager = FetchManager(FetchSessionCache(10, 1000))
    a, b = uuid.uuid4(), uuid.uuid4()
    sid = open_session(manager, [cp("a", 0, topic_id=a), cp("b", 0, topic_id=b)], version=13)
    ctx = manager.new_context(13, sid, 1, False, [], [(b, 0)])
    assert [(p.topic_id, p.partition) for p in ctx.partitions] == [(a, 0)]
    manager.answer(ctx, [result()])
    # The same session fetched by name (v12) is refused, as is a name-based session fetched by id.
    assert manager.new_context(12, sid, 2, False, [], []).error_code == FETCH_SESSION_TOPIC_ID_ERROR
    named = open_session(manager, [cp("a", 0)], version=12)
    assert manager.new_context(13, named, 1, False, [], []).error_code == FETCH_SESSION_TOPIC_ID_ERROR


def test_no_session_when_the_cache_is_full_of_new_sessions_of_equal_worth() -> None:
    manager = FetchManager(FetchSessionCache(2, 1000))
    first = open_session(manager, [cp("a", 0), cp("a", 1)], now=0)
    second = open_session(manager, [cp("a", 0), cp("a", 1)], now=0)
    # Same size, not privileged, the others are new: no slot, the fetch is answered without a session.
    assert open_session(manager, [cp("a", 0), cp("a", 1)], now=10) == 0
    assert set(manager.cache.sessions) == {first, second} and manager.cache.evictions == 0


def test_eviction_order_stale_then_privileged_then_smaller_old_sessions() -> None:
    cache = FetchSessionCache(2, 1000)
    manager = FetchManager(cache)
    small = open_session(manager, [cp("a", 0)], now=0)
    big = open_session(manager, [cp("a", p) for p in range(5)], now=0)
    # A follower's session displaces a consumer's even while it is new: the smallest goes first.
    follower = open_session(manager, [cp("f", p) for p in range(3)], follower=True, now=10)
    assert follower != 0 and small not in cache.sessions and big in cache.sessions
    assert cache.evictions == 1
    # A consumer cannot displace a new follower session nor a new bigger one.
    assert open_session(manager, [cp("c", p) for p in range(10)], now=20) == 0
    # Once sessions are no longer new, a consumer with more partitions takes the smaller one's slot.
    manager.new_context(12, big, 1, False, [], [], now_ms=1500)  # big was used recently: not stale
    manager.new_context(12, follower, 1, True, [], [], now_ms=1500)
    bigger = open_session(manager, [cp("c", p) for p in range(10)], now=1600)
    assert bigger != 0 and follower not in cache.sessions and big in cache.sessions
    assert cache.evictions == 2
    # A session unused past the eviction time loses its slot to anyone, whatever its size.
    tiny = open_session(manager, [cp("t", 0)], now=3000)
    assert tiny != 0 and big not in cache.sessions and cache.evictions == 3


def test_no_slots_means_no_sessions() -> None:
    manager = FetchManager(FetchSessionCache(0, 1000))
    assert open_session(manager, [cp("a", 0)]) == 0


def test_follower_session_handler_sends_changes_forgets_dropped_partitions_and_recovers() -> None:
    def fp(partition: int, leo: int) -> FetchPartition:
        return FetchPartition(partition, 1, leo, 1, 0, 1 << 20)

    h = FetchSessionHandler()
    wanted = {("a", 0): fp(0, 5), ("a", 1): fp(1, 7), ("b", 0): fp(0, 1)}
    assert h.build(wanted) == (0, 0, {"a": [fp(0, 5), fp(1, 7)], "b": [fp(0, 1)]}, {})
    assert h.handle_response(0, 1234)
    assert h.build(wanted) == (1234, 1, {}, {})  # idle: nothing to send
    assert h.handle_response(0, 1234)
    changed = {("a", 0): fp(0, 6), ("a", 1): fp(1, 7)}  # a-0 moved on, b-0 no longer fetched
    assert h.build(changed) == (1234, 2, {"a": [fp(0, 6)]}, {"b": [0]})
    # A lost session: the next fetch is full and asks for a new one.
    assert not h.handle_response(70, 0)
    assert h.build(changed) == (0, 0, {"a": [fp(0, 6), fp(1, 7)]}, {})
    assert h.handle_response(0, 99)
    # A wrong epoch (or a lost answer): full again, naming the old session so the leader replaces it.
    assert not h.handle_response(71, 0)
    assert h.build(changed)[:2] == (99, 0)


def test_incremental_answer_carries_a_preferred_read_replica_even_when_nothing_else_changed() -> None:
    """KIP-392: a consumer on a session must learn where to read, though its offsets did not move."""
    manager = FetchManager(FetchSessionCache(10, 1000))
    sid = open_session(manager, [cp("a", 0), cp("a", 1)])
    ctx = manager.new_context(12, sid, 1, False, [], [], now_ms=1)
    redirected = result()
    redirected.preferred_read_replica = 2
    _, answered = manager.answer(ctx, [result(), redirected])
    assert [(c.partition, r.preferred_read_replica) for c, r in answered] == [(1, 2)]
