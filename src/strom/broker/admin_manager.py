"""AdminManager: topic creation, deletion, partition growth and config changes.

Validation happens here (names, counts, replication factor against live
brokers, topic configs) so CreateTopics, Metadata auto-creation and the CLI
all get identical rules and error codes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import kafka.errors as Errors

from strom.cluster.metadata import MetadataStore, TopicMetadata
from strom.config import BrokerConfig, ConfigError, validate_topic_configs, validate_topic_name

if TYPE_CHECKING:
    from strom.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class AdminManager:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore,
                 replica_manager: ReplicaManager | None = None) -> None:
        self.config = config
        self.metadata = metadata
        # When set, topic data is created before and deleted before the metadata changes (no half states).
        self.replica_manager = replica_manager

    def _assign(self, first_partition: int, count: int, replication_factor: int) -> dict[int, list[int]]:
        """Round-robin replica placement starting at a rotating broker, like Kafka's default."""
        brokers = self.metadata.assignable_brokers()
        if replication_factor > len(brokers):
            raise Errors.InvalidReplicationFactorError(
                f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}."
            )
        n = len(brokers)
        return {
            p: [brokers[(p + r) % n] for r in range(replication_factor)]
            for p in range(first_partition, first_partition + count)
        }

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     assignment: dict[int, list[int]] | None = None,
                     configs: dict[str, str | None] | None = None, validate_only: bool = False) -> TopicMetadata | None:
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
            live = set(self.metadata.assignable_brokers())
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
            assignment = self._assign(0, num_partitions, replication_factor)
        try:
            clean = validate_topic_configs(configs or {})
        except ConfigError as exc:
            raise Errors.InvalidConfigurationError(str(exc)) from exc
        if validate_only:
            return None
        log.info("creating topic %s with %d partitions", name, len(assignment))
        rm = self.replica_manager
        if rm is None:
            return self.metadata.create_topic(name, assignment, clean)
        rm.create_topic_logs(name, assignment, clean)  # logs first: a failure leaves nothing behind
        try:
            return self.metadata.create_topic(name, assignment, clean)
        except Exception as exc:
            if self.metadata.topic(name) is None:
                rm.remove_topic_logs(name, assignment)
            if isinstance(exc, OSError):
                raise Errors.KafkaStorageError(f"cannot record topic {name} in the metadata: {exc}") from exc
            raise

    def delete_topic(self, name: str) -> TopicMetadata:
        topic = self.metadata.topic(name)
        if topic is None:
            raise Errors.UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        if not self.config.get("delete.topic.enable"):
            raise Errors.TopicDeletionDisabledError("Topic deletion is disabled.")
        log.info("deleting topic %s", name)
        rm = self.replica_manager
        if rm is None:
            self.metadata.delete_topic(name)
            return topic
        # Data first: the tombstone renames need no free space and make the deletion durable, and
        # emptying them frees space, so the metadata write that follows can succeed on a full disk.
        tombstoned = rm.tombstone_topic(topic)
        try:
            self.metadata.delete_topic(name, recorded_elsewhere=tombstoned > 0)
        except OSError as exc:
            raise Errors.KafkaStorageError(f"cannot record the deletion of topic {name}: {exc}") from exc
        rm.purge_tombstones()
        return topic

    def create_partitions(self, name: str, count: int, assignment: list[list[int]] | None,
                          validate_only: bool) -> None:
        topic = self.metadata.topic(name)
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
        else:
            new = self._assign(current, count - current, topic.replication_factor or 1)
        if validate_only:
            return
        rm = self.replica_manager
        if rm is None:
            self.metadata.add_partitions(name, new)
            return
        rm.create_topic_logs(name, new, topic.configs)  # as for new topics: logs first, then the metadata
        try:
            self.metadata.add_partitions(name, new)
        except Exception as exc:
            if not set(new) & set(topic.partitions):
                rm.remove_topic_logs(name, new)
            if isinstance(exc, OSError):
                raise Errors.KafkaStorageError(f"cannot record the new partitions of {name}: {exc}") from exc
            raise

    def set_topic_configs(self, name: str, configs: dict[str, str | None], validate_only: bool) -> None:
        topic = self.metadata.topic(name)
        if topic is None:
            raise Errors.UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        try:
            clean = validate_topic_configs(configs)
        except ConfigError as exc:
            raise Errors.InvalidConfigurationError(str(exc)) from exc
        if not validate_only:
            self.metadata.set_topic_configs(name, clean)
