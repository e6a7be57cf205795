"""KafkaServer: wires the broker's services together and runs their housekeeping.

Start-up order follows Kafka: load logs (recovery), open the metadata store,
attach partitions, then open the listener. Shutdown reverses it and writes
checkpoints plus a clean-shutdown marker so the next start skips recovery.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from strom.broker import handlers as _handlers_pkg  # noqa: F401 - ensure package import
from strom.broker.admin_manager import AdminManager
from strom.broker.apis import KafkaApis
from strom.broker.dynamic_config import DynamicBrokerConfig
from strom.broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_partition,
    alter_partition_reassignments,
    alter_replica_log_dirs,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    controlled_shutdown,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leader_and_isr,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    stop_replica,
    sync_group,
    txn_offset_commit,
    update_metadata,
    write_txn_markers,
)
from strom.broker.network import SocketServer
from strom.broker.producer_id_manager import ProducerIdManager
from strom.broker.quota.manager import QuotaManagers
from strom.broker.quota.replication import ReplicationQuotas
from strom.broker.replica_manager import ReplicaManager
from strom.broker.request import BrokerServices, ClusterLink
from strom.client.broker_client import BrokerClient
from strom.config import TOPIC_CONFIGS, BrokerConfig
from strom.config.metrics_listener import parse_metrics_listener
from strom.controller.controller import KafkaController
from strom.coordinator.common import sync_ownership
from strom.coordinator.group.group_coordinator import GroupCoordinator
from strom.coordinator.group.startup import create_group_coordinator
from strom.coordinator.transaction.startup import create_transaction_coordinator
from strom.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from strom.metadata.embedded import open_metadata_store
from strom.metadata.local_controller import LocalController
from strom.metadata.publisher import MetadataPublisher
from strom.metadata.store import BrokerInfo, MetadataStore
from strom.metadata.zk.kafka_zk_client import KafkaZkClient, SessionState
from strom.metadata.zk_metadata import ZkMetadataStore
from strom.metrics.collector import BrokerCollector, BrokerState
from strom.metrics.endpoint import MetricsEndpoint
from strom.metrics.request_metrics import RequestMetrics
from strom.metrics.topic_stats import BrokerTopicStats
from strom.protocol.inter_broker import ControlledShutdownRequest
from strom.replication.alter_partition_manager import AlterPartitionManager
from strom.replication.replica_fetcher import ReplicaFetcherManager
from strom.security.authorizer import AclAuthorizer, create_authorizer
from strom.security.client_security import ClientSecurity
from strom.server_common.lifecycle import Lifecycle
from strom.server_common.purgatory import DelayedOperationPurgatory, TimerDriver
from strom.server_common.stall_detector import LoopStallDetector
from strom.server_common.timing_wheel import Timer
from strom.storage.cleaner import LogCleaner, cleaner_backoff_ms
from strom.storage.log_config import LogConfig
from strom.storage.log_dirs import (
    LogDirError,
    LogDirLock,
    MetaProperties,
    check_identities,
    lock_log_dirs,
    write_meta_properties,
)
from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)

METADATA_RETRY_INTERVAL_MS = 5_000
# Test hook: log loading (recovery) waits while the file this names exists, so a test can see the
# broker during recovery (/readyz 503) deterministically. Unset in production.
HOLD_RECOVERY_ENV = "STROM_TEST_HOLD_LOG_RECOVERY"

# Broker keys that feed topic defaults: a dynamic change of one reconfigures every hosted log.
_TOPIC_DEFAULT_KEYS = frozenset(key for d in TOPIC_CONFIGS.values() for key in d.synonyms)

HANDLER_MODULES = [
    api_versions, metadata, produce, fetch, list_offsets, create_topics, delete_topics, create_partitions,
    describe_configs, alter_configs, incremental_alter_configs, describe_cluster, delete_records,
    describe_log_dirs, alter_replica_log_dirs, init_producer_id, offset_for_leader_epoch, describe_producers,
    # client quotas
    describe_client_quotas, alter_client_quotas,
    # group coordinator
    find_coordinator, join_group, sync_group, heartbeat, leave_group, offset_commit, offset_fetch,
    offset_delete, list_groups, describe_groups, delete_groups, txn_offset_commit,
    # transaction coordinator
    add_partitions_to_txn, add_offsets_to_txn, end_txn, write_txn_markers, describe_transactions, list_transactions,
    # security
    sasl_handshake, sasl_authenticate, describe_user_scram_credentials, alter_user_scram_credentials,
    # authorization (ACLs)
    describe_acls, create_acls, delete_acls,
    # partition reassignment (the controller answers; a single node answers for itself)
    alter_partition_reassignments, list_partition_reassignments,
]


# Inter-broker APIs, registered only when the broker is part of a ZooKeeper cluster.
CLUSTER_HANDLER_MODULES = [leader_and_isr, update_metadata, stop_replica, controlled_shutdown, alter_partition,
                           elect_leaders]


class KafkaServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id: int = config.get("broker.id")
        self.apis = KafkaApis()
        for module in HANDLER_MODULES:
            self.apis.register_module(module)
        if "consumer" in config.get("group.coordinator.rebalance.protocols"):
            self.apis.register_module(consumer_group_heartbeat)  # KIP-848 consumer groups
            self.apis.register_module(consumer_group_describe)
        self.log_manager: LogManager
        self.metadata: MetadataStore
        self.replica_manager: ReplicaManager
        self.admin_manager: AdminManager
        self.producer_id_manager: ProducerIdManager
        self.socket_server: SocketServer
        self.services: BrokerServices  # what handlers see, instead of this object
        self.publisher: MetadataPublisher  # metadata changes -> replica manager, then coordinators
        self._timer_driver: TimerDriver
        self._tasks: list[asyncio.Task[Any]] = []
        self._lifecycle = Lifecycle()  # stop steps, registered as components start
        self._log_dir_locks: list[LogDirLock] = []
        self._stopped = asyncio.Event()
        self._loop = asyncio.get_event_loop()
        self.zk: KafkaZkClient
        self.controller: KafkaController
        self.fetcher_manager: ReplicaFetcherManager
        self.alter_partition_manager: AlterPartitionManager
        self.dynamic_config: DynamicBrokerConfig
        self.authorizer: AclAuthorizer | None = None
        # How this broker reaches the others: the inter-broker listener's protocol, mechanism and identity.
        self.inter_broker_security = ClientSecurity()
        self.quotas: QuotaManagers
        # Metrics and health (metrics.listener): per-request counters only when the endpoint is on.
        metrics_address = parse_metrics_listener(config.get("metrics.listener"))
        self.request_metrics = RequestMetrics() if metrics_address else None
        self.metrics_endpoint = (MetricsEndpoint(*metrics_address, BrokerCollector(self), lambda: self.ready)
                                 if metrics_address else None)
        self.broker_state = BrokerState.NOT_RUNNING
        self.ready = False  # listeners open and logs recovered (/readyz)
        self.stall_detector = LoopStallDetector(config.get("strom.loop.stall.warn.ms"))

    @property
    def port(self) -> int:
        """The bound port of the first listener (tests and the start-up banner)."""
        return self.socket_server.port

    async def startup(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        self.broker_state = BrokerState.STARTING
        self.stall_detector.start()  # first: a stall during start-up is reported too
        self._lifecycle.on_stop("stall detector", self.stall_detector.stop)
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.start()  # first: /healthz answers during a long recovery
            self._lifecycle.on_stop("metrics endpoint", self.metrics_endpoint.stop)
        self._lifecycle.on_stop("state", functools.partial(self._set_state, BrokerState.NOT_RUNNING))
        log_dirs, failed_dirs = cfg.check_log_dirs()
        # Before anything reads or writes a log dir: one broker per dir, held until the process exits.
        self._log_dir_locks = lock_log_dirs(log_dirs)
        self.log_manager = LogManager(cfg.log_dirs(), cfg.topic_defaults())
        for log_dir, reason in failed_dirs.items():
            self.log_manager.mark_offline(log_dir, f"unusable ({reason})")
        if self.clustered:
            self.inter_broker_security = ClientSecurity.inter_broker(cfg)  # a bad setting stops the start here
            topic_configs, expected = await self._open_zookeeper(log_dirs)
        else:
            self.metadata = embedded = open_metadata_store(log_dirs, self.broker_id, cfg.get("cluster.id") or None)
            self._stop_with_metadata()
            self._load_dynamic_config()
            self._complete_interrupted_deletions()
            topic_configs = {
                name: LogConfig.from_props({**cfg.topic_defaults(), **t.configs})
                for name, t in self.metadata.topics().items()
            }
            expected = {(t.name, p): t.topic_id for t in self.metadata.topics().values()
                        for p, state in t.partitions.items() if self.broker_id in state.replicas}
        self.broker_state = BrokerState.RECOVERY
        await _hold_for_test(os.environ.get(HOLD_RECOVERY_ENV))
        await loop.run_in_executor(None, self.log_manager.load_logs, topic_configs, None, expected)
        log.info("loaded logs in %.2f s", time.monotonic() - started)
        self.broker_state = BrokerState.STARTING
        timer = Timer(tick_ms=1, wheel_size=20)
        self._timer_driver = TimerDriver(timer, loop)
        self._timer_driver.start()
        self._lifecycle.on_stop("timer", self._timer_driver.stop)
        fetch_purgatory = DelayedOperationPurgatory("Fetch", timer)
        produce_purgatory = DelayedOperationPurgatory("Produce", timer)  # acks=all waiting for the ISR
        self.replica_manager = ReplicaManager(cfg, self.log_manager, self.metadata, fetch_purgatory,
                                              produce_purgatory)
        self.replication_quotas = ReplicationQuotas(cfg)  # KIP-73 throttles, rates kept current below
        self.replica_manager.leader_replication_quota = self.replication_quotas.leader
        self.dynamic_config.add_reconfigurable(self.replication_quotas.reconfigure)
        if self.request_metrics is not None:
            self.replica_manager.topic_stats = BrokerTopicStats(self.request_metrics)
            self.apis.request_metrics = self.request_metrics
        # The controller creates and deletes replicas (LeaderAndIsr, StopReplica): ZooKeeper's, or a single node's own.
        self.admin_manager = AdminManager(cfg, self.metadata)
        self.producer_id_manager = ProducerIdManager(self.metadata)
        self.publisher = MetadataPublisher(self.replica_manager)
        self.publisher.set_coordinator_sync(lambda c: sync_ownership(self, c))
        self.metadata.set_publisher(self.publisher.publish)
        if self.clustered:
            # Partitions attach when the controller's LeaderAndIsr names them; logs no topic claims go aside.
            for topic, partition in list(self.log_manager.all_logs()):
                if (topic, partition) not in expected:
                    self.log_manager.set_aside_stray_log(topic, partition)
        else:
            local_controller = LocalController(embedded, self.publisher)
            await local_controller.startup()  # every partition through LeaderAndIsr, as in a cluster
            embedded.attach_controller(local_controller)
            self._set_aside_unhosted_logs()
            await self.replica_manager.purge_tombstones()
        self.group_coordinator: GroupCoordinator = create_group_coordinator(self, timer)
        self._lifecycle.on_stop("group coordinator", self.group_coordinator.shutdown)
        self.transaction_coordinator: TransactionCoordinator = create_transaction_coordinator(self)
        self._lifecycle.on_stop("transaction coordinator", self.transaction_coordinator.shutdown)
        self.publisher.sync_coordinators()
        self.replica_manager.log_dir_mover.start()  # moves between log dirs resume (JBOD)
        self._lifecycle.on_stop("log dir moves", self.replica_manager.log_dir_mover.stop)
        self.quotas = self._start_quotas()
        cluster_link = self._start_cluster_services() if self.clustered else None
        self.authorizer = create_authorizer(cfg, self.metadata)
        if self.authorizer is not None:
            await loop.run_in_executor(None, self.authorizer.start)
            log.info("ACL authorizer on: %d resource patterns with ACLs, super users %s",
                     self.authorizer.pattern_count, ", ".join(sorted(self.authorizer.super_users)) or "none")
        self.services = BrokerServices(
            broker_id=self.broker_id, config=cfg, metadata=self.metadata, replica_manager=self.replica_manager,
            admin_manager=self.admin_manager, group_coordinator=self.group_coordinator,
            producer_id_manager=self.producer_id_manager, apis=self.apis, cluster=cluster_link,
            dynamic_config=self.dynamic_config, transaction_coordinator=self.transaction_coordinator,
            authorizer=self.authorizer,
            quotas=self.quotas,
        )
        self.dynamic_config.add_reconfigurable(self._reconfigure)
        self._lifecycle.on_stop("background tasks", self._cancel_tasks)  # after the listener closed
        self.socket_server = SocketServer(self, cfg.listeners(), cfg.get("socket.request.max.bytes"))
        self._lifecycle.on_stop("socket server", self.socket_server.stop)
        self._lifecycle.on_stop("state", functools.partial(self._set_state, BrokerState.SHUTTING_DOWN))
        await self.socket_server.start()
        me = self._broker_info()
        if self.clustered:
            # Registered only once the listener is up: the controller connects as soon as it sees us.
            await loop.run_in_executor(None, self.metadata.register_broker, me)
            self.zk.add_state_listener(self._on_zookeeper_state)
            self.controller.startup()
            if cfg.get("controlled.shutdown.enable"):  # first of all at shutdown: hand leadership over
                self._lifecycle.on_stop("controlled shutdown", self._controlled_shutdown)
            self._schedule("isr-expiration", max(cfg.get("replica.lag.time.max.ms") // 2, 100),
                           self._maybe_shrink_isr)
        else:
            self.metadata.register_broker(me)
        self._schedule("retention", cfg.get("log.retention.check.interval.ms"), self._retention)
        self._schedule("producer-id-expiration", cfg.get("producer.id.expiration.check.interval.ms"),
                       self._expire_producer_ids)
        self._schedule("checkpoint", cfg.get("log.flush.offset.checkpoint.interval.ms"), self._checkpoint)
        self._schedule("flush", cfg.get("log.flush.scheduler.interval.ms"), self._flush)
        self._schedule("metadata-save-retry", METADATA_RETRY_INTERVAL_MS, self._retry_metadata_save)
        self._schedule("group-metadata-expiry", cfg.get("offsets.retention.check.interval.ms"),
                       self.group_coordinator.cleanup_group_metadata)
        self._schedule("transaction-abort", cfg.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                       self._abort_timed_out_transactions)
        self._schedule("transactional-id-expiration",
                       cfg.get("transaction.remove.expired.transaction.cleanup.interval.ms"),
                       self._remove_expired_transactional_ids)
        self.log_cleaner = LogCleaner(log_dirs)
        if cfg.get("log.cleaner.enable"):
            # The pause is read before every pass: log.cleaner.backoff.ms is dynamic.
            self._schedule("log-cleaner", lambda: cleaner_backoff_ms(cfg), self._clean_logs)
        self.broker_state = BrokerState.RUNNING
        self.ready = True

    def _start_quotas(self) -> QuotaManagers:
        """Client quotas from the entity configs, re-read whenever any broker changes one (no restart)."""
        quotas = QuotaManagers(self.config.get("quota.window.num"), self.config.get("quota.window.size.seconds"))
        quotas.load_from(self.metadata)
        self.metadata.add_entity_listener(lambda _type, _name: quotas.load_from(self.metadata))
        self.apis.quotas = quotas
        return quotas

    async def _abort_timed_out_transactions(self) -> None:
        await self.transaction_coordinator.abort_timed_out_transactions()

    async def _remove_expired_transactional_ids(self) -> None:
        await self.transaction_coordinator.remove_expired_transactional_ids()

    def _load_dynamic_config(self) -> None:
        """Persisted dynamic broker configs, applied before anything reads topic defaults (blocking)."""
        self.dynamic_config = DynamicBrokerConfig(self.config, self.metadata, self.broker_id)
        self.dynamic_config.load()
        self.log_manager.default_config = LogConfig.from_props(self.config.topic_defaults())

    def _reconfigure(self, changed: set[str]) -> None:
        """Apply dynamic broker config changes to what caches them (Kafka's Reconfigurables)."""
        if changed & _TOPIC_DEFAULT_KEYS:
            self.replica_manager.update_default_configs()
        if "advertised.listeners" in changed and not self.clustered:
            self.metadata.register_broker(self._broker_info())

    def _broker_info(self) -> BrokerInfo:
        """This broker as Metadata describes it: every advertised listener, host/port the inter-broker one's."""
        advertised = self.config.advertised_listeners(self.socket_server.bound_ports)
        inter = self.config.inter_broker_listener_name()
        main = next((ep for ep in advertised if ep.listener_name == inter), advertised[0])
        return BrokerInfo(self.broker_id, main.host, main.port, self.config.get("broker.rack"),
                          {ep.listener_name: (ep.host, ep.port) for ep in advertised})

    def _reload_dynamic_config(self) -> None:
        """A /config/changes notification (on the loop): re-read our layers without blocking it."""
        if not self._stopped.is_set():
            self._tasks = [t for t in self._tasks if not t.done()]
            self._tasks.append(asyncio.get_running_loop().create_task(self.dynamic_config.reload(),
                                                                      name="dynamic-config-reload"))

    @property
    def clustered(self) -> bool:
        return bool(self.config.get("zookeeper.connect"))

    async def _open_zookeeper(self, log_dirs: list[str]
                              ) -> tuple[dict[str, LogConfig], dict[tuple[str, int], uuid.UUID]]:
        """Connect, agree on the cluster id with the log dirs, and read what this broker should host."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        self.zk = KafkaZkClient(cfg.get("zookeeper.connect"),
                                session_timeout_ms=cfg.get("zookeeper.session.timeout.ms"),
                                connection_timeout_ms=cfg.get("zookeeper.connection.timeout.ms"))
        await loop.run_in_executor(None, self.zk.start)
        metas, recorded = check_identities(log_dirs, self.broker_id, cfg.get("cluster.id") or None)
        cluster_id = await loop.run_in_executor(None, self.zk.get_or_create_cluster_id,
                                                recorded or cfg.get("cluster.id") or None)
        if recorded and recorded != cluster_id:
            raise LogDirError(f"the log dirs belong to cluster {recorded} but ZooKeeper "
                              f"{cfg.get('zookeeper.connect')} holds cluster {cluster_id}; check zookeeper.connect")
        for d, meta in metas.items():
            if meta is None:
                write_meta_properties(d, MetaProperties(cluster_id, self.broker_id))
        self.metadata = ZkMetadataStore(self.zk, self.broker_id, cluster_id,
                                        protocol_map={ep.listener_name: ep.security_protocol
                                                      for ep in cfg.listeners()})
        self._stop_with_metadata()
        await loop.run_in_executor(None, self._load_dynamic_config)
        await loop.run_in_executor(None, self.metadata.load_entities)

        def read_topics() -> tuple[dict[str, LogConfig], dict[tuple[str, int], uuid.UUID]]:
            configs: dict[str, LogConfig] = {}
            expected: dict[tuple[str, int], uuid.UUID] = {}
            for name in self.zk.get_all_topics():
                assignment = self.zk.get_topic_assignment(name)
                if assignment is None or assignment.topic_id is None:
                    continue
                configs[name] = LogConfig.from_props({**cfg.topic_defaults(), **self.zk.get_topic_configs(name)})
                for p, replicas in assignment.partitions.items():
                    if self.broker_id in replicas:
                        expected[(name, p)] = assignment.topic_id
            return configs, expected

        return await loop.run_in_executor(None, read_topics)

    def _start_cluster_services(self) -> ClusterLink:
        """Replica fetchers, the ISR sender, the controller, and the inter-broker APIs."""
        store = self.metadata
        assert isinstance(store, ZkMetadataStore)
        store.on_config_change = self._reload_dynamic_config
        store.start_watches()
        self._reload_dynamic_config()  # a change made between the start-up read and the watch
        rm = self.replica_manager

        def endpoint(broker_id: int) -> tuple[str, int] | None:
            b = next((b for b in store.live_brokers() if b.broker_id == broker_id), None)
            return (b.host, b.port) if b else None

        self.fetcher_manager = ReplicaFetcherManager(self.broker_id, rm, self.config, endpoint,
                                                     self.inter_broker_security, self.replication_quotas.follower)
        rm.fetcher_manager = self.fetcher_manager
        self.alter_partition_manager = AlterPartitionManager(self.broker_id, store, rm, lambda: store.broker_epoch,
                                                             self.inter_broker_security)
        rm.isr_change_sender = self.alter_partition_manager.submit
        rm.log_dir_failure_listener = self._propagate_log_dir_event

        def unclean_enabled(topic: str) -> bool:
            """Read from ZooKeeper, not the store's cache: the controller asks right after a config change."""
            value = self.zk.get_topic_configs(topic).get("unclean.leader.election.enable")
            if value is None:
                return bool(self.config.get("unclean.leader.election.enable"))
            return value.strip().lower() == "true"

        self.controller = KafkaController(self.broker_id, self.config, self.zk, unclean_enabled,
                                          self.inter_broker_security)
        # Stopped fetchers first, then the ISR sender, then the controller (reverse of registration).
        self._lifecycle.on_stop("controller", self.controller.shutdown)
        self._lifecycle.on_stop("alter partition manager", self.alter_partition_manager.close)
        self._lifecycle.on_stop("replica fetchers", self.fetcher_manager.shutdown)
        for module in CLUSTER_HANDLER_MODULES:
            self.apis.register_module(module)
        return ClusterLink(store=store, controller=self.controller, publisher=self.publisher)

    def _on_zookeeper_state(self, state: SessionState) -> None:
        """kazoo's thread: a lost session dropped our registration; register again from the loop."""
        if state is SessionState.LOST:
            self._loop.call_soon_threadsafe(self._reregister)

    def _zk_store(self) -> ZkMetadataStore:
        """The ZooKeeper-backed metadata store (cluster mode only)."""
        assert isinstance(self.metadata, ZkMetadataStore)
        return self.metadata

    def _reregister(self) -> None:
        async def again() -> None:
            while not self._stopped.is_set():
                try:
                    await asyncio.get_running_loop().run_in_executor(None, self._zk_store().reregister)
                    self.controller.broker_registered()  # registered first, then a candidate (as Kafka)
                    return
                except Exception as exc:  # noqa: BLE001 - ZooKeeper may still be away: keep trying
                    log.warning("re-registering in ZooKeeper failed (%s); retrying", exc)
                    await asyncio.sleep(1)

        self._tasks.append(asyncio.get_running_loop().create_task(again(), name="zk-reregister"))

    def request_log_dir_recovery(self) -> None:
        """SIGHUP: the operator freed space (or fixed the disk); bring failed log dirs back without a restart."""
        if not self.ready:
            return
        log.info("log dir recovery requested: offline dirs %s", sorted(self.log_manager.offline_log_dirs) or "none")
        self._tasks.append(asyncio.get_running_loop().create_task(
            self.replica_manager.recover_offline_log_dirs(), name="log-dir-recovery"))

    def _propagate_log_dir_event(self, log_dir: str) -> None:
        """A log dir went offline: tell the controller through ZooKeeper (KIP-112), retrying until it is written."""
        async def notify() -> None:
            while not self._stopped.is_set():
                try:
                    await asyncio.get_running_loop().run_in_executor(None, self.zk.propagate_log_dir_event,
                                                                     self.broker_id)
                    log.info("wrote a log dir event for %s: the controller asks which replicas are offline", log_dir)
                    return
                except Exception as exc:  # noqa: BLE001 - ZooKeeper may be away: keep trying
                    log.warning("reporting offline log dir %s failed (%s); retrying", log_dir, exc)
                    await asyncio.sleep(1)

        self._tasks.append(asyncio.get_running_loop().create_task(notify(), name="log-dir-event"))

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move our leaderships away before we stop serving (Kafka's
        controlled.shutdown.*): clients see a leader change, not an outage of a session timeout."""
        retries = self.config.get("controlled.shutdown.max.retries")
        for attempt in range(1, retries + 1):
            if not self._other_live_brokers():
                # Nobody to hand leadership to (the last broker of a cluster going down): retrying
                # would only add the backoff to every full shutdown.
                log.info("controlled shutdown skipped: no other live broker to move leadership to")
                return
            cid = self.metadata.controller_id()
            broker = next((b for b in self.metadata.live_brokers() if b.broker_id == cid), None)
            if broker is None:
                log.warning("controlled shutdown: no controller known (attempt %d)", attempt)
            else:
                client = BrokerClient(broker.host, broker.port, client_id=f"broker-{self.broker_id}-shutdown",
                                      request_timeout_ms=30_000, security=self.inter_broker_security)
                try:
                    response = await client.send(ControlledShutdownRequest(
                        broker_id=self.broker_id, broker_epoch=self._zk_store().broker_epoch), 3)
                    if response.error_code == 0 and not response.remaining_partitions:
                        log.info("controlled shutdown complete: leadership moved off broker %d", self.broker_id)
                        # Give the new leaders' LeaderAndIsr a moment to land before our listener closes.
                        await asyncio.sleep(0.2)
                        return
                    log.info("controlled shutdown: error %d, %d partitions still led here (attempt %d)",
                             response.error_code, len(response.remaining_partitions), attempt)
                except (TimeoutError, ConnectionError, OSError) as exc:
                    log.warning("controlled shutdown request failed: %s (attempt %d)", exc, attempt)
                finally:
                    await client.close()
            if attempt < retries and self._other_live_brokers():
                await asyncio.sleep(self.config.get("controlled.shutdown.retry.backoff.ms") / 1000)
        log.warning("controlled shutdown did not complete; shutting down anyway")

    def _other_live_brokers(self) -> list[int]:
        """Ids of the live brokers other than this one, as the metadata cache knows them."""
        return [b.broker_id for b in self.metadata.live_brokers() if b.broker_id != self.broker_id]

    async def _maybe_shrink_isr(self) -> None:
        self.replica_manager.maybe_shrink_isr()

    def _complete_interrupted_deletions(self) -> None:
        """A tombstone whose topic id the metadata still lists is a deletion acknowledged (or begun)
        whose metadata write did not happen: finish it before anything attaches the topic's logs.
        A topic re-created under the same name has another id and is left alone."""
        by_id = {t.topic_id.hex: t for t in self.metadata.topics().values()}
        for stone in self.log_manager.tombstones():
            topic = by_id.pop(stone.topic_id, None)
            if topic is None or self.metadata.topic(topic.name) is not topic:
                continue
            log.info("completing the interrupted deletion of topic %s (found tombstone %s)", topic.name, stone.path)
            try:
                self.metadata.delete_topic(topic.name, recorded_elsewhere=True)
            except OSError as exc:  # recorded_elsewhere makes this unlikely; the tombstone stays for next time
                log.error("could not complete the deletion of topic %s: %s", topic.name, exc)

    async def _retry_metadata_save(self) -> None:
        if self.metadata.save_pending:
            await asyncio.get_running_loop().run_in_executor(None, self.metadata.retry_pending_save)
        if self.replica_manager.purge_due and not self.metadata.save_pending:
            await self.replica_manager.purge_tombstones()

    def _set_aside_unhosted_logs(self) -> None:
        """A loaded log no partition claims is renamed aside (``-stray``), never deleted: only DeleteTopics
        removes data, so a metadata mishap cannot cost any."""
        hosted = set(self.replica_manager.partitions)
        for topic, partition in list(self.log_manager.all_logs()):
            if (topic, partition) not in hosted:
                self.log_manager.set_aside_stray_log(topic, partition)

    def _schedule(self, name: str, interval_ms: int | Callable[[], int], job: Callable[[], Awaitable[object]]) -> None:
        interval = interval_ms if callable(interval_ms) else lambda: interval_ms

        async def loop() -> None:
            while True:
                await asyncio.sleep(max(interval(), 10) / 1000)
                try:
                    await job()
                except Exception:
                    log.exception("background job %s failed", name)

        if 0 < interval() < 2**62:
            self._tasks.append(asyncio.create_task(loop(), name=name))

    async def _retention(self) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None, self.log_manager.cleanup_logs, int(time.time() * 1000))

    async def _expire_producer_ids(self) -> None:
        """Kafka's periodic producer-id expiration, in an executor: it takes every log's lock."""
        expiration_ms = self.config.get("producer.id.expiration.ms")
        removed = await asyncio.get_running_loop().run_in_executor(
            None, self.log_manager.remove_expired_producers, expiration_ms)
        if removed:
            log.debug("expired %d producer id(s) idle for producer.id.expiration.ms=%d", removed, expiration_ms)

    async def _clean_logs(self) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None, self.log_cleaner.clean_logs, self.log_manager.all_logs())

    async def _checkpoint(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.checkpoint)

    async def _flush(self) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None, self.log_manager.flush_dirty, int(time.time() * 1000))

    async def run_until_stopped(self) -> None:
        await self._stopped.wait()

    def request_stop(self) -> None:
        self._stopped.set()

    def _stop_with_metadata(self) -> None:
        """The metadata store closes last, after the logs (and a pending metadata write) are done."""
        # Off the loop: closing ZooKeeper's session (or the embedded store's writer) waits on other threads.
        self._lifecycle.on_stop("metadata store", lambda: asyncio.get_running_loop().run_in_executor(
            None, self.metadata.close))
        self._lifecycle.on_stop("metadata write", self._save_pending_metadata)
        self._lifecycle.on_stop("log manager", lambda: asyncio.get_running_loop().run_in_executor(
            None, self.log_manager.shutdown))

    def _save_pending_metadata(self) -> None:
        if self.metadata.save_pending:
            self.metadata.retry_pending_save()

    async def _cancel_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def shutdown(self) -> None:
        """Every started component stops in reverse start order (a cluster broker first hands its
        leadership over: controlled shutdown is the last step registered)."""
        log.info("shutting down")
        self.ready = False
        self.broker_state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        ok = await self._lifecycle.stop()
        log.info("shut down cleanly" if ok else "shut down")

    def _set_state(self, state: BrokerState) -> None:
        self.broker_state = state


async def _hold_for_test(path: str | None) -> None:
    """HOLD_RECOVERY_ENV: wait while the named file exists (tests only)."""
    if not path or not os.path.exists(path):
        return
    log.warning("%s is set: holding log recovery while %s exists", HOLD_RECOVERY_ENV, path)
    while os.path.exists(path):
        await asyncio.sleep(0.05)
