"""Cluster metadata: the interface every metadata store implements.

The broker only talks to `MetadataStore`; the embedded single-node store is
the implementation today, a ZooKeeper-backed one (kazoo) comes with
replication. Keeping topic IDs, partition assignments and topic configs here
(not in the log directories) mirrors Kafka, where the controller owns them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from strom.metadata.image import MetadataDelta, MetadataImage
from strom.metadata.replica_assignment import BrokerMetadata
from strom.security.acl import AccessControlEntry, ResourcePattern

log = logging.getLogger(__name__)


@dataclass
class BrokerInfo:
    """A live broker. host/port are its inter-broker listener's; `endpoints` has every listener's
    advertised address, by listener name (empty = the one endpoint host/port)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)

    def endpoint(self, listener_name: str) -> tuple[str, int] | None:
        """Where a client that came in on `listener_name` reaches this broker (None: no such listener here,
        and Kafka leaves such a broker out of the answer)."""
        if not self.endpoints:
            return self.host, self.port
        return self.endpoints.get(listener_name)


@dataclass
class PartitionState:
    """Leader, epoch, replicas and ISR of one partition, as the controller records them."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    partition_epoch: int = 0  # the state znode's version: AlterPartition must name the current one
    offline_replicas: list[int] = field(default_factory=list)
    # While the partition is being reassigned (KIP-455, from LeaderAndIsr): replicas joining and leaving.
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")

    @property
    def replication_factor(self) -> int:
        first = self.partitions.get(0)
        return len(first.replicas) if first else 0


# The one subscriber of a store: the broker's MetadataPublisher, which turns deltas into ordered calls.
MetadataListener = Callable[[MetadataDelta], None]


EntityListener = Callable[[str, str], None]
# Called on the event loop with a resource pattern's ACLs as they are now, after any broker changed them.
AclListener = Callable[[ResourcePattern, frozenset[AccessControlEntry]], None]
AclUpdate = Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]


class MetadataStore(ABC):
    """What the broker needs from the cluster's source of truth."""

    cluster_id: str

    def __init__(self) -> None:
        self._publisher: MetadataListener | None = None
        self._image = MetadataImage()  # what the broker serves; replaced by publish_delta, never changed
        self._changed: asyncio.Future[None] | None = None  # resolved by the next metadata update
        self._entity_listeners: list[EntityListener] = []

    def set_publisher(self, publisher: MetadataListener | None) -> None:
        """One subscriber, not a listener list: the order of reactions is the publisher's explicit code."""
        self._publisher = publisher

    @property
    def image(self) -> MetadataImage:
        return self._image

    def publish_delta(self, delta: MetadataDelta) -> None:
        """The one way the served metadata changes (on the loop): the image is replaced, waiters in
        ``await_leaders`` / ``await_deleted`` wake, and the publisher applies the delta in its order.
        A store produces deltas from its source of truth; a Raft metadata log would be one more producer."""
        self._image = self._image.apply(delta)
        self._metadata_changed()
        if self._publisher is not None:
            self._publisher(delta)

    @abstractmethod
    def register_broker(self, broker: BrokerInfo) -> None: ...

    def live_brokers(self) -> list[BrokerInfo]:
        return list(self._image.brokers.values())

    async def assignable_brokers(self) -> list[BrokerMetadata]:
        """Brokers new replicas may be placed on, with their racks, by id
        (Kafka's AdminZkClient asks ZooKeeper, not the cache)."""
        return sorted(BrokerMetadata(b.broker_id, b.rack) for b in self.live_brokers())

    def controller_id(self) -> int:
        return self._image.controller_id

    def topics(self) -> Mapping[str, TopicMetadata]:
        """Every topic by name: the current image's read-only mapping (a later change replaces it)."""
        return self._image.topics

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics().get(name)

    def being_created(self, name: str) -> bool:
        """Whether the topic exists at the source of truth but this broker's cache has no partitions for it
        yet (Metadata answers LEADER_NOT_AVAILABLE for it, never UNKNOWN_TOPIC_OR_PARTITION)."""
        return False

    async def read_topic_async(self, name: str) -> TopicMetadata | None:
        """A topic's assignment as the source of truth has it now, even if the cache has not caught up
        (Kafka's AdminZkClient reads ZooKeeper before adding partitions)."""
        return self.topic(name)

    def topic_configs(self, name: str) -> dict[str, str]:
        """A topic's config overrides (a cluster store may have them before the topic's partitions)."""
        topic = self.topic(name)
        return dict(topic.configs) if topic else {}

    async def load_topic_configs(self, names: Collection[str]) -> None:  # noqa: B027 - optional hook
        """Make ``topic_configs`` of these topics a cache read (a cluster store fetches them off the loop)."""

    def _metadata_changed(self) -> None:
        """Wake everyone waiting in ``await_leaders``; a store calls it after applying an update."""
        if self._changed is not None:
            if not self._changed.done():
                self._changed.set_result(None)
            self._changed = None

    def missing_leaders(self, partitions: Mapping[str, tuple[uuid.UUID, Collection[int]]]) -> set[str]:
        """Topics (name -> (topic id, partitions)) of which some partition has no leader in the cache yet."""
        missing = set()
        for name, (topic_id, indexes) in partitions.items():
            topic = self.topic(name)
            if topic is None or topic.topic_id != topic_id or any(
                    (s := topic.partitions.get(p)) is None or s.leader < 0 for p in indexes):
                missing.add(name)
        return missing

    async def await_leaders(self, partitions: Mapping[str, tuple[uuid.UUID, Collection[int]]],
                            timeout_ms: int) -> set[str]:
        """Wait until every listed partition has a leader (Kafka's DelayedCreatePartitions) or the time
        is up; returns the topics still missing one. Woken by metadata updates, not by polling."""
        return await self._await_metadata(lambda: self.missing_leaders(partitions), timeout_ms)

    async def await_metadata(self, ready: Callable[[], bool], timeout_ms: int) -> bool:
        """Wait until ``ready()`` holds on this broker's metadata or the time is up; returns ``ready()``.
        Woken by metadata updates, not by polling."""
        return not await self._await_metadata(lambda: set() if ready() else {"pending"}, timeout_ms)

    async def await_deleted(self, topics: Mapping[str, uuid.UUID], timeout_ms: int) -> set[str]:
        """Kafka's DelayedDeleteTopics: wait until this broker's metadata no longer has these topics (name ->
        topic id) or the time is up; returns those still there."""
        def remaining() -> set[str]:
            return {name for name, topic_id in topics.items()
                    if (t := self.topic(name)) is not None and t.topic_id == topic_id}

        return await self._await_metadata(remaining, timeout_ms)

    async def _await_metadata(self, pending: Callable[[], set[str]], timeout_ms: int) -> set[str]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        while missing := pending():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return missing
            if self._changed is None:
                self._changed = loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._changed), remaining)
            except TimeoutError:
                pass
        return set()

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        """O(1) for Fetch v13+, which names topics by id on every request."""
        return self._image.topics_by_id.get(topic_id)

    @abstractmethod
    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> TopicMetadata:
        """Create a topic; `assignment` maps partition -> replica broker ids (first is leader)."""

    @abstractmethod
    def delete_topic(self, name: str, recorded_elsewhere: bool = False) -> None:
        """Delete a topic.  ``recorded_elsewhere``: the deletion is already durable (tombstoned
        partition dirs), so a failing metadata write may be retried later instead of failing it."""

    @property
    def save_pending(self) -> bool:
        """Whether an acknowledged change still waits to be written durably (see retry_pending_save)."""
        return False

    def retry_pending_save(self) -> bool:
        """Try again to persist a change whose write failed; True once nothing is pending."""
        return True

    @abstractmethod
    def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMetadata: ...

    @abstractmethod
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata: ...

    # -- the admin path's writes, awaitable: a store whose truth is remote runs them off the event loop --
    async def create_topic_async(self, name: str, assignment: dict[int, list[int]],
                                 configs: dict[str, str]) -> TopicMetadata:
        return self.create_topic(name, assignment, configs)

    async def delete_topic_async(self, name: str, recorded_elsewhere: bool = False) -> None:
        self.delete_topic(name, recorded_elsewhere)

    async def add_partitions_async(self, name: str, assignment: dict[int, list[int]]) -> TopicMetadata:
        return self.add_partitions(name, assignment)

    async def set_topic_configs_async(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        return self.set_topic_configs(name, configs)

    @abstractmethod
    def broker_configs(self, broker_id: int | None) -> dict[str, str]:
        """Dynamic configs of one broker, or of the cluster default for None (Kafka's
        ``/config/brokers/<id>`` and ``/config/brokers/<default>``). May block: call from an executor."""

    @abstractmethod
    def set_broker_configs(self, broker_id: int | None, configs: dict[str, str]) -> None:
        """Replace one broker's (or the cluster default's) dynamic configs durably. May block."""

    # -- client entities (Kafka's /config/users and /config/clients: SCRAM credentials, quotas) ----------
    def add_entity_listener(self, listener: EntityListener) -> None:
        """Called on the event loop after any broker changed an entity's configs."""
        self._entity_listeners.append(listener)

    def _entity_changed(self, entity_type: str, name: str) -> None:
        for listener in self._entity_listeners:
            try:
                listener(entity_type, name)
            except Exception:
                log.exception("entity config listener failed for %s/%s", entity_type, name)

    def entity_configs(self, entity_type: str, name: str) -> dict[str, str]:
        return dict(self.all_entity_configs(entity_type).get(name, {}))

    @abstractmethod
    def all_entity_configs(self, entity_type: str) -> dict[str, dict[str, str]]:
        """Every entity of the type with configs, by name ("alice", "<default>", "alice/clients/app")."""

    async def read_entity_configs_async(self, entity_type: str, name: str) -> dict[str, str]:
        """One entity's configs from the source of truth (not a cache another broker's change may not have
        reached yet): read before a read-modify-write such as AlterClientQuotas."""
        return self.entity_configs(entity_type, name)

    @abstractmethod
    async def set_entity_configs_async(self, entity_type: str, name: str, configs: dict[str, str]) -> None:
        """Replace one entity's configs ({} removes them) and tell every broker."""

    # -- ACLs (Kafka's /kafka-acl and /kafka-acl-extended) ------------------------------------------------
    @abstractmethod
    def load_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every resource pattern's ACLs. May block: call from an executor."""

    @abstractmethod
    async def update_acls_async(self, pattern: ResourcePattern, update: AclUpdate) -> frozenset[AccessControlEntry]:
        """Replace a pattern's ACLs by ``update(current)`` atomically against concurrent writers (other
        brokers too), tell every broker, and return the result."""

    @abstractmethod
    def watch_acls(self, listener: AclListener) -> None:
        """Call ``listener`` (on the loop) whenever any broker changed some pattern's ACLs. May block."""

    @abstractmethod
    def allocate_producer_id_block(self, size: int) -> int:
        """Reserve `size` producer ids; returns the first one. Never hands out an id twice."""

    async def allocate_producer_id_block_async(self, size: int) -> int:
        return self.allocate_producer_id_block(size)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (sessions, files)."""
