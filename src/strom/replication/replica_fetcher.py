"""Replica fetchers: followers pull from leaders the way consumers do, with their broker id.

One ``ReplicaFetcher`` per source broker batches every partition this broker follows there
into one Fetch request (Kafka's ReplicaFetcherThread, as an asyncio task). A partition that
just became a follower first truncates to the divergence point its leader names through
OffsetForLeaderEpoch (KIP-101/279), never blindly to its HW: records a dead leader had but
the new one lacks must go, records below the new leader's epoch start must stay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import kafka.errors as Errors
from kafka.protocol.consumer import OffsetForLeaderEpochRequest

from strom.client.broker_client import DEAD_PEER_TIMEOUT_S, BrokerClient
from strom.protocol import replica_fetch
from strom.protocol.api_keys import ApiKey
from strom.protocol.inter_broker import build
from strom.protocol.record_batch import new_epoch_starts
from strom.protocol.replica_fetch import FetchPartition
from strom.replication.fetch_session_handler import FetchSessionHandler
from strom.security.client_security import ClientSecurity
from strom.server_common.types import TopicPartition

if TYPE_CHECKING:
    from strom.broker.quota.replication import ReplicationQuotaManager
    from strom.broker.replica_manager import ReplicaManager
    from strom.config import BrokerConfig

log = logging.getLogger(__name__)

OFFSET_FOR_LEADER_EPOCH_VERSION = 4
RETRY_BACKOFF_S = 0.5
UNDEFINED_EPOCH = -1
# Top-level Fetch errors that only mean the leader no longer holds our session as we think.
SESSION_ERRORS = frozenset((Errors.FetchSessionIdNotFoundError.errno, Errors.InvalidFetchSessionEpochError.errno,
                            Errors.FetchSessionTopicIdError.errno))

# broker id -> (host, port) of a live broker, or None while unknown
EndpointLookup = Callable[[int], tuple[str, int] | None]


@dataclass(slots=True)
class PartitionFetchState:
    leader_epoch: int
    truncating: bool = True  # a new leader (or epoch): find the divergence point first
    delayed_until: float = 0.0  # back-off after a partition error
    # Caught up with the leader's HW at the last fetch (Kafka's isReplicaInSync): never throttled then.
    in_sync: bool = False


class ReplicaFetcher:
    """Fetches every partition this broker follows on one source broker."""

    def __init__(self, broker_id: int, source_id: int, replica_manager: ReplicaManager, config: BrokerConfig,
                 endpoint: EndpointLookup, security: ClientSecurity | None = None,
                 quota: ReplicationQuotaManager | None = None) -> None:
        self.broker_id = broker_id
        self.quota = quota  # KIP-73's follower side: follower.replication.throttled.rate
        self._security = security
        self.source_id = source_id
        self.replica_manager = replica_manager
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._endpoint = endpoint
        self._client: BrokerClient | None = None
        self._client_address: tuple[str, int] | None = None
        self._wake = asyncio.Event()
        self._max_wait_ms = config.get("replica.fetch.wait.max.ms")
        self._min_bytes = config.get("replica.fetch.min.bytes")
        self._partition_max_bytes = config.get("replica.fetch.max.bytes")
        self._request_timeout_ms = config.get("replica.socket.timeout.ms")
        # A partitioned leader is noticed by TCP within seconds (then we reconnect), not only when a fetch
        # times out: after a heal the old connection may stay silent for a retransmission back-off.
        self._dead_peer_timeout_s = min(DEAD_PEER_TIMEOUT_S, self._request_timeout_ms / 1000)
        self._task: asyncio.Task[None] | None = None
        # Incremental fetch session with the leader (KIP-227): an idle fetch names no partitions.
        self.session = FetchSessionHandler()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.source_id}")

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = PartitionFetchState(leader_epoch)
        self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._client is not None:
            await self._client.close()

    def _connection(self) -> BrokerClient:
        address = self._endpoint(self.source_id)
        if address is None:
            raise ConnectionError(f"broker {self.source_id} is not known to be alive")
        if self._client is None or self._client_address != address:
            old = self._client
            if old is not None:
                asyncio.get_running_loop().create_task(old.close())
            self._client = BrokerClient(address[0], address[1], client_id=f"broker-{self.broker_id}-fetcher",
                                        request_timeout_ms=self._request_timeout_ms + self._max_wait_ms,
                                        security=self._security, dead_peer_timeout_s=self._dead_peer_timeout_s)
            self._client_address = address
        return self._client

    async def _run(self) -> None:
        while True:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # Python 3.11's wait_for returns an answer that raced a cancel and drops the cancel: a
                # fetcher retrying fast could then outlive stop() and keep the broker from exiting.
                raise asyncio.CancelledError
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                client = self._connection()
                truncating = [tp for tp, st in self.partitions.items() if st.truncating]
                if truncating:
                    await self._truncate(client, truncating)
                await self._fetch(client)
            except asyncio.CancelledError:
                raise
            except (TimeoutError, ConnectionError, OSError) as exc:
                self.session.reset()  # the leader may or may not have seen the lost fetch
                log.info("fetching from broker %d failed: %s; retrying", self.source_id, exc or type(exc).__name__)
                await asyncio.sleep(RETRY_BACKOFF_S)
            except Exception:
                self.session.reset()
                log.exception("replica fetcher for broker %d failed; retrying", self.source_id)
                await asyncio.sleep(RETRY_BACKOFF_S)

    # -- truncation by leader epoch ------------------------------------------------------------------
    async def _truncate(self, client: BrokerClient, tps: list[TopicPartition]) -> None:
        """Ask the leader where our latest epoch ends on its log; cut our log there (KIP-279)."""
        by_topic: dict[str, list[Any]] = {}
        asked: dict[TopicPartition, int] = {}
        for tp in tps:
            part = self.replica_manager.partitions.get(tp)
            if part is None or part.is_leader:
                self.partitions.pop(tp, None)
                continue
            epoch = part.latest_epoch
            if epoch is None:  # no epochs (an empty log, or data written before them): Kafka's fallback, the HW
                await self._truncation_done(tp, None)
                continue
            asked[tp] = epoch
            by_topic.setdefault(tp[0], []).append({
                "partition": tp[1], "current_leader_epoch": self.partitions[tp].leader_epoch,
                "leader_epoch": epoch})
        if not by_topic:
            return
        request = build(OffsetForLeaderEpochRequest,
            replica_id=self.broker_id,
            topics=[{"topic": t, "partitions": parts} for t, parts in by_topic.items()])
        response = await client.send(request, OFFSET_FOR_LEADER_EPOCH_VERSION)
        for t in response.topics:
            for p in t.partitions:
                tp = (t.topic, p.partition)
                if tp not in asked or tp not in self.partitions:
                    continue
                if p.error_code:
                    self._partition_error(tp, p.error_code)
                    continue
                part = self.replica_manager.partitions.get(tp)
                if part is None:
                    continue
                if p.leader_epoch == UNDEFINED_EPOCH or p.end_offset < 0:
                    await self._truncation_done(tp, None)
                    continue
                offset = p.end_offset
                if p.leader_epoch < asked[tp]:
                    # The leader never had our latest epoch: our log ends that older epoch wherever it does.
                    _, own_end = part.end_offset_for_epoch(p.leader_epoch)
                    if own_end >= 0:
                        offset = min(offset, own_end)
                await self._truncation_done(tp, offset)

    async def _truncation_done(self, tp: TopicPartition, offset: int | None) -> None:
        part = self.replica_manager.partitions.get(tp)
        state = self.partitions.get(tp)
        if part is None or state is None:
            return
        target = part.high_watermark if offset is None else offset
        if target < part.log_end_offset:
            log.info("truncating %s-%d from %d to %d (divergence with leader %d)", *tp, part.log_end_offset,
                     target, self.source_id)
            try:  # on the dir's storage thread: it rewrites indexes, the epoch file, producer state
                await part.run_on_storage(part.truncate_to, target)
            except (OSError, Errors.KafkaStorageError) as exc:  # the epoch checkpoint on a full disk
                if not self.replica_manager.maybe_take_log_dir_offline(tp, exc, part.log_dir):
                    raise
                return  # its dir is offline: no longer fetched
        state.truncating = False  # this fetch state only: one made meanwhile (a new leader) truncates afresh

    def _partition_error(self, tp: TopicPartition, error_code: int) -> None:
        """Leadership errors wait for the controller's next LeaderAndIsr; retry after a pause."""
        st = self.partitions.get(tp)
        if st is not None:
            st.delayed_until = asyncio.get_running_loop().time() + RETRY_BACKOFF_S
        if error_code not in (Errors.NotLeaderForPartitionError.errno, Errors.UnknownTopicOrPartitionError.errno,
                              Errors.FencedLeaderEpochError.errno, Errors.UnknownLeaderEpochError.errno):
            log.warning("fetching %s-%d from broker %d: error %d", *tp, self.source_id, error_code)

    # -- fetch ---------------------------------------------------------------------------------------
    async def _fetch(self, client: BrokerClient) -> None:
        now = asyncio.get_running_loop().time()
        wanted: dict[TopicPartition, FetchPartition] = {}
        quota = self.quota
        exceeded: bool | None = None  # asked at most once per fetch, and only if a partition needs it
        for tp, st in self.partitions.items():
            part = self.replica_manager.partitions.get(tp)
            if st.truncating or st.delayed_until > now or part is None:
                continue
            if quota is not None and not st.in_sync and quota.is_throttled(
                    part.log_config.follower_replication_throttled_replicas, tp[1]):
                if exceeded is None:
                    exceeded = quota.is_quota_exceeded()
                if exceeded:
                    quota.held_back()
                    continue  # left out of this fetch until the rate falls below the bound
            epoch = part.latest_epoch
            wanted[tp] = FetchPartition(tp[1], st.leader_epoch, part.log_end_offset, epoch if epoch is not None else -1,
                                        part.log_start_offset, self._partition_max_bytes)
        if not wanted:
            await asyncio.sleep(RETRY_BACKOFF_S / 5)
            return
        session_id, session_epoch, by_topic, forgotten = self.session.build(wanted)
        request = replica_fetch.encode_request(self.broker_id, self._max_wait_ms, self._min_bytes, 0x7FFFFFFF,
                                               by_topic, session_id=session_id, session_epoch=session_epoch,
                                               forgotten=forgotten)
        error_code, answered_session, partitions = replica_fetch.decode_session_response(
            await client.send_raw(ApiKey.FETCH, replica_fetch.FETCH_VERSION, request))
        if not self.session.handle_response(error_code, answered_session):
            if error_code in SESSION_ERRORS:
                log.info("fetch session with broker %d lost (error %d); starting a new one", self.source_id,
                         error_code)
                return  # the next fetch is a full one
            raise ConnectionError(f"fetch refused with error {error_code}")
        for p in partitions:
            tp = (p.topic, p.partition)
            if tp not in self.partitions or self.partitions[tp].truncating:
                continue  # removed, or moved to another leader, while the fetch was out
            if p.error_code == Errors.OffsetOutOfRangeError.errno:
                await self._handle_out_of_range(client, tp)
                continue
            if p.error_code:
                self._partition_error(tp, p.error_code)
                continue
            if p.records and not await self._assign_new_epochs(tp, p.records):
                continue  # the partition moved on while its epochs were written
            try:
                self.replica_manager.append_as_follower(tp, p.records, p.high_watermark, p.log_start_offset)
                self._after_append(tp, p.records, p.high_watermark)
            except Errors.KafkaStorageError:  # logged (rate-limited) by the replica manager; back off
                self.partitions[tp].delayed_until = asyncio.get_running_loop().time() + RETRY_BACKOFF_S
            except Errors.KafkaError as exc:
                log.error("cannot append to follower %s-%d: %s", *tp, exc)
                self.partitions[tp].truncating = True  # start over from the divergence point
            except OSError as exc:
                log.error("storage error appending to follower %s-%d: %s", *tp, exc)
                self._partition_error(tp, Errors.KafkaStorageError.errno)

    def _after_append(self, tp: TopicPartition, records: memoryview | None, leader_high_watermark: int) -> None:
        """Count the bytes of a follower-throttled partition against the rate and note whether the replica
        has caught up (Kafka's fetch-state lag): a caught-up replica is never held back."""
        part = self.replica_manager.partitions.get(tp)
        state = self.partitions.get(tp)
        if part is None or state is None:
            return
        state.in_sync = part.log_end_offset >= leader_high_watermark
        quota = self.quota
        if quota is not None and records and quota.is_throttled(
                part.log_config.follower_replication_throttled_replicas, tp[1]):
            quota.record(len(records))

    async def _assign_new_epochs(self, tp: TopicPartition, records: Any) -> bool:
        """Write the leader epochs these records start (a checkpoint rewrite) on the dir's storage
        thread, so the append on the loop finds them assigned. Returns whether tp is still fetched
        here as it was; a failed write is left to the append, which meets it again and handles it."""
        part = self.replica_manager.partitions.get(tp)
        state = self.partitions.get(tp)
        if part is None or state is None:
            return False
        starts = new_epoch_starts(records, part.latest_epoch, state.leader_epoch)
        if not starts:
            return True
        try:
            await part.run_on_storage(part.assign_epoch_starts, starts)
        except (OSError, Errors.KafkaStorageError):
            pass
        return self.partitions.get(tp) is state and not state.truncating

    async def _handle_out_of_range(self, client: BrokerClient, tp: TopicPartition) -> None:
        """Our LEO is outside the leader's log: below its start (retention) -> start over at its start."""
        part = self.replica_manager.partitions.get(tp)
        if part is None:
            return
        if part.log_end_offset > part.high_watermark:
            self.partitions[tp].truncating = True  # ahead of the leader: find the divergence point
            return
        leader_start = await self._leader_log_start(client, tp)
        if leader_start is not None and leader_start > part.log_end_offset:
            log.warning("follower %s-%d at %d is below the leader's log start %d: starting over there",
                        *tp, part.log_end_offset, leader_start)
            await part.run_on_storage(part.truncate_fully_and_start_at, leader_start)

    async def _leader_log_start(self, client: BrokerClient, tp: TopicPartition) -> int | None:
        from kafka.protocol.consumer import ListOffsetsRequest

        request = build(ListOffsetsRequest, replica_id=self.broker_id, isolation_level=0, topics=[
            {"name": tp[0], "partitions": [{"partition_index": tp[1], "current_leader_epoch": -1,
                                            "timestamp": -2}]}])
        response = await client.send(request, 7)
        for t in response.topics:
            for p in t.partitions:
                if not p.error_code:
                    return int(p.offset)
        return None


class ReplicaFetcherManager:
    """Keeps one ReplicaFetcher per source broker; the replica manager's FetcherManager."""

    def __init__(self, broker_id: int, replica_manager: ReplicaManager, config: BrokerConfig,
                 endpoint: EndpointLookup, security: ClientSecurity | None = None,
                 quota: ReplicationQuotaManager | None = None) -> None:
        self.broker_id = broker_id
        self.quota = quota
        self.security = security  # how to reach the leaders: the inter-broker listener's protocol
        self.replica_manager = replica_manager
        self.config = config
        self._endpoint = endpoint
        self.fetchers: dict[int, ReplicaFetcher] = {}

    def add_partitions(self, partitions: dict[TopicPartition, tuple[int, int]]) -> None:
        for tp, (leader, epoch) in partitions.items():
            for source, other in self.fetchers.items():
                if source != leader:
                    other.remove(tp)
            if leader < 0:
                continue  # no leader: nothing to fetch until one is elected
            fetcher = self.fetchers.get(leader)
            if fetcher is None:
                fetcher = self.fetchers[leader] = ReplicaFetcher(self.broker_id, leader, self.replica_manager,
                                                                 self.config, self._endpoint, self.security,
                                                                 self.quota)
                fetcher.start()
            fetcher.add(tp, epoch)

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            for fetcher in self.fetchers.values():
                fetcher.remove(tp)

    async def shutdown(self) -> None:
        await asyncio.gather(*(f.stop() for f in self.fetchers.values()), return_exceptions=True)
        self.fetchers.clear()
