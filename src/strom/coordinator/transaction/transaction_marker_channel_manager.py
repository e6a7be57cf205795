"""Transaction markers: the coordinator's half of ending a transaction on every partition.

``write_txn_markers_locally`` is the one place a marker is applied on a broker: the
replica manager appends the control batch to each partition it leads (acks=all), then
the group coordinator learns which ``__consumer_offsets`` partitions settled, so pending
transactional offsets become visible (commit) or vanish (abort). The WriteTxnMarkers
handler calls it for markers other coordinators send; the coordinator calls it directly
for partitions this broker leads. Partitions led elsewhere (ZooKeeper cluster) get a
WriteTxnMarkers v1 request through the inter-broker client.

Delivery is retried with fresh metadata until every partition has its marker, as Kafka's
TransactionMarkerChannelManager does: a leader change or a lost connection only delays the
end of the transaction. A partition whose topic was deleted is dropped; a partition answering
that this coordinator was fenced stops the delivery, since a newer coordinator owns the id now.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import kafka.errors as Errors
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from strom.client.broker_client import BrokerClient
from strom.coordinator.clock import SYSTEM_CLOCK, Clock
from strom.coordinator.group.group_metadata_manager import GROUP_METADATA_TOPIC_NAME
from strom.security.client_security import ClientSecurity
from strom.server_common.types import TopicPartition

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1
RETRY_BACKOFF_INITIAL_S = 0.05
RETRY_BACKOFF_MAX_S = 1.0
# Test hook: "1" holds every marker delivery forever, so a test can crash the broker between the
# Prepare record and the markers (Kafka's crash window) deterministically. Unset in production.
HOLD_MARKERS_ENV = "STROM_TEST_HOLD_TXN_MARKERS"
# The coordinator is stale (or the producer moved on): stop sending, a newer coordinator takes over.
_ABORT_SENDING = frozenset({Errors.TransactionCoordinatorFencedError.errno, Errors.InvalidProducerEpochError.errno})
_Marker = WriteTxnMarkersRequest.WritableTxnMarker
_MarkerTopic = _Marker.WritableTxnMarkerTopic


async def write_txn_markers_locally(replica_manager: Any, group_coordinator: Any, producer_id: int,
                                    producer_epoch: int, coordinator_epoch: int, commit: bool,
                                    partitions: list[TopicPartition], timeout_ms: int = 30000
                                    ) -> dict[TopicPartition, int]:
    """Write one marker to the listed partitions this broker leads; an error code per partition."""
    errors: dict[TopicPartition, int] = await replica_manager.write_txn_markers(
        producer_id, producer_epoch, coordinator_epoch, commit, partitions, timeout_ms)
    offsets_partitions = {p for (t, p), err in errors.items() if t == GROUP_METADATA_TOPIC_NAME and err == 0}
    if offsets_partitions:
        group_coordinator.on_txn_completed(producer_id, offsets_partitions, commit)
    return errors


class TransactionMarkerChannelManager:
    """Delivers markers to partition leaders: a local call for this broker, WriteTxnMarkers for others."""

    def __init__(self, broker_id: int, metadata: Any, replica_manager: Any, group_coordinator: Callable[[], Any],
                 request_timeout_ms: int = 30000, hold_markers: bool = False,
                 security: ClientSecurity | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.broker_id = broker_id
        self.clock = clock
        self._security = security
        self.hold_markers = hold_markers
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.group_coordinator = group_coordinator
        self.request_timeout_ms = request_timeout_ms
        self._clients: dict[int, BrokerClient] = {}

    async def send_markers(self, coordinator_epoch: int, producer_id: int, producer_epoch: int, commit: bool,
                           partitions: set[TopicPartition], still_coordinator: Callable[[], bool],
                           on_partition_done: Callable[[TopicPartition], None]) -> bool:
        """Deliver until every partition has its marker (True), or stop once this coordinator is
        deposed or fenced (False): the next coordinator resends from the log."""
        if self.hold_markers:
            log.warning("%s is set: holding the markers of producer %d", HOLD_MARKERS_ENV, producer_id)
            await asyncio.get_running_loop().create_future()  # until shutdown cancels it
        pending = set(partitions)
        backoff = RETRY_BACKOFF_INITIAL_S
        while pending:
            if not still_coordinator():
                return False
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                topic = self.metadata.topic(tp[0])
                if topic is None or tp[1] not in topic.partitions:
                    log.info("dropping the marker of producer %d for %s-%d: the partition no longer exists",
                             producer_id, *tp)
                    pending.discard(tp)
                    on_partition_done(tp)
                    continue
                by_leader.setdefault(topic.partitions[tp[1]].leader, []).append(tp)
            if not by_leader:
                break
            answers = await asyncio.gather(*(
                self._send_to(leader, tps, producer_id, producer_epoch, coordinator_epoch, commit)
                for leader, tps in by_leader.items()))
            for errors in answers:
                for tp, err in errors.items():
                    if err == 0:
                        pending.discard(tp)
                        on_partition_done(tp)
                    elif err in _ABORT_SENDING:
                        log.warning("stopping markers of producer %d: %s-%d answered error %d (coordinator epoch %d)",
                                    producer_id, *tp, err, coordinator_epoch)
                        return False
            if pending:
                log.debug("markers of producer %d still pending for %s; retrying", producer_id, sorted(pending))
                await self.clock.sleep(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
        return True

    async def _send_to(self, leader: int, partitions: list[TopicPartition], producer_id: int, producer_epoch: int,
                       coordinator_epoch: int, commit: bool) -> dict[TopicPartition, int]:
        retriable = Errors.NotLeaderForPartitionError.errno
        try:
            if leader == self.broker_id:
                return await write_txn_markers_locally(
                    self.replica_manager, self.group_coordinator(), producer_id, producer_epoch,
                    coordinator_epoch, commit, partitions, self.request_timeout_ms)
            client = self._client(leader)
            if client is None:
                return dict.fromkeys(partitions, retriable)
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            request = WriteTxnMarkersRequest(markers=[_Marker(
                producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
                topics=[_MarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
                coordinator_epoch=coordinator_epoch)])
            response = await client.send(request, WRITE_TXN_MARKERS_VERSION)
        except (ConnectionError, OSError, TimeoutError) as exc:
            log.info("markers to broker %d failed (%s); retrying", leader, exc)
            return dict.fromkeys(partitions, retriable)
        except Exception:  # noqa: BLE001 - a bug must not end the delivery loop; it retries
            log.exception("writing markers of producer %d to broker %d failed", producer_id, leader)
            return dict.fromkeys(partitions, Errors.UnknownError.errno)
        errors: dict[TopicPartition, int] = dict.fromkeys(partitions, retriable)
        for marker in response.markers:
            for answered in marker.topics:
                for p in answered.partitions:
                    errors[(answered.name, p.partition_index)] = p.error_code
        return errors

    def _client(self, broker_id: int) -> BrokerClient | None:
        broker = next((b for b in self.metadata.live_brokers() if b.broker_id == broker_id), None)
        if broker is None:
            return None
        client = self._clients.get(broker_id)
        if client is not None and (client.host, client.port) != (broker.host, broker.port):
            asyncio.get_running_loop().create_task(client.close())
            client = None
        if client is None:
            client = BrokerClient(broker.host, broker.port, client_id=f"broker-{self.broker_id}-txn-markers",
                                  request_timeout_ms=self.request_timeout_ms + 5000, security=self._security)
            self._clients[broker_id] = client
        return client

    async def shutdown(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()
