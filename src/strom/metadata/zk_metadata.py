"""The broker's metadata in a ZooKeeper cluster: a cache the controller keeps current, writes to ZooKeeper.

Reads (topics, leaders, live brokers, controller) come from the cache, which only the
controller's UpdateMetadata requests change (as in Kafka's ZK mode, brokers do not watch
partition state themselves). Topic configs are not part of UpdateMetadata: they are read from
``/config/topics/<t>`` and re-read when a ``/config/changes`` notification names the topic.
Dynamic broker configs (``/config/brokers/<id>`` and ``<default>``) are re-read by the broker's
DynamicBrokerConfig, which ``on_config_change`` wakes on the same notifications.

Writes are what Kafka's AdminZkClient does: CreateTopics writes the assignment to
``/brokers/topics/<t>`` and the controller, watching that path, elects leaders and tells
the replicas; DeleteTopics queues ``/admin/delete_topics/<t>`` for the controller.

Threading: kazoo delivers watches on its own thread; they are handed to the event loop in
``_to_loop`` and nowhere else, so the cache is only ever touched from the loop. Request paths
never call kazoo on the loop: the admin writes, the broker list for placement, producer id
blocks and configs of topics not cached yet run on the store's own worker threads (``_off_loop``)
and their results are applied back on the loop, so a slow or absent ZooKeeper delays those requests
only, never the loop (produce, fetch and replication keep going), and storage work on the loop's
default executor never delays them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import uuid
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import kafka.errors as Errors

from strom.metadata.image import MetadataDelta
from strom.metadata.replica_assignment import BrokerMetadata
from strom.metadata.store import (
    AclListener,
    AclUpdate,
    BrokerInfo,
    MetadataStore,
    PartitionState,
    TopicMetadata,
)
from strom.metadata.zk import zk_data as zd
from strom.metadata.zk.errors import TopicExistsError
from strom.metadata.zk.kafka_zk_client import KafkaZkClient
from strom.security.acl import AccessControlEntry, ResourcePattern

log = logging.getLogger(__name__)

LEADER_DURING_DELETE = -2
# How long a topic known to exist in ZooKeeper is shown as "being created" while no UpdateMetadata has
# brought it (a topic created and deleted before the controller saw it is never announced).
CREATED_MEMORY_S = 60.0
# Worker threads for the request paths' ZooKeeper calls: their own, so storage work on the loop's
# default executor (compaction, flushes, coordinator loads) never queues an admin request behind it.
ZK_WORKERS = 4

T = TypeVar("T")


ENTITY_TYPES = (zd.CONFIG_TYPE_USER, zd.CONFIG_TYPE_CLIENT, zd.CONFIG_TYPE_GROUP)
# ACL change notifications older than this are deleted by the broker that reads them (Kafka's 15 minutes).
ACL_CHANGE_EXPIRATION_MS = 15 * 60 * 1000


class ZkMetadataStore(MetadataStore):
    def __init__(self, zk: KafkaZkClient, broker_id: int, cluster_id: str,
                 protocol_map: dict[str, str] | None = None) -> None:
        super().__init__()
        self.protocol_map = dict(protocol_map or {"PLAINTEXT": "PLAINTEXT"})  # registered with our endpoints
        self.zk = zk
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.broker_epoch = -1
        self._created: dict[str, float] = {}  # in ZooKeeper, not in the cache yet: name -> loop time learnt
        self._configs: dict[str, dict[str, str]] = {}
        self._loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(max_workers=ZK_WORKERS, thread_name_prefix=f"zk-metadata-{broker_id}")
        self._seen_changes: set[str] | None = set()  # None until the /config/changes watch first delivers
        self._me: BrokerInfo | None = None
        # Called on the loop when /config/changes grows: dynamic broker configs may have changed.
        self.on_config_change: Callable[[], None] | None = None
        self._config_tasks: set[asyncio.Task[None]] = set()
        self._entities: dict[str, dict[str, dict[str, str]]] = {}  # users/clients configs, kept current by watches
        self._acl_listener: AclListener | None = None
        self._seen_acl_changes: dict[str, set[str] | None] = {}  # per notification path; None until first listed

    def _to_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """The one place where kazoo's thread hands work to the event loop."""
        self._loop.call_soon_threadsafe(fn, *args)

    def start_watches(self) -> None:
        """Watch /config/changes. kazoo's ChildrenWatch reads the children synchronously (with retries)
        in its constructor, so it is built on a worker thread: a frozen ZooKeeper must not freeze the
        loop. Its first delivery is the baseline; changes made before the watch existed are caught by
        one re-read of the configs then."""
        self._seen_changes = None
        task = self._loop.create_task(self._arm_watch(
            "config changes", zd.CONFIG_CHANGES_PATH,
            lambda children: self._to_loop(self._on_config_changes, list(children))), name="zk-config-watch")
        self._config_tasks.add(task)
        task.add_done_callback(self._config_tasks.discard)

    async def _arm_watch(self, what: str, path: str, callback: Callable[[list[str]], None]) -> None:
        """Construct a ChildrenWatch off the loop, retrying while ZooKeeper is away."""
        delay = 0.5
        while True:
            try:
                await self._off_loop(self.zk.watch_children, path, callback)
                return
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: keep trying, the loop keeps serving
                log.warning("could not watch %s (%s); retrying in %.1f s", what, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    # -- reads ---------------------------------------------------------------------------------------
    def register_broker(self, broker: BrokerInfo) -> None:
        """Create /brokers/ids/<id>; its czxid is our broker epoch, which controller requests must carry."""
        self._me = broker
        endpoints = broker.endpoints or {"PLAINTEXT": (broker.host, broker.port)}
        self.broker_epoch = self.zk.register_broker(
            broker.broker_id, [f"{name}://{host}:{port}" for name, (host, port) in endpoints.items()],
            rack=broker.rack, listener_security_protocol_map=self.protocol_map)
        self._to_loop(self._add_broker, broker)  # before the caller's await returns: FIFO on the loop

    def _add_broker(self, broker: BrokerInfo) -> None:
        if broker.broker_id not in self._image.brokers:
            self.publish_delta(MetadataDelta(brokers={**self._image.brokers, broker.broker_id: broker}))

    def reregister(self) -> None:
        """After a lost session: the ephemeral znode is gone, register again (a new broker epoch)."""
        if self._me is not None:
            self.register_broker(self._me)
            log.info("re-registered broker %d in ZooKeeper (broker epoch %d)", self.broker_id, self.broker_epoch)

    async def assignable_brokers(self) -> list[BrokerMetadata]:
        """Registered brokers and their racks as ZooKeeper says now (the cache lags behind a broker
        that just came back), read off the loop so a slow ZooKeeper never stalls the broker."""
        self._require_zookeeper()
        registered = await self._off_loop(self.zk.get_all_brokers)
        return sorted(BrokerMetadata(b.id, b.rack) for b in registered.values())

    def being_created(self, name: str) -> bool:
        since = self._created.get(name)
        if since is None:
            return False
        if name in self._image.topics or self._loop.time() - since > CREATED_MEMORY_S:
            del self._created[name]
            return False
        return True

    def _note_created(self, name: str) -> None:
        """On the loop: the topic exists in ZooKeeper (we wrote it, or found it there)."""
        if name not in self._image.topics:
            self._created[name] = self._loop.time()

    async def read_topic_async(self, name: str) -> TopicMetadata | None:
        """``/brokers/topics/<t>`` read off the loop; leaders, where known, from the cache."""
        self._require_zookeeper()
        got = await self._off_loop(self.zk.get_topic_assignment, name)
        if got is None:
            return None
        cached = self._image.topics.get(name)
        # A znode written by an old tool may lack the topic id: the cache's, or none yet.
        topic_id = got.topic_id or (cached.topic_id if cached is not None else uuid.UUID(int=0))
        known = cached.partitions if cached is not None and cached.topic_id == topic_id else {}
        parts = {p: known[p] if p in known else PartitionState(p, -1, -1, list(reps), [])
                 for p, reps in sorted(got.partitions.items())}
        return TopicMetadata(name, topic_id, parts, dict(self._configs.get(name, {})))

    def topic_configs(self, name: str) -> dict[str, str]:
        """Configs of a topic. Request paths call ``load_topic_configs`` first, so this is a cache read
        there; the ZooKeeper read is left for callers off the loop."""
        configs = self._configs.get(name)
        if configs is None:
            configs = self._configs[name] = self.zk.get_topic_configs(name)
        return configs

    async def load_topic_configs(self, names: Collection[str]) -> None:
        """Read the configs of topics not cached yet off the loop (LeaderAndIsr may precede
        UpdateMetadata, and either may name a topic this broker has not seen)."""
        missing = sorted({n for n in names if n not in self._configs})
        if not missing:
            return
        got = await self._off_loop(lambda: {n: self.zk.get_topic_configs(n) for n in missing})
        for name, configs in got.items():
            self._configs.setdefault(name, configs)

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a (blocking) kazoo call on a worker thread; its result comes back to the loop."""
        return await self._loop.run_in_executor(self._executor, fn, *args)

    # -- UpdateMetadata ------------------------------------------------------------------------------
    def apply_update_metadata(self, controller_id: int, brokers: list[BrokerInfo],
                              topics: list[tuple[str, uuid.UUID | None, list[PartitionState]]]) -> None:
        """Merge the controller's partition states into one delta; a leader of -2 means the partition is
        being deleted. Only the topics named are copied (with their partitions), never the others."""
        changed: dict[str, TopicMetadata] = {}
        deleted: dict[str, TopicMetadata] = {}
        current = self._image.topics
        for name, topic_id, states in topics:
            topic = changed.get(name) or current.get(name)
            deleting = {s.partition for s in states if s.leader == LEADER_DURING_DELETE}
            if deleting:
                self._created.pop(name, None)
                if topic is not None:
                    left = {p: s for p, s in topic.partitions.items() if p not in deleting}
                    if left:
                        changed[name] = dataclasses.replace(topic, partitions=left)
                    else:
                        changed.pop(name, None)
                        deleted[name] = current.get(name, topic)
                        self._configs.pop(name, None)
                continue
            if topic is None:
                if topic_id is None:
                    continue
                topic = TopicMetadata(name, topic_id, {}, dict(self.topic_configs(name)))
                self._created.pop(name, None)
            changed[name] = dataclasses.replace(topic, partitions={**topic.partitions,
                                                                   **{s.partition: s for s in states}})
        self.publish_delta(MetadataDelta(changed, {n: t for n, t in deleted.items() if n in current},
                                         brokers={b.broker_id: b for b in brokers}, controller_id=controller_id))

    def _on_config_changes(self, children: list[str]) -> None:
        seen, self._seen_changes = self._seen_changes, set(children)
        if seen is None:  # the watch's first delivery: re-read what changed before it was armed
            if self.on_config_change is not None:
                self.on_config_change()
            task = self._loop.create_task(self._reload_topic_configs(), name="zk-config-changes")
            self._config_tasks.add(task)
            task.add_done_callback(self._config_tasks.discard)
            return
        new = [c for c in children if c not in seen]
        if not new:
            return
        if self.on_config_change is not None:
            self.on_config_change()
        entity_task = self._loop.create_task(self._reload_entities(new), name="zk-entity-changes")
        self._config_tasks.add(entity_task)
        entity_task.add_done_callback(self._config_tasks.discard)
        task = self._loop.create_task(self._reload_topic_configs(), name="zk-config-changes")
        self._config_tasks.add(task)
        task.add_done_callback(self._config_tasks.discard)

    async def _reload_topic_configs(self) -> None:
        """Which entity changed is in each notification; re-reading every known topic is simpler and
        cheap. Read off the loop, applied on it."""
        names = list(self._image.topics)
        try:
            got = await self._off_loop(lambda: {n: self.zk.get_topic_configs(n) for n in names})
        except Exception:  # noqa: BLE001 - ZooKeeper away: the next notification reads again
            log.warning("could not re-read topic configs after a config change", exc_info=True)
            return
        changed = []
        for name, configs in got.items():
            topic = self._image.topics.get(name)
            if topic is not None and configs != topic.configs:
                changed.append(dataclasses.replace(topic, configs=dict(configs)))
                self._configs[name] = dict(configs)
        if changed:
            self.publish_delta(MetadataDelta.of(changed, configs_changed=[t.name for t in changed]))

    # -- client entities (/config/users, /config/clients) -----------------------------------------
    def load_entities(self) -> None:
        """Blocking: read every user and client entity (start-up, before the listeners open)."""
        self._entities = {t: self.zk.get_all_entity_configs(t) for t in ENTITY_TYPES}

    def all_entity_configs(self, entity_type: str) -> dict[str, dict[str, str]]:
        return {name: dict(c) for name, c in self._entities.get(entity_type, {}).items()}

    async def read_entity_configs_async(self, entity_type: str, name: str) -> dict[str, str]:
        self._require_zookeeper()
        return await self._off_loop(self.zk.get_entity_configs, entity_type, name)

    async def set_entity_configs_async(self, entity_type: str, name: str, configs: dict[str, str]) -> None:
        self._require_zookeeper()
        await self._off_loop(self.zk.set_entity_configs, entity_type, name, configs)
        self._apply_entity(entity_type, name, configs)  # our own notification arrives later and finds it current

    def _apply_entity(self, entity_type: str, name: str, configs: dict[str, str]) -> None:
        names = self._entities.setdefault(entity_type, {})
        if names.get(name, {}) == configs:
            return
        if configs:
            names[name] = dict(configs)
        else:
            names.pop(name, None)
        self._entity_changed(entity_type, name)

    async def _reload_entities(self, changes: list[str]) -> None:
        """Notifications name the entity: re-read those of users and clients, off the loop."""
        def read() -> list[tuple[str, str, dict[str, str]]]:
            out = []
            for child in changes:
                entity = self.zk.get_config_change(child)
                if entity is not None and entity[0] in ENTITY_TYPES:
                    out.append((*entity, self.zk.get_entity_configs(*entity)))
            return out

        try:
            got = await self._off_loop(read)
        except Exception:  # noqa: BLE001 - ZooKeeper away: a later notification reads again
            log.warning("could not re-read client entities after a config change", exc_info=True)
            return
        for entity_type, name, configs in got:
            self._apply_entity(entity_type, name, configs)

    # -- ACLs (/kafka-acl, /kafka-acl-extended; notifications under /kafka-acl-changes, /kafka-acl-extended-changes) --
    def load_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        return self.zk.get_all_acls()

    async def update_acls_async(self, pattern: ResourcePattern, update: AclUpdate) -> frozenset[AccessControlEntry]:
        self._require_zookeeper()
        return await self._off_loop(self.zk.update_acls, pattern, update)

    def watch_acls(self, listener: AclListener) -> None:
        """Blocking: make sure the ACL roots exist, then watch both notification paths. The first call of each
        watch only records what is there (the caller reads every ACL right after)."""
        self._acl_listener = listener
        self.zk.create_acl_paths()
        for path in (zd.ACL_CHANGES_PATH, zd.EXTENDED_ACL_CHANGES_PATH):
            self._seen_acl_changes[path] = None
            self.zk.watch_children(path, functools.partial(self._on_acl_children, path))

    def _on_acl_children(self, path: str, children: list[str]) -> None:
        """kazoo's thread: hand a changed list of ACL change notifications to the loop."""
        self._to_loop(self._on_acl_changes, path, list(children))

    def _on_acl_changes(self, path: str, children: list[str]) -> None:
        seen = self._seen_acl_changes.get(path)
        self._seen_acl_changes[path] = set(children)
        new = sorted(c for c in children if seen is not None and c not in seen)
        if not new:
            return
        older = sorted(c for c in children if c not in new)
        task = self._loop.create_task(self._reload_acls(path, new, older), name="zk-acl-changes")
        self._config_tasks.add(task)
        task.add_done_callback(self._config_tasks.discard)

    async def _reload_acls(self, path: str, changes: list[str], older: list[str]) -> None:
        """Each notification names a pattern: re-read its znode off the loop, hand it to the authorizer on it.
        Notifications older than ACL_CHANGE_EXPIRATION_MS are deleted on the way, as Kafka's brokers do."""
        def read() -> list[tuple[ResourcePattern, frozenset[AccessControlEntry]]]:
            out = []
            for child in changes:
                pattern, _ = self.zk.get_acl_change(path, child)
                if pattern is not None:
                    out.append((pattern, self.zk.get_acls(pattern)))
            now = zd.now_ms()
            for child in older:
                _, created_ms = self.zk.get_acl_change(path, child)
                if not created_ms or now - created_ms <= ACL_CHANGE_EXPIRATION_MS:
                    break  # sequential names: the rest are newer
                self.zk.delete_acl_change(path, child)
            return out

        try:
            got = await self._off_loop(read)
        except Exception:  # noqa: BLE001 - ZooKeeper away: a later notification reads again
            log.warning("could not re-read ACLs after a change notification", exc_info=True)
            return
        if self._acl_listener is not None:
            for pattern, entries in got:
                self._acl_listener(pattern, entries)

    # -- writes (AdminZkClient) ----------------------------------------------------------------------
    def _require_zookeeper(self) -> None:
        """While ZooKeeper is away, refuse admin writes (retriable) at once instead of letting them wait
        on a worker thread, each holding its client's request, until it comes back."""
        if not self.zk.connected:
            raise Errors.RequestTimedOutError(f"ZooKeeper at {self.zk.connect_string} is unavailable")

    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> TopicMetadata:
        self._require_zookeeper()
        topic_id = uuid.uuid4()
        try:
            self.zk.create_topic(name, topic_id, assignment, configs)
        except TopicExistsError as exc:
            raise Errors.TopicAlreadyExistsError(f"Topic '{name}' already exists.") from exc
        # Leaders come from the controller; until its UpdateMetadata arrives the partitions have none.
        parts = {p: PartitionState(p, -1, -1, list(reps), []) for p, reps in assignment.items()}
        return TopicMetadata(name, topic_id, parts, dict(configs))

    async def create_topic_async(self, name: str, assignment: dict[int, list[int]],
                                 configs: dict[str, str]) -> TopicMetadata:
        self._require_zookeeper()  # here too: refused at once, before a worker thread is taken
        try:
            created = await self._off_loop(self.create_topic, name, assignment, configs)  # touches no cache
        except Errors.TopicAlreadyExistsError:
            self._note_created(name)
            raise
        self._note_created(name)
        return created

    def delete_topic(self, name: str, recorded_elsewhere: bool = False) -> None:
        self._require_zookeeper()
        self.zk.mark_topic_for_deletion(name)

    async def delete_topic_async(self, name: str, recorded_elsewhere: bool = False) -> None:
        self._require_zookeeper()  # here too: refused at once, before a worker thread is taken
        await self._off_loop(self.delete_topic, name, recorded_elsewhere)

    def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMetadata:
        self._require_zookeeper()
        self._write_partitions(name, assignment)
        return self._cached_topic(name)

    async def add_partitions_async(self, name: str, assignment: dict[int, list[int]]) -> TopicMetadata:
        self._require_zookeeper()
        topic_id = await self._off_loop(self._write_partitions, name, assignment)
        cached = self._image.topics.get(name)
        if cached is not None:
            return cached
        # Not in the cache yet (created a moment ago): what was written, leaders to come.
        return TopicMetadata(name, topic_id or uuid.UUID(int=0),
                             {p: PartitionState(p, -1, -1, list(r), []) for p, r in assignment.items()})

    def _write_partitions(self, name: str, assignment: dict[int, list[int]]) -> uuid.UUID | None:
        """ZooKeeper only (safe on a worker thread): the merged assignment, set on the znode's version.
        Partitions already assigned are never replaced (a caller that counted from a stale view fails)."""
        got = self.zk.get_data(zd.topic_path(name))
        if got is None:
            raise KeyError(name)
        current = zd.decode_topic_assignment(got[0])
        if current.adding_replicas or current.removing_replicas:  # as Kafka: a move's state must not be lost
            raise Errors.ReassignmentInProgressError(f"A partition reassignment of topic {name} is in progress.")
        if set(assignment) & set(current.partitions) or min(assignment, default=0) != len(current.partitions):
            raise Errors.InvalidPartitionsError(
                f"Topic {name} has {len(current.partitions)} partitions now; retry with that count.")
        merged = {**current.partitions, **assignment}
        self.zk.set_topic_assignment(name, current.topic_id, merged, got[1].version)
        return current.topic_id

    def _cached_topic(self, name: str) -> TopicMetadata:
        topic = self._image.topics.get(name)
        if topic is None:
            raise KeyError(name)
        return topic

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        self._require_zookeeper()
        self.zk.set_topic_configs(name, configs)
        return self._configs_written(name, configs)

    async def set_topic_configs_async(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        self._require_zookeeper()
        await self._off_loop(self.zk.set_topic_configs, name, configs)
        return self._configs_written(name, configs)

    def _configs_written(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        topic = dataclasses.replace(self._cached_topic(name), configs=dict(configs))
        self._configs[name] = dict(configs)
        self.publish_delta(MetadataDelta.of([topic], configs_changed=[name]))
        return topic

    def broker_configs(self, broker_id: int | None) -> dict[str, str]:
        return self.zk.get_broker_configs(broker_id)

    def set_broker_configs(self, broker_id: int | None, configs: dict[str, str]) -> None:
        """Write ``/config/brokers/<id|<default>>`` and its change notification (every broker watches)."""
        self._require_zookeeper()
        self.zk.set_broker_configs(broker_id, configs)

    def allocate_producer_id_block(self, size: int) -> int:
        return self.zk.allocate_producer_id_block(self.broker_id, size)

    async def allocate_producer_id_block_async(self, size: int) -> int:
        self._require_zookeeper()
        return await self._off_loop(self.zk.allocate_producer_id_block, self.broker_id, size)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.zk.close()
