"""KafkaServer: wires the broker's services together and runs their housekeeping.

Start-up order follows Kafka: load logs (recovery), open the metadata store,
attach partitions, then open the listener. Shutdown reverses it and writes
checkpoints plus a clean-shutdown marker so the next start skips recovery.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable

from strom.broker import handlers as _handlers_pkg  # noqa: F401 - ensure package import
from strom.broker.admin_manager import AdminManager
from strom.broker.apis import KafkaApis
from strom.broker.handlers import (
    alter_configs,
    api_versions,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sync_group,
)
from strom.broker.network import SocketServer
from strom.broker.producer_id_manager import ProducerIdManager
from strom.broker.replica_manager import ReplicaManager
from strom.broker.request import BrokerServices
from strom.cluster.embedded import open_metadata_store
from strom.cluster.metadata import BrokerInfo, MetadataStore
from strom.config import BrokerConfig, ConfigError
from strom.coordinator.common import sync_ownership
from strom.coordinator.group.group_coordinator import GroupCoordinator
from strom.coordinator.group.startup import create_group_coordinator
from strom.server_common.purgatory import DelayedOperationPurgatory, TimerDriver
from strom.server_common.timing_wheel import Timer
from strom.storage.cleaner import LogCleaner, cleaner_backoff_ms
from strom.storage.log_config import LogConfig
from strom.storage.log_dirs import LogDirLock, lock_log_dirs
from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)

METADATA_RETRY_INTERVAL_MS = 5_000

HANDLER_MODULES = [
    api_versions, metadata, produce, fetch, list_offsets, create_topics, delete_topics, create_partitions,
    describe_configs, alter_configs, incremental_alter_configs, describe_cluster, delete_records,
    describe_log_dirs, init_producer_id, offset_for_leader_epoch,
    # group coordinator
    find_coordinator, join_group, sync_group, heartbeat, leave_group, offset_commit, offset_fetch,
    offset_delete, list_groups, describe_groups, delete_groups,
]


class KafkaServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id: int = config.get("broker.id")
        self.apis = KafkaApis()
        for module in HANDLER_MODULES:
            self.apis.register_module(module)
        self.log_manager: LogManager
        self.metadata: MetadataStore
        self.replica_manager: ReplicaManager
        self.admin_manager: AdminManager
        self.producer_id_manager: ProducerIdManager
        self.socket_server: SocketServer
        self.services: BrokerServices  # what handlers see, instead of this object
        self._timer_driver: TimerDriver
        self._tasks: list[asyncio.Task[None]] = []
        self._log_dir_locks: list[LogDirLock] = []
        self._stopped = asyncio.Event()

    @property
    def port(self) -> int:
        return self.socket_server.port

    async def startup(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        if cfg.get("zookeeper.connect"):
            raise ConfigError("zookeeper.connect: ZooKeeper-coordinated clusters are not implemented yet; leave it "
                              "empty to run on the embedded single-node metadata store")
        log_dirs, failed_dirs = cfg.check_log_dirs()
        # Before anything reads or writes a log dir: one broker per dir, held until the process exits.
        self._log_dir_locks = lock_log_dirs(log_dirs)
        self.metadata = open_metadata_store(log_dirs, self.broker_id, cfg.get("cluster.id") or None)
        self.log_manager = LogManager(cfg.log_dirs(), cfg.topic_defaults())
        for log_dir, reason in failed_dirs.items():
            self.log_manager.mark_offline(log_dir, f"unusable ({reason})")
        self._complete_interrupted_deletions()
        topic_configs = {
            name: LogConfig.from_props({**cfg.topic_defaults(), **t.configs})
            for name, t in self.metadata.topics().items()
        }
        expected = {(t.name, p): t.topic_id for t in self.metadata.topics().values()
                    for p, state in t.partitions.items() if self.broker_id in state.replicas}
        await loop.run_in_executor(None, self.log_manager.load_logs, topic_configs, None, expected)
        log.info("loaded logs in %.2f s", time.monotonic() - started)
        adv_host, adv_port = cfg.advertised_host_port()
        timer = Timer(tick_ms=1, wheel_size=20)
        self._timer_driver = TimerDriver(timer, loop)
        self._timer_driver.start()
        fetch_purgatory = DelayedOperationPurgatory("Fetch", timer)
        produce_purgatory = DelayedOperationPurgatory("Produce", timer)  # acks=all waiting for the ISR
        self.replica_manager = ReplicaManager(cfg, self.log_manager, self.metadata, fetch_purgatory,
                                              produce_purgatory)
        self.admin_manager = AdminManager(cfg, self.metadata, self.replica_manager)
        self.producer_id_manager = ProducerIdManager(self.metadata)
        self.replica_manager.load_partitions()
        self._set_aside_unhosted_logs()
        self.replica_manager.purge_tombstones()
        self.group_coordinator: GroupCoordinator = create_group_coordinator(self, timer)
        sync_ownership(self, self.group_coordinator)
        self.services = BrokerServices(
            broker_id=self.broker_id, config=cfg, metadata=self.metadata, replica_manager=self.replica_manager,
            admin_manager=self.admin_manager, group_coordinator=self.group_coordinator,
            producer_id_manager=self.producer_id_manager, apis=self.apis,
        )
        host, port = cfg.listener_host_port()
        self.socket_server = SocketServer(self, host, port, cfg.get("socket.request.max.bytes"))
        await self.socket_server.start()
        if adv_port == 0:
            adv_port = self.socket_server.port
        self.metadata.register_broker(BrokerInfo(self.broker_id, adv_host, adv_port))
        self._schedule("retention", cfg.get("log.retention.check.interval.ms"), self._retention)
        self._schedule("checkpoint", cfg.get("log.flush.offset.checkpoint.interval.ms"), self._checkpoint)
        self._schedule("flush", cfg.get("log.flush.scheduler.interval.ms"), self._flush)
        self._schedule("metadata-save-retry", METADATA_RETRY_INTERVAL_MS, self._retry_metadata_save)
        self._schedule("group-metadata-expiry", cfg.get("offsets.retention.check.interval.ms"),
                       self.group_coordinator.cleanup_group_metadata)
        self.log_cleaner = LogCleaner(log_dirs)
        if cfg.get("log.cleaner.enable"):
            self._schedule("log-cleaner", cleaner_backoff_ms(cfg), self._clean_logs)

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
            self.metadata.retry_pending_save()
        if self.replica_manager.purge_due and not self.metadata.save_pending:
            self.replica_manager.purge_tombstones()

    def _set_aside_unhosted_logs(self) -> None:
        """A loaded log no partition claims is renamed aside (``-stray``), never deleted: only DeleteTopics
        removes data, so a metadata mishap cannot cost any."""
        hosted = set(self.replica_manager.partitions)
        for topic, partition in list(self.log_manager.all_logs()):
            if (topic, partition) not in hosted:
                self.log_manager.set_aside_stray_log(topic, partition)

    def _schedule(self, name: str, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(max(interval_ms, 10) / 1000)
                try:
                    await job()
                except Exception:
                    log.exception("background job %s failed", name)

        if 0 < interval_ms < 2**62:
            self._tasks.append(asyncio.create_task(loop(), name=name))

    async def _retention(self) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None, self.log_manager.cleanup_logs, int(time.time() * 1000))

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

    async def shutdown(self) -> None:
        """Every step runs even if an earlier one failed (a full disk must not abort shutdown half way)."""
        log.info("shutting down")
        failed = False

        async def step(name: str, fn: Callable[[], object]) -> None:
            nonlocal failed
            try:
                result = fn()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                failed = True
                log.exception("shutdown step %s failed; continuing", name)

        loop = asyncio.get_running_loop()
        if hasattr(self, "socket_server"):
            await step("socket server", self.socket_server.stop)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if hasattr(self, "group_coordinator"):
            await step("group coordinator", self.group_coordinator.shutdown)
        if hasattr(self, "_timer_driver"):
            await step("timer", self._timer_driver.stop)
        if hasattr(self, "log_manager"):
            await step("log manager", lambda: loop.run_in_executor(None, self.log_manager.shutdown))
        if hasattr(self, "metadata"):
            if self.metadata.save_pending:
                await step("metadata write", self.metadata.retry_pending_save)
            await step("metadata store", self.metadata.close)
        log.info("shut down" if failed else "shut down cleanly")
