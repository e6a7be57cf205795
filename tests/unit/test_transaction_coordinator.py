"""The transaction coordinator over real ``__transaction_state`` Logs: requests, markers, reload, timeouts.

The partition layer is a stand-in that records the markers it is asked to write (the real
one is exercised by tests/integration/test_transactions.py).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kafka.errors as Errors
from tests.unit.fake_clock import ManualClock

from strom.broker.partition import Partition
from strom.coordinator.group.group_metadata_manager import GROUP_METADATA_TOPIC_NAME
from strom.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from strom.coordinator.transaction.transaction_marker_channel_manager import TransactionMarkerChannelManager
from strom.coordinator.transaction.transaction_metadata import TransactionState
from strom.coordinator.transaction.transaction_state_manager import (
    TRANSACTION_STATE_TOPIC_NAME,
    TransactionStateManager,
)
from strom.metadata.store import PartitionState
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

S = TransactionState
NUM_PARTITIONS = 3
TOPIC_ID = uuid.uuid4()


class Partitions:
    """What the coordinator uses of the ReplicaManager: ``__transaction_state`` Logs and write_txn_markers."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.config = LogConfig.from_props({"cleanup.policy": "compact"})
        self.logs: dict[int, Log] = {}
        self.markers: list[tuple[int, int, int, bool, list[tuple[str, int]]]] = []
        self.marker_errors: dict[tuple[str, int], list[int]] = {}  # errors answered before success
        self.leader_epoch = 0

    def log(self, partition: int) -> Log:
        if partition not in self.logs:
            path = os.path.join(self.directory, f"{TRANSACTION_STATE_TOPIC_NAME}-{partition}")
            os.makedirs(path, exist_ok=True)
            self.logs[partition] = Log(path, self.config)
        return self.logs[partition]

    def append_records(self, entries: dict[tuple[str, int], bytes], acks: int, origin: Any = None) -> Any:
        results = {}
        for (topic, partition), records in entries.items():
            plog = self.log(partition)
            info = plog.append_as_leader(records, 0)
            plog.update_high_watermark(plog.log_end_offset)
            results[(topic, partition)] = SimpleNamespace(error_code=0, error_message=None,
                                                          base_offset=info.first_offset)
        return results, None

    def get_partition(self, topic: str, partition: int) -> Partition:
        """A real Partition led here (broker 0) over the partition's Log, as the ReplicaManager hands out."""
        state = PartitionState(partition, leader=0, leader_epoch=self.leader_epoch, replicas=[0], isr=[0])
        return Partition(topic, partition, TOPIC_ID, state, self.log(partition), local_broker_id=0)

    async def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                                partitions: list[tuple[str, int]], timeout_ms: int = 30000) -> dict[tuple[str, int], int]:
        out = {}
        for tp in partitions:
            queued = self.marker_errors.get(tp)
            out[tp] = queued.pop(0) if queued else 0
        self.markers.append((producer_id, producer_epoch, coordinator_epoch, commit,
                             [tp for tp in partitions if out[tp] == 0]))
        return out

    def close(self) -> None:
        for plog in self.logs.values():
            plog.close()
        self.logs.clear()


class Metadata:
    """Every topic has 4 partitions led by broker 0 (this one), except those deleted."""

    def __init__(self) -> None:
        self.deleted: set[str] = set()

    def topic(self, name: str) -> Any:
        if name in self.deleted:
            return None
        return SimpleNamespace(partitions={p: SimpleNamespace(leader=0) for p in range(4)})

    def live_brokers(self) -> list[Any]:
        return [SimpleNamespace(broker_id=0, host="127.0.0.1", port=1)]


class Groups:
    def __init__(self) -> None:
        self.completed: list[tuple[int, set[int], bool]] = []

    def on_txn_completed(self, producer_id: int, partitions: set[int], committed: bool) -> None:
        self.completed.append((producer_id, partitions, committed))


class Harness:
    def __init__(self, directory: str, partitions: Partitions | None = None,
                 clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        self.partitions = partitions or Partitions(directory)
        self.metadata = Metadata()
        self.groups = Groups()
        self.next_pid = 1000
        self.manager = TransactionStateManager(0, self.partitions, num_partitions=NUM_PARTITIONS,
                                               transactional_id_expiration_ms=1000, clock=self.clock)
        channel = TransactionMarkerChannelManager(0, self.metadata, self.partitions, lambda: self.groups,
                                                  clock=self.clock)
        self.coordinator = TransactionCoordinator(0, self.manager, channel, self._pid, lambda g: 1,
                                                  max_timeout_ms=900000)

    async def _pid(self) -> int:
        self.next_pid += 1
        return self.next_pid

    async def load_all(self) -> None:
        for p in range(NUM_PARTITIONS):
            await self.coordinator.load_partition(p)

    async def settle(self) -> None:
        """Run the background work (markers, Complete records) to its end, moving the clock over
        its retry back-offs."""
        for _ in range(1000):
            if not self.coordinator._tasks:
                return
            await self.clock.advance(1000)
        raise AssertionError(f"background work never finished: {self.coordinator._tasks}")

    def state(self, tid: str) -> Any:
        return self.manager.get_transaction_state(tid)[1].metadata


def with_harness(fn: Callable[[Harness], Awaitable[None]]) -> Callable[[Path], None]:
    """Run an async test body on a fresh loop with a coordinator owning every partition."""

    def test(tmp_path: Path) -> None:
        async def main() -> None:
            harness = Harness(str(tmp_path))
            await harness.load_all()
            try:
                await fn(harness)
            finally:
                await harness.coordinator.shutdown()
                harness.partitions.close()

        asyncio.run(main())

    test.__name__ = fn.__name__
    return test


async def init(h: Harness, tid: str = "tx", timeout_ms: int = 60000) -> tuple[int, int]:
    r = await h.coordinator.handle_init_producer_id(tid, timeout_ms)
    assert r.error == 0
    return r.producer_id, r.producer_epoch


@with_harness
async def test_commit_writes_markers_then_completes(h: Harness) -> None:
    pid, epoch = await init(h)
    assert (pid, epoch) == (1001, 0)
    c = h.coordinator
    assert await c.handle_add_partitions_to_transaction("tx", pid, epoch, {("a", 0), ("a", 1)}) == 0
    assert await c.handle_add_offsets_to_transaction("tx", pid, epoch, "group") == 0
    assert h.state("tx").state is S.ONGOING
    assert await c.handle_end_transaction("tx", pid, epoch, True) == 0
    assert h.state("tx").state is S.PREPARE_COMMIT  # answered once the Prepare record is durable
    assert await c.handle_add_partitions_to_transaction("tx", pid, epoch, {("a", 2)}) == \
        Errors.ConcurrentTransactionsError.errno
    await h.settle()
    assert h.state("tx").state is S.COMPLETE_COMMIT
    (marker,) = h.partitions.markers
    assert marker[:4] == (pid, epoch, 0, True)
    assert sorted(marker[4]) == [(GROUP_METADATA_TOPIC_NAME, 1), ("a", 0), ("a", 1)]
    assert h.groups.completed == [(pid, {1}, True)]
    assert await c.handle_end_transaction("tx", pid, epoch, True) == 0  # a retried EndTxn
    assert await c.handle_end_transaction("tx", pid, epoch, False) == Errors.InvalidTxnStateError.errno


@with_harness
async def test_errors_clients_see(h: Harness) -> None:
    c = h.coordinator
    assert (await c.handle_init_producer_id("tx", 900001)).error == Errors.InvalidTransactionTimeoutError.errno
    assert (await c.handle_init_producer_id("", 1000)).error == Errors.InvalidRequestError.errno
    assert await c.handle_end_transaction("nope", 1, 0, True) == Errors.InvalidProducerIdMappingError.errno
    pid, epoch = await init(h)
    assert await c.handle_end_transaction("tx", pid, epoch, True) == Errors.InvalidTxnStateError.errno
    assert await c.handle_add_partitions_to_transaction("tx", pid + 1, epoch, {("a", 0)}) == \
        Errors.InvalidProducerIdMappingError.errno
    h.manager.loading_partitions.add(h.manager.partition_for("tx"))
    assert await c.handle_end_transaction("tx", pid, epoch, True) == Errors.CoordinatorLoadInProgressError.errno
    h.manager.loading_partitions.clear()
    h.coordinator.on_resignation(h.manager.partition_for("tx"))
    assert await c.handle_end_transaction("tx", pid, epoch, True) == Errors.NotCoordinatorError.errno


@with_harness
async def test_a_second_producer_fences_the_first_and_aborts_its_transaction(h: Harness) -> None:
    c = h.coordinator
    pid, epoch = await init(h)
    assert await c.handle_add_partitions_to_transaction("tx", pid, epoch, {("a", 0)}) == 0
    r = await c.handle_init_producer_id("tx", 60000)
    assert r.error == Errors.ConcurrentTransactionsError.errno  # the open transaction is aborted first
    assert await c.handle_add_partitions_to_transaction("tx", pid, epoch, {("a", 1)}) == \
        Errors.ProducerFencedError.errno
    await h.settle()
    assert h.state("tx").state is S.COMPLETE_ABORT
    assert h.partitions.markers[-1][:4] == (pid, epoch + 1, 0, False)
    r = await c.handle_init_producer_id("tx", 60000)
    assert (r.error, r.producer_id, r.producer_epoch) == (0, pid, epoch + 2)
    assert await c.handle_end_transaction("tx", pid, epoch, True) == Errors.ProducerFencedError.errno


@with_harness
async def test_timed_out_transaction_is_aborted_with_a_bumped_epoch(h: Harness) -> None:
    c = h.coordinator
    pid, epoch = await init(h, timeout_ms=10)
    assert await c.handle_add_partitions_to_transaction("tx", pid, epoch, {("a", 0)}) == 0
    await h.clock.advance(10)
    assert await c.abort_timed_out_transactions() == 0  # open exactly as long as its timeout: not yet
    await h.clock.advance(1)
    assert await c.abort_timed_out_transactions() == 1
    await h.settle()
    md = h.state("tx")
    assert (md.state, md.producer_epoch) == (S.COMPLETE_ABORT, epoch + 1)
    assert await c.handle_add_partitions_to_transaction("tx", pid, epoch, {("a", 0)}) == \
        Errors.ProducerFencedError.errno


def test_expired_ids_are_tombstoned_and_stay_gone_after_reload(tmp_path: Path) -> None:
    asyncio.run(_test_expired_ids_are_tombstoned_and_stay_gone_after_reload(tmp_path))


async def _test_expired_ids_are_tombstoned_and_stay_gone_after_reload(tmp_path: Path) -> None:
    h = Harness(str(tmp_path))
    await h.load_all()
    await init(h)
    h.state("tx").txn_last_update_timestamp -= 5000
    assert await h.coordinator.remove_expired_transactional_ids() == 1
    assert h.manager.get_transaction_state("tx") == (0, None)
    await h.coordinator.shutdown()
    again = Harness(str(tmp_path), h.partitions)
    await again.load_all()
    assert again.manager.get_transaction_state("tx") == (0, None)
    h.partitions.close()


def test_reload_completes_a_prepared_commit(tmp_path: Path) -> None:
    asyncio.run(_test_reload_completes_a_prepared_commit(tmp_path))


async def _test_reload_completes_a_prepared_commit(tmp_path: Path) -> None:
    h = Harness(str(tmp_path))
    await h.load_all()
    pid, epoch = await init(h)
    await h.coordinator.handle_add_partitions_to_transaction("tx", pid, epoch, {("a", 0)})
    h.partitions.marker_errors[("a", 0)] = [Errors.NotLeaderForPartitionError.errno] * 1000
    assert await h.coordinator.handle_end_transaction("tx", pid, epoch, True) == 0
    await h.clock.advance(200)  # a few marker attempts fail
    assert h.partitions.markers and all(m[4] == [] for m in h.partitions.markers)  # attempted, none written
    assert h.state("tx").state is S.PREPARE_COMMIT
    await h.coordinator.shutdown()  # the "crash": PrepareCommit in the log, markers never written
    h.partitions.marker_errors.clear()
    h.partitions.markers.clear()
    h.partitions.leader_epoch = 1
    again = Harness(str(tmp_path), h.partitions)
    await again.load_all()
    await again.settle()
    assert again.state("tx").state is S.COMPLETE_COMMIT
    assert h.partitions.markers == [(pid, epoch, 1, True, [("a", 0)])]
    await again.coordinator.shutdown()
    h.partitions.close()


@with_harness
async def test_markers_retry_and_deleted_topics_are_dropped(h: Harness) -> None:
    c = h.coordinator
    pid, epoch = await init(h)
    await c.handle_add_partitions_to_transaction("tx", pid, epoch, {("a", 0), ("gone", 0)})
    h.partitions.marker_errors[("a", 0)] = [Errors.NotLeaderForPartitionError.errno] * 2
    h.metadata.deleted.add("gone")
    assert await c.handle_end_transaction("tx", pid, epoch, False) == 0
    await h.settle()
    assert h.state("tx").state is S.COMPLETE_ABORT
    assert [m[4] for m in h.partitions.markers] == [[], [], [("a", 0)]]


@with_harness
async def test_list_and_describe(h: Harness) -> None:
    c = h.coordinator
    pid, epoch = await init(h, "t1")
    await init(h, "t2")
    await c.handle_add_partitions_to_transaction("t1", pid, epoch, {("a", 0)})
    err, found = c.handle_list_transactions({S.ONGOING}, None)
    assert (err, [m.transactional_id for m in found]) == (0, ["t1"])
    err, found = c.handle_list_transactions(None, {pid})
    assert [m.transactional_id for m in found] == ["t1"]
    err, md = c.handle_describe_transaction("t1")
    assert (err, md.state, md.topic_partitions) == (0, S.ONGOING, {("a", 0)})
    assert c.handle_describe_transaction("t3")[0] == Errors.TransactionalIdNotFoundError.errno
