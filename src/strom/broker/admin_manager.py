"""AdminManager: topic creation, deletion, partition growth and config changes.

Validation happens here (names, counts, replication factor against live
brokers, topic configs) so CreateTopics, Metadata auto-creation and the CLI
all get identical rules and error codes. Placement is ``replica_assignment``'s.
Every method is a coroutine and calls the store's async writes, one path in both modes: in a
cluster they go to ZooKeeper, on a single node to its controller (metadata/local_controller.py),
which creates the logs first and writes the metadata file off the event loop.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Mapping

import kafka.errors as Errors

from strom.config import BrokerConfig, ConfigError, validate_topic_configs, validate_topic_name
from strom.metadata.replica_assignment import (
    BrokerMetadata,
    assign_replicas_to_brokers,
    start_index_for_new_partitions,
)
from strom.metadata.store import MetadataStore, TopicMetadata

log = logging.getLogger(__name__)


class AdminManager:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore) -> None:
        self.config = config
        self.metadata = metadata

    async def _brokers(self) -> list[BrokerMetadata]:
        return await self.metadata.assignable_brokers()

    async def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                           assignment: dict[int, list[int]] | None = None,
                           configs: dict[str, str | None] | None = None,
                           validate_only: bool = False) -> TopicMetadata | None:
        """Validate, place and record a topic. Leaders come later (the controller's); see ``await_leaders``."""
        try:
            validate_topic_name(name)
        except Exception as exc:
            raise Errors.InvalidTopicError(str(exc)) from exc
        if self.metadata.topic(name) is not None:
            raise Errors.TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        if assignment:
            if num_partitions not in (-1, len(assignment)) or replication_factor != -1:
                raise Errors.InvalidRequestError("Both numPartitions or replicationFactor and replicasAssignment "
                                                 "were set. Both cannot be used at the same time.")
            live = {b.id for b in await self._brokers()}
            for reps in assignment.values():
                if not reps or len(set(reps)) != len(reps) or not set(reps) <= live:
                    raise Errors.InvalidReplicationAssignmentError(f"Invalid replica assignment {reps}")
            if sorted(assignment) != list(range(len(assignment))):
                raise Errors.InvalidReplicationAssignmentError("partitions must be numbered 0..n-1")
        else:
            if num_partitions == -1:
                num_partitions = self.config.get("num.partitions")
            if replication_factor == -1:
                replication_factor = self.config.get("default.replication.factor")
            if num_partitions <= 0:
                raise Errors.InvalidPartitionsError("Number of partitions must be larger than 0.")
            if replication_factor <= 0:
                raise Errors.InvalidReplicationFactorError("Replication factor must be larger than 0.")
            assignment = assign_replicas_to_brokers(await self._brokers(), num_partitions, replication_factor)
        try:
            clean = validate_topic_configs(configs or {})
        except ConfigError as exc:
            raise Errors.InvalidConfigurationError(str(exc)) from exc
        if validate_only:
            return None
        log.info("creating topic %s with %d partitions", name, len(assignment))
        try:
            return await self.metadata.create_topic_async(name, assignment, clean)
        except OSError as exc:
            raise Errors.KafkaStorageError(f"cannot record topic {name} in the metadata: {exc}") from exc

    async def await_leaders(self, created: dict[str, TopicMetadata | tuple[uuid.UUID, Collection[int]]],
                            timeout_ms: int) -> set[str]:
        """Kafka's DelayedCreatePartitions: wait (at most ``timeout_ms``, 0 = not at all) until the
        controller has elected a leader for every new partition and this broker's metadata shows it,
        so a client that produces right after CreateTopics finds leaders. Returns the topics still
        without (their creation stands; Kafka answers REQUEST_TIMED_OUT for them)."""
        wanted = {name: (t.topic_id, list(t.partitions)) if isinstance(t, TopicMetadata) else t
                  for name, t in created.items()}
        if timeout_ms <= 0:
            return self.metadata.missing_leaders(wanted)
        return await self.metadata.await_leaders(wanted, timeout_ms)

    async def delete_topic(self, name: str) -> TopicMetadata:
        # Not in the cache yet (created a moment ago): ZooKeeper knows it, as Kafka's AdminZkClient asks.
        topic = self.metadata.topic(name) or await self.metadata.read_topic_async(name)
        if topic is None:
            raise Errors.UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        if not self.config.get("delete.topic.enable"):
            raise Errors.TopicDeletionDisabledError("Topic deletion is disabled.")
        log.info("deleting topic %s", name)
        try:
            await self.metadata.delete_topic_async(name)
        except OSError as exc:
            raise Errors.KafkaStorageError(f"cannot record the deletion of topic {name}: {exc}") from exc
        return topic

    async def create_partitions(self, name: str, count: int, assignment: list[list[int]] | None,
                                validate_only: bool) -> tuple[uuid.UUID, dict[int, list[int]]]:
        """Add partitions (returns the topic id and their assignment); as for CreateTopics, leaders come
        later. The topic is read from the source of truth, not the cache: a topic created a moment ago
        (CreateTopics with timeout 0) is there before any UpdateMetadata, and the count must be current."""
        topic = await self.metadata.read_topic_async(name)
        if topic is None:
            raise Errors.UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        current = len(topic.partitions)
        if count <= current:
            raise Errors.InvalidPartitionsError(
                f"Topic currently has {current} partitions, {count} would not be an increase."
            )
        if assignment:
            if len(assignment) != count - current:
                raise Errors.InvalidReplicationAssignmentError(
                    f"Increasing the number of partitions by {count - current} but {len(assignment)} assignments provided."
                )
            new = {current + i: list(reps) for i, reps in enumerate(assignment)}
            live = {b.id for b in await self._brokers()}
            rf = topic.replication_factor
            for reps in new.values():
                if not reps or len(set(reps)) != len(reps) or not set(reps) <= live or (rf and len(reps) != rf):
                    raise Errors.InvalidReplicationAssignmentError(f"Invalid replica assignment {reps}")
        else:
            brokers = await self._brokers()
            first = topic.partitions.get(0)
            # Continue the topic's round-robin where partition 0's leader put it, as Kafka does.
            start = start_index_for_new_partitions(brokers, first.replicas[0]) if first and first.replicas else -1
            new = assign_replicas_to_brokers(brokers, count - current, topic.replication_factor or 1,
                                             fixed_start_index=start, start_partition_id=current)
        if validate_only:
            return topic.topic_id, new
        try:
            await self.metadata.add_partitions_async(name, new)
        except OSError as exc:
            raise Errors.KafkaStorageError(f"cannot record the new partitions of {name}: {exc}") from exc
        return topic.topic_id, new

    async def set_topic_configs(self, name: str, configs: Mapping[str, str | None], validate_only: bool) -> None:
        topic = self.metadata.topic(name)
        if topic is None:
            raise Errors.UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        try:
            clean = validate_topic_configs(configs)
        except ConfigError as exc:
            raise Errors.InvalidConfigurationError(str(exc)) from exc
        if not validate_only:
            await self.metadata.set_topic_configs_async(name, clean)
