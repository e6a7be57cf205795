"""ReplicaManager: owns this broker's partitions and serves produce and fetch.

Handlers never touch logs directly; they go through here, so replication can
later hook acks=all and follower fetches in one place.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import kafka.errors as Errors

from strom.broker.fetch_session import FetchManager, FetchSessionCache
from strom.broker.handlers import error_code_of, error_message_of
from strom.broker.log_dir_mover import ReplicaAlterLogDirsManager
from strom.broker.partition import READ_COMMITTED, READ_UNCOMMITTED, IsrChangeSender, Partition
from strom.broker.replica_selector import ClientMetadata, ReplicaSelector, ReplicaView, replica_selector_for
from strom.config import BrokerConfig
from strom.metadata.image import MetadataDelta
from strom.metadata.store import MetadataStore, PartitionState, TopicMetadata
from strom.metrics.topic_stats import BrokerTopicStats
from strom.protocol.record_batch import build_control_batch
from strom.server_common.purgatory import DelayedOperation, DelayedOperationPurgatory
from strom.server_common.types import TopicPartition
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager, close_offline_log, is_log_dir_failure
from strom.storage.partition_metadata import ensure_topic_configs, ensure_topic_id
from strom.storage.transaction_index import AbortedTxn
from strom.storage.validator import AppendOrigin

if TYPE_CHECKING:
    from strom.broker.quota.replication import ReplicationQuotaManager

log = logging.getLogger(__name__)

# A full disk fails every produce: log it once per partition per interval, not once per request.
STORAGE_ERROR_LOG_INTERVAL_S = 60.0
# LeaderAndIsr / StopReplica handle this many partitions between yields to the event loop, so
# thousands of partitions do not hold up every other connection (effects keep their order).
STATE_CHANGE_CHUNK = 128
# Append errors that refuse the records themselves: their bytes count as rejected (Kafka's BytesRejected).
_REJECTED_RECORDS = (Errors.MessageSizeTooLargeError, Errors.RecordListTooLargeError, Errors.CorruptRecordError,
                     Errors.InvalidRecordError, Errors.InvalidTimestampError)


@dataclass(slots=True)
class FetchPartitionRequest:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1  # Fetch v9+: fences a client with stale metadata; -1 checks nothing
    log_start_offset: int = -1  # Fetch v5+: a follower's log start offset (DeleteRecords waits for it)


@dataclass(slots=True)
class FetchPartitionResult:
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Any = None  # FetchDataInfo or None
    size: int = 0
    aborted_transactions: list[AbortedTxn] | None = None  # read_committed only
    preferred_read_replica: int = -1  # KIP-392: the replica the consumer should fetch from instead (no records)


@dataclass(slots=True)
class FetchParams:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int = READ_UNCOMMITTED  # 1 = read_committed: up to the LSO
    replica_id: int = -1  # a follower's broker id; -1 for consumers
    partitions: list[FetchPartitionRequest] = field(default_factory=list)
    waited_s: float = 0.0  # time parked in the fetch purgatory (the request's remote time)
    # Fetch v11+ from a consumer (KIP-392): its rack; followers serve such fetches, older ones only leaders.
    client_metadata: ClientMetadata | None = None

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


@dataclass(slots=True)
class ProducePartitionResult:
    index: int = -1  # the partition
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    required_offset: int = -1  # acks=all: the HW must reach this (last appended offset + 1)
    acks_pending: bool = False


ProduceResults = dict[TopicPartition, ProducePartitionResult]


@dataclass(slots=True)
class LeaderAndIsrPartition:
    """One partition of a LeaderAndIsr request, decoded: what the controller decided for it."""

    topic: str
    topic_id: uuid.UUID
    state: PartitionState
    is_new: bool = False


def _record_topic_configs(topic: TopicMetadata, partition_dirs: list[str]) -> None:
    """On a storage thread: partition dirs carry their topic's configs, so metadata can be checked and rebuilt."""
    for directory in partition_dirs:
        try:
            ensure_topic_configs(directory, topic.configs)
        except OSError as exc:
            log.warning("could not record the configs of %s in %s: %s (retried at the next start)",
                        topic.name, directory, exc)


class FetcherManager(Protocol):
    """Replica fetchers (cluster only): one per source broker, fetching its partitions for us."""

    def add_partitions(self, partitions: dict[TopicPartition, tuple[int, int]]) -> None:
        """tp -> (leader id, leader epoch): start (or move) fetching; truncation by epoch comes first."""
        ...

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None: ...


def check_replicated(part: Any, res: ProducePartitionResult) -> None:
    """acks=all: settle res once the HW passed its records (Kafka's checkEnoughReplicasReachOffset).

    min.insync.replicas is checked again here: the ISR may have shrunk while the records were
    replicated, and then they are durable on fewer brokers than the topic asked for.
    """
    if part is None:
        res.acks_pending = False
        res.error_code = Errors.UnknownTopicOrPartitionError.errno
    elif not part.is_leader:
        res.acks_pending = False
        res.error_code = Errors.NotLeaderForPartitionError.errno
    elif part.high_watermark >= res.required_offset:
        res.acks_pending = False
        if part.isr_size < part.min_insync_replicas:
            res.error_code = Errors.NotEnoughReplicasAfterAppendError.errno


class DelayedProduce(DelayedOperation):
    """An acks=all produce parked until every written partition's HW passed its records, or timeout_ms."""

    def __init__(self, timeout_ms: int, results: ProduceResults, lookup: Callable[[TopicPartition], Any],
                 future: asyncio.Future[ProduceResults], stats: BrokerTopicStats | None = None) -> None:
        super().__init__(timeout_ms)
        self._results = results
        self._lookup = lookup
        self._future = future
        self._stats = stats

    def try_complete(self) -> bool:
        pending = False
        for tp, res in self._results.items():
            if res.acks_pending:
                check_replicated(self._lookup(tp), res)
                pending = pending or res.acks_pending
        return False if pending else self.force_complete()

    def on_complete(self) -> None:
        for res in self._results.values():
            if res.acks_pending:  # expired: the followers did not catch up in time
                res.acks_pending = False
                res.error_code = Errors.RequestTimedOutError.errno
                if self._stats is not None:
                    self._stats.record_produce_error(res.error_code)
        if not self._future.done():
            self._future.set_result(self._results)


class DelayedFetch(DelayedOperation):
    """A long-poll fetch parked until min_bytes are available or max_wait_ms passes."""

    def __init__(self, manager: ReplicaManager, params: FetchParams, future: asyncio.Future[Any]) -> None:
        super().__init__(params.max_wait_ms)
        self._manager = manager
        self._params = params
        self._future = future
        self._result: list[FetchPartitionResult] | None = None

    def try_complete(self) -> bool:
        if not self._manager.has_new_data(self._params):
            return False  # the common case after an append elsewhere: no log read needed
        results, total = self._manager.read_from_local_log(self._params, record_follower=False)
        if total >= self._params.min_bytes or any(r.error_code or r.preferred_read_replica >= 0 for r in results):
            self._result = results
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self._result is None:
            self._result, _ = self._manager.read_from_local_log(self._params, record_follower=False)
        if not self._future.done():
            self._future.set_result(self._result)

    def on_expiration(self) -> None:
        pass


class ReplicaManager:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, metadata: MetadataStore,
                 fetch_purgatory: DelayedOperationPurgatory,
                 produce_purgatory: DelayedOperationPurgatory | None = None) -> None:
        self.config = config
        self.broker_id: int = config.get("broker.id")
        self.log_manager = log_manager
        self.metadata = metadata
        self.fetch_purgatory = fetch_purgatory
        # acks=all produces waiting for the ISR; on the fetch purgatory's timing wheel unless given its own.
        self.produce_purgatory = produce_purgatory or DelayedOperationPurgatory("Produce", fetch_purgatory.timer)
        # DeleteRecords waiting for every ISR replica's log start offset (Kafka's DelayedDeleteRecords).
        self.delete_records_purgatory = DelayedOperationPurgatory("DeleteRecords", fetch_purgatory.timer)
        # Incremental fetch sessions (KIP-227) of consumers and followers fetching from here.
        self.fetch_manager = FetchManager(FetchSessionCache(
            config.get("max.incremental.fetch.session.cache.slots"),
            config.get("min.incremental.fetch.session.eviction.ms")))
        self.partitions: dict[TopicPartition, Partition] = {}
        # KIP-392: picks a closer replica for consumers that name their rack; None = leaders serve them all.
        self.replica_selector: ReplicaSelector | None = replica_selector_for(config.get("replica.selector.class"))
        # Partitions whose log is in an offline log dir: they answer KAFKA_STORAGE_ERROR.
        self.offline_partitions: set[TopicPartition] = set()
        self._storage_error_logged: dict[TopicPartition, tuple[float, int]] = {}
        self.purge_due = False  # tombstones wait for a pending metadata write
        # Cluster mode only: the controller epoch we obey, fetchers, and the AlterPartition sender.
        self.controller_epoch = 0
        self.fetcher_manager: FetcherManager | None = None
        self.isr_change_sender: IsrChangeSender | None = None
        # Cluster only: a log dir that fails a write goes offline and this tells the controller (KIP-112).
        # Unset on a single node, where no other replica could take over: there a full disk answers
        # KAFKA_STORAGE_ERROR per request and writes resume as soon as space returns.
        self.log_dir_failure_listener: Callable[[str], None] | None = None
        # Metrics: per-topic traffic when the metrics endpoint is on; ISR changes this leader made.
        self.topic_stats: BrokerTopicStats | None = None
        self.isr_shrinks = 0
        self.isr_expands = 0
        # KIP-73: the leader side's replication quota (leader.replication.throttled.rate); None = never throttle.
        self.leader_replication_quota: ReplicationQuotaManager | None = None
        # LeaderAndIsr and StopReplica yield to the loop between chunks: one applies at a time, in order.
        self._state_change_lock = asyncio.Lock()
        self.log_dir_mover = ReplicaAlterLogDirsManager(self)  # AlterReplicaLogDirs moves (JBOD)

    # -- partition lifecycle ---------------------------------------------------
    def log_config_for(self, topic: TopicMetadata) -> LogConfig:
        return LogConfig.from_props({**self.config.topic_defaults(), **topic.configs})

    async def create_replica_logs(self, partitions: list[LeaderAndIsrPartition],
                                  topic_configs: Callable[[str], dict[str, str]]) -> None:
        """Create the logs of new replicas before the metadata records them (a single node's CreateTopics
        and CreatePartitions are all or nothing), on their log dirs' storage threads.

        On failure (no file descriptors, no space) the logs created so far are removed again and
        KafkaStorageError is raised; nothing of them remains. The replicas attach at the LeaderAndIsr
        that follows the metadata write, which finds these logs.
        """
        opened = await self._open_new_replica_logs(partitions, topic_configs)
        failed = next((r for r in opened.values() if isinstance(r, Errors.KafkaError)), None)
        if failed is None:
            return
        await self.remove_replica_logs(partitions)
        raise failed if isinstance(failed, Errors.KafkaStorageError) else Errors.KafkaStorageError(str(failed))

    async def remove_replica_logs(self, partitions: list[LeaderAndIsrPartition]) -> None:
        """Undo create_replica_logs for replicas the metadata never recorded (on a worker thread)."""
        by_topic: dict[str, list[int]] = {}
        for lp in partitions:
            if (lp.topic, lp.state.partition) not in self.partitions:
                by_topic.setdefault(lp.topic, []).append(lp.state.partition)
        for name, indexes in by_topic.items():
            await asyncio.get_running_loop().run_in_executor(None, self._remove_topic_logs, name, indexes)

    def _remove_topic_logs(self, name: str, partitions: list[int]) -> None:
        for p in partitions:  # close every file first: removing directories needs descriptors too
            plog = self.log_manager.get_log(name, p)
            if plog is not None:
                try:
                    plog.close(snapshot=False)
                except OSError as exc:
                    log.warning("could not close log %s-%d of a topic that was not created: %s", name, p, exc)
        for p in partitions:
            try:
                self.log_manager.delete_log(name, p)
            except OSError as exc:
                log.warning("could not remove log %s-%d of a topic that was not created: %s", name, p, exc)
        self.log_manager.remove_unattached_dirs(name, partitions)

    def tombstone_topic(self, topic: TopicMetadata) -> int:
        """First step of a deletion: tombstone and empty every hosted partition dir (frees the space).

        Returns how many partitions were tombstoned: any one of them records the deletion durably.
        """
        done = 0
        if self.topic_stats is not None:
            self.topic_stats.forget_topic(topic.name)
        for tp in sorted(tp for tp in set(self.partitions) | self.offline_partitions if tp[0] == topic.name):
            self.partitions.pop(tp, None)
            self.offline_partitions.discard(tp)
            self._storage_error_logged.pop(tp, None)
            try:
                if self.log_manager.delete_log(*tp, topic_id=topic.topic_id):
                    done += 1
            except OSError as exc:
                log.error("could not tombstone %s-%d: %s (an orphan log is removed at the next start)",
                          *tp, exc)
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
        return done

    async def purge_tombstones(self) -> None:
        """Drop tombstone dirs once the metadata durably forgot their topics (on the dirs' storage threads)."""
        pending = self.metadata.save_pending
        self.purge_due = pending  # the metadata write is retried later; purge again once it succeeds
        live = None if pending else [t.topic_id.hex for t in self.metadata.topics().values()]
        dirs = [d for d in self.log_manager.log_dirs if d not in self.log_manager.offline_log_dirs]
        await asyncio.gather(*(self.log_manager.run_in_dir(d, self.log_manager.purge_tombstones, live, d)
                               for d in dirs))

    def apply_delta(self, delta: MetadataDelta) -> None:
        """What a metadata delta means here besides leadership (which comes as LeaderAndIsr from the
        controller, the ZooKeeper one or a single node's LocalController): configs and deletion."""
        for name in delta.configs_changed:
            self.update_topic_configs(delta.topics[name])
        for topic in delta.deleted.values():
            self.tombstone_topic(topic)  # usually done already (StopReplica), before the metadata changed

    def update_topic_configs(self, topic: TopicMetadata) -> None:
        """New overrides apply at once; each partition dir records them on its storage thread."""
        cfg = self.log_config_for(topic)
        by_dir: dict[str, list[str]] = {}
        for (name, _), part in self.partitions.items():
            if name == topic.name:
                part.update_log_config(cfg)
                by_dir.setdefault(part.log_dir, []).append(part.partition_dir)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        for log_dir, dirs in by_dir.items():
            if loop is None:
                _record_topic_configs(topic, dirs)
            else:
                loop.run_in_executor(self.log_manager.executor_for(log_dir), _record_topic_configs, topic, dirs)

    def update_default_configs(self) -> None:
        """Broker-level topic defaults changed (a dynamic log.* key): every hosted log picks up the new
        defaults under its own topic's overrides, as Kafka's DynamicLogConfig does."""
        defaults = self.config.topic_defaults()
        self.log_manager.default_config = LogConfig.from_props(defaults)
        by_topic: dict[str, LogConfig] = {}
        for (name, _), part in self.partitions.items():
            cfg = by_topic.get(name)
            if cfg is None:
                cfg = by_topic[name] = LogConfig.from_props({**defaults, **self.metadata.topic_configs(name)})
            part.update_log_config(cfg)

    # -- leadership from the controller (LeaderAndIsr, StopReplica) -----------------------------------
    async def become_leader_or_follower(self, controller_epoch: int, partitions: list[LeaderAndIsrPartition],
                                        topic_configs: Callable[[str], dict[str, str]]
                                        ) -> dict[TopicPartition, int]:
        """Apply one LeaderAndIsr request; returns an error code per partition.

        A request from an older controller epoch is refused whole (STALE_CONTROLLER_EPOCH); a
        partition state older than ours is refused per partition. Leaders stop fetching and start
        a new epoch at their LEO; followers (re)start fetching from the new leader, truncating to
        the divergence point the leader's epochs give them first. Partitions are applied in
        chunks, yielding to the event loop in between; the new epochs' checkpoints are written
        on the log dirs' storage threads.
        """
        async with self._state_change_lock:
            if controller_epoch < self.controller_epoch:
                raise Errors.StaleControllerEpochError(
                    f"controller epoch {controller_epoch} is older than {self.controller_epoch}")
            self.controller_epoch = controller_epoch
            errors: dict[TopicPartition, int] = {}
            for i in range(0, len(partitions), STATE_CHANGE_CHUNK):
                if i:
                    await asyncio.sleep(0)
                await self._become_leader_or_follower(partitions[i:i + STATE_CHANGE_CHUNK], topic_configs, errors)
            return errors

    async def _become_leader_or_follower(self, partitions: list[LeaderAndIsrPartition],
                                         topic_configs: Callable[[str], dict[str, str]],
                                         errors: dict[TopicPartition, int]) -> None:
        """One chunk: check and create replicas, write new leaders' epochs off the loop, then apply."""
        created_logs = await self._open_new_replica_logs(partitions, topic_configs)
        accepted: list[tuple[LeaderAndIsrPartition, Partition, bool]] = []
        for lp in partitions:
            st = lp.state
            tp = (lp.topic, st.partition)
            errors[tp] = 0
            if self.broker_id not in st.replicas:
                continue
            part = self.partitions.get(tp)
            if part is None and tp in self.offline_partitions:
                errors[tp] = Errors.KafkaStorageError.errno  # the controller moves leadership and ISR off us
                continue
            if part is not None and (st.leader_epoch < part.leader_epoch or (
                    st.leader_epoch == part.leader_epoch and st.partition_epoch < part.partition_epoch)):
                log.info("ignoring stale state of %s-%d: leader epoch %d < %d", *tp, st.leader_epoch,
                         part.leader_epoch)
                errors[tp] = Errors.StaleControllerEpochError.errno
                continue
            created = part is None
            if part is None:
                opened = created_logs.get(tp)
                if opened is None or isinstance(opened, Errors.KafkaError):
                    exc = opened or Errors.KafkaStorageError(f"no log for {tp[0]}-{tp[1]}")
                    log.error("cannot create replica %s-%d: %s", *tp, exc)
                    errors[tp] = exc.errno
                    continue
                part = Partition(lp.topic, st.partition, lp.topic_id, st, opened, self.broker_id,
                                 self.isr_change_sender)  # registered once its epoch is written
            accepted.append((lp, part, created))
        failed = await self._assign_new_leader_epochs(accepted)
        leaders: list[TopicPartition] = []
        followers: dict[TopicPartition, tuple[int, int]] = {}
        for lp, part, created in accepted:
            st = lp.state
            tp = (lp.topic, st.partition)
            if created:
                if tp in self.offline_partitions or tp in self.partitions:  # its dir failed meanwhile
                    errors[tp] = Errors.KafkaStorageError.errno
                    continue
                self.partitions[tp] = part
            elif self.partitions.get(tp) is not part:  # its dir went offline while the epochs were written
                errors[tp] = Errors.KafkaStorageError.errno
                continue
            if tp in failed:
                errors[tp] = self._state_change_failed(tp, part, failed[tp])
                continue
            try:
                if created and part.is_leader:
                    part.make_leader()
                elif not created:
                    part.update_state(st)
            except (OSError, Errors.KafkaStorageError) as exc:  # the leader-epoch checkpoint, on a full disk
                errors[tp] = self._state_change_failed(tp, part, exc)
                continue
            if part.is_leader:
                leaders.append(tp)
            else:
                followers[tp] = (st.leader, st.leader_epoch)
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)  # a resigned leader fails its parked acks=all
            self.delete_records_purgatory.check_and_complete(tp)  # ... and its parked DeleteRecords
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partitions(leaders)
            if followers:
                self.fetcher_manager.add_partitions(followers)

    def _state_change_failed(self, tp: TopicPartition, part: Partition, exc: BaseException) -> int:
        """A storage error applying a replica's state: its dir goes offline (cluster) or the replica
        stops leading and fetching until the next LeaderAndIsr. Returns the error code to answer."""
        log.error("cannot apply the new state of %s-%d: %s", *tp, exc)
        if not self.maybe_take_log_dir_offline(tp, exc, part.log_dir):
            part.leader_id = -1  # neither leader nor follower until the next LeaderAndIsr
            if self.fetcher_manager is not None:
                self.fetcher_manager.remove_partitions([tp])
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
        return Errors.KafkaStorageError.errno

    async def _assign_new_leader_epochs(self, accepted: list[tuple[LeaderAndIsrPartition, Partition, bool]]
                                        ) -> dict[TopicPartition, BaseException]:
        """Write the leader-epoch checkpoint of every replica about to lead a new epoch, on its log dir's
        storage thread (a file rename, not fsynced: ADR 0047), before the state is applied on the loop, so
        make_leader finds the epoch assigned. Their fetchers stop first: no follower append may land
        between. Returns the partitions whose write failed."""
        todo: dict[str, list[tuple[TopicPartition, Partition, int]]] = {}
        for lp, part, created in accepted:
            st = lp.state
            if st.leader != self.broker_id or not (created or not part.is_leader or
                                                   st.leader_epoch != part.leader_epoch):
                continue
            if st.leader_epoch >= 0 and st.leader_epoch != part.latest_epoch:
                todo.setdefault(part.log_dir, []).append(((lp.topic, st.partition), part, st.leader_epoch))
        if not todo:
            return {}
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partitions([tp for items in todo.values() for tp, _, _ in items])

        def assign_one(item: tuple[TopicPartition, Partition, int]) -> tuple[TopicPartition, BaseException | None]:
            tp, part, epoch = item
            try:
                part.assign_epoch_start_offset(epoch)
            except (OSError, Errors.KafkaStorageError) as exc:
                return tp, exc
            return tp, None

        def assign(items: list[tuple[TopicPartition, Partition, int]]) -> dict[TopicPartition, BaseException]:
            # A file write and rename per partition: several in flight at once (see LogManager.fan_out).
            return {tp: exc for tp, exc in self.log_manager.fan_out(assign_one, items) if exc is not None}

        failed: dict[TopicPartition, BaseException] = {}
        for result in await asyncio.gather(*(self.log_manager.run_in_dir(d, assign, items)
                                             for d, items in todo.items())):
            failed.update(result)
        return failed

    async def _open_new_replica_logs(self, partitions: list[LeaderAndIsrPartition],
                                     topic_configs: Callable[[str], dict[str, str]]
                                     ) -> dict[TopicPartition, Log | Errors.KafkaError]:
        """Open or create the logs of replicas new to this broker, each on its log dir's storage thread
        (a partition dir, its segment and index files, its topic id file); returns a log or the error."""
        new = [lp for lp in partitions if self.broker_id in lp.state.replicas
               and (lp.topic, lp.state.partition) not in self.partitions
               and (lp.topic, lp.state.partition) not in self.offline_partitions]
        if not new:
            return {}
        plan = self.log_manager.plan_log_dirs((lp.topic, lp.state.partition) for lp in new)
        by_dir: dict[str, list[tuple[LeaderAndIsrPartition, dict[str, str]]]] = {}
        for lp in new:
            by_dir.setdefault(plan[(lp.topic, lp.state.partition)], []).append((lp, topic_configs(lp.topic)))
        opened: dict[TopicPartition, Log | Errors.KafkaError] = {}
        for result in await asyncio.gather(*(self.log_manager.run_in_dir(d, self._open_replica_logs, d, items)
                                             for d, items in by_dir.items())):
            opened.update(result)
        return opened

    def _open_replica_logs(self, log_dir: str, items: list[tuple[LeaderAndIsrPartition, dict[str, str]]]
                           ) -> dict[TopicPartition, Log | Errors.KafkaError]:
        """On a log dir's storage thread: get_or_create_log and record the topic id and configs."""
        out: dict[TopicPartition, Log | Errors.KafkaError] = {}
        for lp, configs in items:
            tp = (lp.topic, lp.state.partition)
            log_config = LogConfig.from_props({**self.config.topic_defaults(), **configs})
            try:
                plog = self.log_manager.get_or_create_log(lp.topic, lp.state.partition, log_config,
                                                          is_new=lp.is_new, log_dir=log_dir)
            except Errors.KafkaError as exc:
                out[tp] = exc
                continue
            try:
                ensure_topic_id(plog.directory, lp.topic_id)
                ensure_topic_configs(plog.directory, configs)
            except OSError as exc:
                log.warning("could not record the topic id of %s-%d: %s", *tp, exc)
            out[tp] = plog
        return out


    async def stop_replicas(self, controller_epoch: int, partitions: dict[TopicPartition, bool]
                            ) -> dict[TopicPartition, int]:
        """StopReplica: stop fetching; with delete=True tombstone the replica's log (topic deletion).

        The replicas leave this broker's view on the loop at once; closing, renaming and emptying
        their logs runs on their log dirs' storage threads, in chunks between yields to the loop.
        """
        async with self._state_change_lock:
            if controller_epoch < self.controller_epoch:
                raise Errors.StaleControllerEpochError(
                    f"controller epoch {controller_epoch} is older than {self.controller_epoch}")
            self.controller_epoch = controller_epoch
            if self.fetcher_manager is not None:
                self.fetcher_manager.remove_partitions(list(partitions))
            errors: dict[TopicPartition, int] = {}
            items = list(partitions.items())
            for i in range(0, len(items), STATE_CHANGE_CHUNK):
                if i:
                    await asyncio.sleep(0)
                doomed: dict[str, list[tuple[TopicPartition, Partition]]] = {}
                for tp, delete in items[i:i + STATE_CHANGE_CHUNK]:
                    errors[tp] = 0
                    if not delete:
                        part = self.partitions.get(tp)
                        if part is not None:
                            part.leader_id = -1  # neither leader nor fetching until the next LeaderAndIsr
                        continue
                    part = self.partitions.pop(tp, None)
                    self.offline_partitions.discard(tp)
                    if part is not None:
                        doomed.setdefault(part.log_dir, []).append((tp, part))
                    self.fetch_purgatory.check_and_complete(tp)
                    self.produce_purgatory.check_and_complete(tp)
                results = await asyncio.gather(*(self.log_manager.run_in_dir(d, self._delete_replica_logs, parts)
                                                 for d, parts in doomed.items()))
                for failed in results:
                    errors.update(failed)
            return errors

    def _delete_replica_logs(self, parts: list[tuple[TopicPartition, Partition]]) -> dict[TopicPartition, int]:
        """On a log dir's storage thread: tombstone the logs of deleted replicas; returns the failures."""
        failed: dict[TopicPartition, int] = {}
        for tp, part in parts:
            try:
                self.log_manager.delete_log(*tp, topic_id=part.topic_id)
            except OSError as exc:
                log.error("could not delete replica %s-%d: %s", *tp, exc)
                failed[tp] = Errors.KafkaStorageError.errno
        return failed

    def maybe_shrink_isr(self) -> None:
        """Periodic (replica.lag.time.max.ms / 2): leaders drop followers that fell behind."""
        lag = self.config.get("replica.lag.time.max.ms")
        for tp, part in list(self.partitions.items()):
            if part.is_leader and part.maybe_shrink_isr(lag):
                log.info("shrinking the ISR of %s-%d from %s (followers behind for over %d ms)", *tp, part.isr, lag)

    def on_isr_committed(self, tp: TopicPartition, leader_epoch: int, isr: list[int] | None,
                         partition_epoch: int) -> None:
        part = self.partitions.get(tp)
        before = len(part.isr) if part is not None else 0
        if part is not None and part.on_isr_committed(leader_epoch, isr, partition_epoch):
            self.fetch_purgatory.check_and_complete(tp)
        if part is not None and len(part.isr) != before:
            if len(part.isr) < before:
                self.isr_shrinks += 1
            else:
                self.isr_expands += 1
        self.produce_purgatory.check_and_complete(tp)

    def append_as_follower(self, tp: TopicPartition, records: Any, leader_high_watermark: int,
                           leader_log_start_offset: int) -> None:
        """What a replica fetcher got from the leader: append it, then follow the leader's HW."""
        part = self.partitions.get(tp)
        if part is None or part.is_leader:
            return  # the leadership moved while the fetch was in flight
        old_hw = part.high_watermark
        try:
            part.append_records_as_follower(records, leader_high_watermark, leader_log_start_offset)
        except (OSError, Errors.KafkaStorageError) as exc:
            self._log_storage_error(tp, exc, "appending as follower to")
            if self.maybe_take_log_dir_offline(tp, exc, part.log_dir):
                return  # no longer fetched: the controller drops us from the ISR
            raise
        if self.topic_stats is not None and records:
            self.topic_stats.record_replication_in(len(records))
        if part.high_watermark != old_hw:
            self.fetch_purgatory.check_and_complete(tp)

    # -- log dir failure (KIP-112) -----------------------------------------------------------------------
    def maybe_take_log_dir_offline(self, tp: TopicPartition, exc: BaseException, log_dir: str) -> bool:
        """In a cluster, a write that failed for the dir's sake takes the whole dir offline; returns
        whether tp's dir is offline now (so the caller stops retrying it)."""
        if self.log_dir_failure_listener is None or not is_log_dir_failure(exc):
            return tp in self.offline_partitions
        if os.path.abspath(log_dir) not in self.log_manager.offline_log_dirs:
            self.handle_log_dir_failure(log_dir, exc)
        return True

    def handle_log_dir_failure(self, log_dir: str, exc: BaseException) -> None:
        """Kafka's handleLogDirFailure: every replica in the dir goes offline here at once.

        Fetchers drop them, parked produces and fetches on them are answered, the controller is told
        (it moves leadership away and shrinks the ISRs), and the logs are closed off the event loop.
        The data stays on disk untouched: a restart with the dir usable again serves it as before.
        """
        log_dir = os.path.abspath(log_dir)
        if log_dir in self.log_manager.offline_log_dirs:
            return
        dropped = self.log_manager.take_offline(log_dir, exc)
        gone = [tp for tp, part in self.partitions.items() if part.log_dir == log_dir or tp in dropped]
        for tp in gone:
            self.partitions.pop(tp, None)
            self.offline_partitions.add(tp)
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partitions(gone)
        for tp in gone:
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
        if dropped:
            log.error("log dir %s failed: %d replicas are offline on broker %d: %s", log_dir, len(gone),
                      self.broker_id, ", ".join(f"{t}-{p}" for t, p in sorted(gone)))
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            for lg in dropped.values():
                if loop is None:
                    close_offline_log(lg)
                else:
                    loop.run_in_executor(self.log_manager.executor_for(log_dir), close_offline_log, lg)
        if self.log_dir_failure_listener is not None:
            self.log_dir_failure_listener(log_dir)

    async def recover_offline_log_dirs(self) -> list[str]:
        """Bring back every dir that failed while serving and takes writes again (the operator's call,
        see KafkaServer.request_log_dir_recovery); returns those now online. Their replicas attach again
        at the controller's LeaderAndIsr, which the log dir event asks for, and catch up from their
        leaders. (A single node never takes a dir offline while serving: its dirs come back at a restart.)"""
        loop = asyncio.get_running_loop()
        recovered = []
        for log_dir in sorted(self.log_manager.offline_log_dirs):
            configs = {name: self.log_config_for(t) for name, t in self.metadata.topics().items()}
            try:
                loaded = await loop.run_in_executor(None, self.log_manager.bring_online, log_dir, configs)
            except (OSError, Errors.KafkaStorageError) as exc:
                log.warning("log dir %s stays offline: %s", log_dir, exc)
                continue
            recovered.append(log_dir)
            self.offline_partitions.difference_update(loaded)
            if not self.log_manager.offline_log_dirs:
                self.offline_partitions.clear()
            if self.log_dir_failure_listener is not None:
                self.log_dir_failure_listener(log_dir)  # the controller asks again which replicas are offline
        return recovered

    def get_partition(self, topic: str, partition: int) -> Partition:
        part = self.partitions.get((topic, partition))
        if part is None:
            if (topic, partition) in self.offline_partitions:
                raise Errors.KafkaStorageError(f"{topic}-{partition} is in an offline log dir")
            raise Errors.UnknownTopicOrPartitionError(f"{topic}-{partition} is not hosted here")
        return part

    def partitions_of(self, topic: str) -> Iterable[Partition]:
        return (p for (t, _), p in self.partitions.items() if t == topic)

    @property
    def offline_log_dirs(self) -> set[str]:
        return self.log_manager.offline_log_dirs

    # -- produce ---------------------------------------------------------------
    def append_records(self, entries: dict[TopicPartition, Any], required_acks: int, timeout_ms: int = 30_000,
                       origin: AppendOrigin = AppendOrigin.CLIENT,
                       ) -> tuple[ProduceResults, asyncio.Future[ProduceResults] | None]:
        """Append a whole produce request; returns (per-partition results, None or what to await).

        Phase 1, the local append, is done when this returns. Phase 2 waits for the ISR: with
        acks=all and followers still behind, the second item is a future completed by a
        DelayedProduce; when nothing waits (acks 0/1, or the ISR is the leader alone) it is None,
        so the common path allocates no future. The results of a waiting request are final only
        once its future is done.
        """
        results: ProduceResults = {}
        waiting = False
        partitions = self.partitions
        stats = self.topic_stats
        for tp, records in entries.items():
            res = results[tp] = ProducePartitionResult(tp[1])
            part = partitions.get(tp)
            try:
                if part is None:
                    part = self.get_partition(*tp)  # raises the error to answer
                info = self._append_to_local_log(part, tp, records, required_acks, origin)
            except Exception as exc:
                res.error_code = error_code_of(exc)
                res.error_message = error_message_of(exc)
                if stats is not None:
                    stats.record_failed_append(tp[0], len(records) if records is not None else 0, res.error_code,
                                               isinstance(exc, _REJECTED_RECORDS))
                continue
            if stats is not None:
                stats.record_append(tp[0], len(records), info)
            res.base_offset = info.first_offset
            res.log_append_time_ms = info.log_append_time_ms
            res.log_start_offset = info.log_start_offset
            if required_acks == -1:
                res.required_offset = info.last_offset + 1
                res.acks_pending = True
                check_replicated(part, res)
                waiting = waiting or res.acks_pending
        if not waiting:
            return results, None
        future: asyncio.Future[ProduceResults] = asyncio.get_running_loop().create_future()
        op = DelayedProduce(timeout_ms, results, self.partitions.get, future, stats)
        self.produce_purgatory.try_complete_else_watch(op, [tp for tp, r in results.items() if r.acks_pending])
        return results, future

    def _append_to_local_log(self, part: Partition, tp: TopicPartition, records: Any, required_acks: int,
                             origin: AppendOrigin = AppendOrigin.CLIENT) -> Any:
        if records is None:
            raise Errors.InvalidRecordError("no records in produce request")
        try:
            info = part.append_records_to_leader(records, required_acks, origin)
        except OSError as exc:
            self._log_storage_error(tp, exc)
            self.maybe_take_log_dir_offline(tp, exc, part.log_dir)
            raise Errors.KafkaStorageError(f"error appending to {tp[0]}-{tp[1]}: {exc}") from exc
        except Errors.KafkaStorageError as exc:
            self._log_storage_error(tp, exc)
            self.maybe_take_log_dir_offline(tp, exc, part.log_dir)
            raise
        if not info.duplicate:
            self.fetch_purgatory.check_and_complete(tp)
        return info

    async def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                commit: bool, partitions: list[TopicPartition], timeout_ms: int = 30_000
                                ) -> dict[TopicPartition, int]:
        """WriteTxnMarkers on this broker: a COMMIT or ABORT marker on each partition, written as a
        coordinator's acks=all append (Kafka's rules, min.insync.replicas included: the coordinator
        retries what fails), then an error code per partition (0 = written and replicated)."""
        marker = build_control_batch(producer_id, producer_epoch, coordinator_epoch, commit, int(time.time() * 1000))
        results, replicated = self.append_records(dict.fromkeys(partitions, marker), -1, timeout_ms,
                                                  origin=AppendOrigin.COORDINATOR)
        if replicated is not None:
            results = await replicated
        return {tp: res.error_code for tp, res in results.items()}

    def _log_storage_error(self, tp: TopicPartition, exc: BaseException, doing: str = "produce to") -> None:
        """ERROR once per partition per interval; the count of the suppressed ones comes with the next."""
        now = time.monotonic()
        last, suppressed = self._storage_error_logged.get(tp, (float("-inf"), 0))
        if now - last < STORAGE_ERROR_LOG_INTERVAL_S:
            self._storage_error_logged[tp] = (last, suppressed + 1)
            return
        self._storage_error_logged[tp] = (now, 0)
        more = f" ({suppressed} more since the last report)" if suppressed else ""
        log.error("storage error on %s %s-%d: %s%s; answering KAFKA_STORAGE_ERROR", doing, *tp, exc, more)

    # -- fetch -----------------------------------------------------------------
    def _on_high_watermark_moved(self, tp: TopicPartition) -> None:
        """acks=all produces and consumer long polls waiting for this HW may complete now.

        Scheduled, not called: this runs inside a follower's fetch, possibly from the fetch
        purgatory itself, which must not be re-entered."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.produce_purgatory.check_and_complete(tp)
            return
        loop.call_soon(self.produce_purgatory.check_and_complete, tp)
        loop.call_soon(self.fetch_purgatory.check_and_complete, tp)

    def has_new_data(self, params: FetchParams) -> bool:
        """Whether any watched partition moved past its fetch offset (or vanished, or changed leader epoch)."""
        for req in params.partitions:
            part = self.partitions.get((req.topic, req.partition))
            if part is None:
                return True
            if req.current_leader_epoch >= 0 and req.current_leader_epoch != part.leader_epoch:
                return True  # a leader change fences the parked fetch: answer it now
            if part.fetch_offset_limit(params.isolation_level, params.replica_id) > req.fetch_offset or req.fetch_offset < part.log_start_offset:
                return True
        return False

    def read_from_local_log(self, params: FetchParams, record_follower: bool = True
                            ) -> tuple[list[FetchPartitionResult], int]:
        """Read every requested partition. A follower's fetch offset is its LEO: recorded when the
        request arrives (record_follower), not again when a parked fetch re-reads."""
        results: list[FetchPartitionResult] = []
        remaining = params.max_bytes
        total = 0
        for req in params.partitions:
            res = FetchPartitionResult()
            try:
                part = self._fetch_partition(params, req)
                part.check_leader_epoch(req.current_leader_epoch)
                if params.replica_id >= 0:
                    if not part.is_leader:  # also on a re-read: a resigned leader's suffix must not spread
                        raise Errors.NotLeaderForPartitionError(
                            f"broker {self.broker_id} is not the leader of {req.topic}-{req.partition}")
                    if record_follower and part.update_follower_fetch_state(params.replica_id, req.fetch_offset):
                        self._on_high_watermark_moved((req.topic, req.partition))
                    if record_follower and part.update_follower_log_start(params.replica_id, req.log_start_offset):
                        asyncio.get_running_loop().call_soon(self.delete_records_purgatory.check_and_complete,
                                                             (req.topic, req.partition))
                res.high_watermark = part.high_watermark
                res.last_stable_offset = part.last_stable_offset
                res.log_start_offset = part.log_start_offset
                if params.client_metadata is not None and self.replica_selector is not None:
                    res.preferred_read_replica = self._preferred_read_replica(part, params.client_metadata,
                                                                              req.fetch_offset)
                    if res.preferred_read_replica >= 0:
                        results.append(res)  # the consumer reads there: no records from here (as Kafka)
                        continue
                limit = min(req.max_bytes, remaining)
                # At its limit (a caught-up follower, a consumer at the HW) a partition has nothing to read:
                # idle partitions of a fetch session cost no log read.
                caught_up = req.fetch_offset == part.fetch_offset_limit(params.isolation_level, params.replica_id)
                if not caught_up and params.replica_id >= 0 and self._leader_throttled(part, params.replica_id):
                    caught_up = True  # held back: answered with no records, as Kafka does
                if (limit > 0 or total == 0) and not caught_up:
                    data = part.read_records(req.fetch_offset, max(limit, 0), params.isolation_level,
                                             min_one_message=(total == 0), replica_id=params.replica_id)
                    res.records = data
                    res.size = data.size
                    if params.isolation_level == READ_COMMITTED and params.replica_id < 0 and data.size:
                        res.aborted_transactions = part.collect_aborted_transactions(
                            req.fetch_offset, res.last_stable_offset)
                    remaining -= data.size
                    total += data.size
            except Errors.KafkaError as exc:
                res.error_code = exc.errno
            results.append(res)
        return results, total

    def _fetch_partition(self, params: FetchParams, req: FetchPartitionRequest) -> Partition:
        """The replica a fetch reads. Followers fetch from leaders only; consumers too before Fetch v11,
        while from v11 a follower serves them (KIP-392). A broker that is neither (a replica being
        removed, or one StopReplica halted) answers NOT_LEADER_OR_FOLLOWER, so the consumer goes back
        to the leader."""
        if params.replica_id >= 0:
            return self.get_partition(req.topic, req.partition)
        part = self.partitions.get((req.topic, req.partition))
        if part is None:
            meta = self.metadata.topic(req.topic)
            if (req.topic, req.partition) not in self.offline_partitions and meta is not None \
                    and req.partition in meta.partitions:
                raise Errors.NotLeaderForPartitionError(
                    f"broker {self.broker_id} has no replica of {req.topic}-{req.partition}")
            return self.get_partition(req.topic, req.partition)
        if not part.is_leader and (params.client_metadata is None or part.leader_id < 0
                                   or self.broker_id not in part.replicas):
            raise Errors.NotLeaderForPartitionError(
                f"broker {self.broker_id} is not the leader of {req.topic}-{req.partition}")
        return part

    def _preferred_read_replica(self, part: Partition, client: ClientMetadata, fetch_offset: int) -> int:
        """The leader's pick for a consumer (KIP-392): another replica's id, or -1 to read here."""
        if not part.is_leader or self.replica_selector is None or not (
                part.log_start_offset <= fetch_offset <= part.log_end_offset):
            return -1  # an offset out of range is answered here, so the consumer resets it with the leader
        brokers = self.metadata.image.brokers

        def rack_if_reachable(broker_id: int) -> tuple[bool, str | None]:
            info = brokers.get(broker_id)
            if info is None or (client.listener_name is not None and info.endpoint(client.listener_name) is None):
                return False, None
            return True, info.rack

        _, leader_rack = rack_if_reachable(self.broker_id)
        leader = ReplicaView(self.broker_id, leader_rack, part.log_end_offset, 0)
        candidates = []
        for broker_id, leo, since_caught_up in part.read_replica_candidates(fetch_offset):
            alive, rack = rack_if_reachable(broker_id)
            if alive:
                candidates.append(ReplicaView(broker_id, rack, leo, since_caught_up))
        chosen = self.replica_selector.select(client, leader, candidates + [leader])
        return -1 if chosen is None or chosen.broker_id == self.broker_id else chosen.broker_id

    async def fetch_messages(self, params: FetchParams) -> list[FetchPartitionResult]:
        results, total = self.read_from_local_log(params)
        if (params.max_wait_ms <= 0 or total >= params.min_bytes or not params.partitions
                or any(r.error_code or r.preferred_read_replica >= 0 for r in results)):
            if self.topic_stats is not None:
                self.topic_stats.record_fetch(params, results)
            self._record_leader_throttled_bytes(params, results)
            return results
        future: asyncio.Future[list[FetchPartitionResult]] = asyncio.get_running_loop().create_future()
        op = DelayedFetch(self, params, future)
        keys = [(r.topic, r.partition) for r in params.partitions]
        parked = time.monotonic()
        self.fetch_purgatory.try_complete_else_watch(op, keys)
        results = await future
        params.waited_s = time.monotonic() - parked
        if self.topic_stats is not None:
            self.topic_stats.record_fetch(params, results)
        self._record_leader_throttled_bytes(params, results)
        return results

    def _leader_throttled(self, part: Partition, replica_id: int) -> bool:
        """KIP-73 on the leader: hold a follower's partition back while the leader's rate is over its bound,
        the partition is leader-throttled here and that follower is out of the ISR."""
        quota = self.leader_replication_quota
        if quota is None or replica_id in part.isr:
            return False
        if quota.is_throttled(part.log_config.leader_replication_throttled_replicas, part.index) \
                and quota.is_quota_exceeded():
            quota.held_back()
            return True
        return False

    def _record_leader_throttled_bytes(self, params: FetchParams, results: list[FetchPartitionResult]) -> None:
        """Bytes sent for leader-throttled partitions count against the leader's rate, ISR or not (Kafka)."""
        quota = self.leader_replication_quota
        if quota is None or not params.is_from_follower:
            return
        size = 0
        for req, res in zip(params.partitions, results, strict=False):
            if res.size:
                part = self.partitions.get((req.topic, req.partition))
                if part is not None and quota.is_throttled(part.log_config.leader_replication_throttled_replicas,
                                                           part.index):
                    size += res.size
        quota.record(size)
