"""DelayedProduce: acks=all completes when the HW passes the appended records, times out, rechecks min ISR."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import kafka.errors as Errors
import pytest
from tests.support.fake_clock import FakeClock

from strom.broker.replica_manager import (
    DelayedProduce,
    ProducePartitionResult,
    ProduceResults,
    TopicPartition,
)
from strom.server_common.purgatory import DelayedOperationPurgatory
from strom.server_common.timing_wheel import Timer

TP0: TopicPartition = ("t", 0)
TP1: TopicPartition = ("t", 1)


@dataclass
class FakePartition:
    """What DelayedProduce reads from a Partition; the test moves the HW as followers would."""

    high_watermark: int = 0
    isr_size: int = 2
    min_insync_replicas: int = 2
    is_leader: bool = True


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def pending(required_offset: int) -> ProducePartitionResult:
    return ProducePartitionResult(base_offset=required_offset - 1, required_offset=required_offset,
                                  acks_pending=True)


def park(loop: asyncio.AbstractEventLoop, parts: dict[TopicPartition, FakePartition], results: ProduceResults,
         timeout_ms: int = 100) -> tuple[FakeClock, DelayedOperationPurgatory, asyncio.Future[ProduceResults]]:
    clock = FakeClock()
    purgatory = DelayedOperationPurgatory("Produce", Timer(tick_ms=1, wheel_size=20, start_ms=0, clock=clock))
    future: asyncio.Future[ProduceResults] = loop.create_future()
    op = DelayedProduce(timeout_ms, results, parts.get, future)
    purgatory.try_complete_else_watch(op, list(results))
    return clock, purgatory, future


def test_completes_when_every_partition_hw_passes_its_last_offset(loop: asyncio.AbstractEventLoop) -> None:
    parts = {TP0: FakePartition(), TP1: FakePartition()}
    results = {TP0: pending(5), TP1: pending(3)}
    _, purgatory, future = park(loop, parts, results)
    assert not future.done() and purgatory.delayed() == 1

    parts[TP0].high_watermark = 4  # below the last appended offset + 1: still waiting
    assert purgatory.check_and_complete(TP0) == 0
    parts[TP0].high_watermark = 5
    assert purgatory.check_and_complete(TP0) == 0  # TP1 still behind
    assert not results[TP0].acks_pending and results[TP1].acks_pending
    parts[TP1].high_watermark = 9
    assert purgatory.check_and_complete(TP1) == 1
    assert future.done() and future.result() is results
    assert [r.error_code for r in results.values()] == [0, 0]
    assert purgatory.delayed() == 0


def test_already_replicated_completes_without_waiting(loop: asyncio.AbstractEventLoop) -> None:
    _, purgatory, future = park(loop, {TP0: FakePartition(high_watermark=10)}, {TP0: pending(10)})
    assert future.done() and future.result()[TP0].error_code == 0
    assert purgatory.delayed() == 0 and purgatory.watched() == 0


def test_expires_with_request_timed_out(loop: asyncio.AbstractEventLoop) -> None:
    parts = {TP0: FakePartition(), TP1: FakePartition()}
    results = {TP0: pending(5), TP1: pending(5)}
    clock, purgatory, future = park(loop, parts, results, timeout_ms=100)
    parts[TP0].high_watermark = 5
    purgatory.check_and_complete(TP0)
    clock.now = 99
    purgatory.timer.advance_clock(clock.now)
    assert not future.done()
    clock.now = 101
    purgatory.timer.advance_clock(clock.now)
    assert future.done()
    assert results[TP0].error_code == 0  # this one made it in time
    assert results[TP1].error_code == Errors.RequestTimedOutError.errno
    assert not results[TP1].acks_pending


def test_min_insync_replicas_rechecked_at_completion(loop: asyncio.AbstractEventLoop) -> None:
    part = FakePartition()
    results = {TP0: pending(5)}
    _, purgatory, future = park(loop, {TP0: part}, results)
    part.isr_size = 1  # the ISR shrank while the records were being replicated
    part.high_watermark = 5
    assert purgatory.check_and_complete(TP0) == 1
    assert results[TP0].error_code == Errors.NotEnoughReplicasAfterAppendError.errno


def test_leadership_lost_or_partition_gone(loop: asyncio.AbstractEventLoop) -> None:
    parts = {TP0: FakePartition(), TP1: FakePartition()}
    results = {TP0: pending(5), TP1: pending(5)}
    _, purgatory, future = park(loop, parts, results)
    parts[TP0].is_leader = False
    del parts[TP1]
    purgatory.check_and_complete(TP0)
    assert future.done()
    assert results[TP0].error_code == Errors.NotLeaderForPartitionError.errno
    assert results[TP1].error_code == Errors.UnknownTopicOrPartitionError.errno


def test_only_pending_partitions_are_checked(loop: asyncio.AbstractEventLoop) -> None:
    failed = ProducePartitionResult(error_code=Errors.CorruptRecordError.errno)  # phase 1 failed: not waited on
    parts = {TP0: FakePartition()}
    results = {TP0: pending(5), TP1: failed}
    _, purgatory, future = park(loop, parts, results)
    parts[TP0].high_watermark = 5
    assert purgatory.check_and_complete(TP0) == 1
    assert results[TP1].error_code == Errors.CorruptRecordError.errno
