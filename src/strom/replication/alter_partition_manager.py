"""AlterPartitionManager: a leader's ISR changes go to the controller, never straight to ZooKeeper.

Kafka 2.7+ (KIP-497) replaced leaders writing ISR znodes with the AlterPartition request: the
controller is the only writer of partition state, so its epoch fences everything. Proposals
are batched per send; until the answer arrives the partition keeps a pending ISR (see
``Partition.maximal_isr``). A failed send is retried until the partition's leadership changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import kafka.errors as Errors

from strom.client.broker_client import BrokerClient
from strom.protocol.inter_broker import AlterPartitionRequest, build
from strom.security.client_security import ClientSecurity

if TYPE_CHECKING:
    from strom.broker.partition import Partition
    from strom.broker.replica_manager import ReplicaManager
    from strom.metadata.zk_metadata import ZkMetadataStore

log = logging.getLogger(__name__)

ALTER_PARTITION_VERSION = 2
RETRY_BACKOFF_S = 0.2


class AlterPartitionManager:
    def __init__(self, broker_id: int, store: ZkMetadataStore, replica_manager: ReplicaManager,
                 broker_epoch: Callable[[], int], security: ClientSecurity | None = None) -> None:
        self.broker_id = broker_id
        self._security = security
        self.store = store
        self.replica_manager = replica_manager
        self._broker_epoch = broker_epoch
        self._pending: dict[tuple[str, int], tuple[Partition, list[int]]] = {}
        self._wake = asyncio.Event()
        self._client: BrokerClient | None = None
        self._client_for: tuple[int, str, int] | None = None
        self._task = asyncio.get_running_loop().create_task(self._run(), name="alter-partition")

    def submit(self, partition: Partition, new_isr: list[int]) -> None:
        """The Partition's IsrChangeSender."""
        self._pending[(partition.topic, partition.index)] = (partition, new_isr)
        self._wake.set()

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        if self._client is not None:
            await self._client.close()

    def _controller_client(self) -> BrokerClient | None:
        cid = self.store.controller_id()
        broker = next((b for b in self.store.live_brokers() if b.broker_id == cid), None)
        if broker is None:
            return None
        key = (cid, broker.host, broker.port)
        if self._client_for != key:
            if self._client is not None:
                asyncio.get_running_loop().create_task(self._client.close())
            self._client = BrokerClient(broker.host, broker.port, client_id=f"broker-{self.broker_id}-isr",
                                        security=self._security)
            self._client_for = key
        return self._client

    async def _run(self) -> None:
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            batch, self._pending = self._pending, {}
            try:
                await self._send(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: retry what is still current
                log.info("AlterPartition failed (%s); retrying", exc)
                for tp, (part, isr) in batch.items():
                    if tp not in self._pending and part.pending_isr == isr and part.is_leader:
                        self._pending[tp] = (part, isr)
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _send(self, batch: dict[tuple[str, int], tuple[Partition, list[int]]]) -> None:
        client = self._controller_client()
        if client is None:
            raise ConnectionError("no controller known yet")
        by_topic: dict[object, list[dict[str, object]]] = {}
        epochs: dict[tuple[str, int], int] = {}
        for tp, (part, isr) in batch.items():
            epochs[tp] = part.leader_epoch
            by_topic.setdefault(part.topic_id, []).append({
                "partition_index": tp[1], "leader_epoch": part.leader_epoch, "new_isr": list(isr),
                "leader_recovery_state": 0, "partition_epoch": part.partition_epoch})
        request = build(AlterPartitionRequest, broker_id=self.broker_id, broker_epoch=self._broker_epoch(), topics=[
            {"topic_id": tid, "partitions": parts} for tid, parts in by_topic.items()])
        response = await client.send(request, ALTER_PARTITION_VERSION)
        if response.error_code:
            raise ConnectionError(f"controller answered error {response.error_code}")
        names = {part.topic_id: part.topic for part, _ in batch.values()}
        for t in response.topics:
            name = names.get(t.topic_id)
            for p in t.partitions:
                tp = (name or "", p.partition_index)
                if tp not in batch:
                    continue
                if p.error_code == 0:
                    self.replica_manager.on_isr_committed(tp, p.leader_epoch, list(p.isr), p.partition_epoch)
                else:
                    if p.error_code not in (Errors.FencedLeaderEpochError.errno,
                                            Errors.InvalidUpdateVersionError.errno):
                        log.info("ISR change of %s-%d refused with error %d", *tp, p.error_code)
                    self.replica_manager.on_isr_committed(tp, epochs[tp], None, -1)
