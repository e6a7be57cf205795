"""LocalController: a single node's in-process controller over its embedded metadata file.

A single node is a one-broker cluster. Where the ZooKeeper controller turns a new topic into
LeaderAndIsr requests, this controller turns a topic written to the embedded file into the same
LeaderAndIsr-shaped partition states (leader and ISR as the file records them: this broker) and
applies them through ``MetadataPublisher.apply_leadership``, the path a cluster broker takes:
logs opened and leader epochs written on the log dirs' storage threads, in chunks. Deletion goes
through ``stop_replicas``. The file stays the source of truth; its writes run on the store's
writer thread.

What a single node keeps that a cluster does not: CreateTopics and CreatePartitions are all or
nothing on disk. The new replicas' logs are created first (so a full disk or no descriptors
fails the request with nothing left), then the file is written, and the logs go again if that
write fails. A deletion tombstones the partition dirs before the file forgets the topic, so it
works on a full disk (ADR 0005).

Topic writes are serialized (one at a time, in arrival order): the check that a name is free,
its logs and its file write form one step that another creation of the name cannot interleave.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

import kafka.errors as Errors

from strom.broker.replica_manager import LeaderAndIsrPartition
from strom.controller.reassignment import ReplicaAssignment, invalid_target
from strom.metadata.image import MetadataDelta
from strom.metadata.store import MetadataStore, TopicMetadata

if TYPE_CHECKING:
    from strom.metadata.embedded import EmbeddedMetadataStore
    from strom.metadata.publisher import MetadataPublisher
    from strom.server_common.types import TopicPartition

log = logging.getLogger(__name__)

# The single node's controller never changes: one epoch for the broker's life.
LOCAL_CONTROLLER_EPOCH = 1


class LocalController:
    def __init__(self, store: EmbeddedMetadataStore, publisher: MetadataPublisher) -> None:
        self.store = store
        self.publisher = publisher
        self.replica_manager = publisher.replica_manager
        self._writes = asyncio.Lock()  # one topic write at a time (see the module docstring)

    @staticmethod
    def leadership(topic: TopicMetadata, partitions: Collection[int] | None = None,
                   is_new: bool = False) -> list[LeaderAndIsrPartition]:
        """LeaderAndIsr-shaped states of a topic's partitions (all, or those named), as the file records them."""
        wanted = topic.partitions if partitions is None else partitions
        return [LeaderAndIsrPartition(topic.name, topic.topic_id, dataclasses.replace(topic.partitions[p]), is_new)
                for p in sorted(wanted)]

    async def startup(self) -> None:
        """Every topic the file records becomes this broker's partitions, through LeaderAndIsr."""
        await asyncio.get_running_loop().run_in_executor(None, self.store.start_writer)
        await self._apply([lp for topic in self.store.topics().values() for lp in self.leadership(topic)])

    async def _apply(self, partitions: list[LeaderAndIsrPartition]) -> None:
        errors = await self.publisher.apply_leadership(LOCAL_CONTROLLER_EPOCH, partitions, self._recorded_configs)
        rm = self.replica_manager
        offline: list[TopicPartition] = []
        for tp, code in errors.items():
            if code == Errors.KafkaStorageError.errno and tp not in rm.partitions:
                offline.append(tp)  # its log dir is offline: answer KAFKA_STORAGE_ERROR, not an unknown partition
        if offline:
            rm.offline_partitions.update(offline)
            log.error("partitions offline (their log dir is): %s", ", ".join(f"{t}-{p}" for t, p in sorted(offline)))

    def _recorded_configs(self, name: str) -> dict[str, str]:
        topic = self.store.recorded_topic(name)  # a new topic is recorded before it is published
        return dict(topic.configs) if topic is not None else {}

    async def create_topic(self, name: str, assignment: dict[int, list[int]],
                           configs: dict[str, str]) -> TopicMetadata:
        async with self._writes:
            if self.store.recorded_topic(name) is not None:  # created while this request waited its turn
                raise Errors.TopicAlreadyExistsError(f"Topic '{name}' already exists.")
            topic = self.store.new_topic(name, assignment, configs)
            await self._write_with_logs(topic, self.leadership(topic, is_new=True))
            await self._apply_then_publish(topic, self.leadership(topic, is_new=True))
            return topic

    async def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMetadata:
        async with self._writes:
            topic = self.store.with_partitions(name, assignment)
            new = self.leadership(topic, assignment, is_new=True)
            await self._write_with_logs(topic, new)
            await self._apply_then_publish(topic, new)
            return topic

    async def _apply_then_publish(self, topic: TopicMetadata, new: list[LeaderAndIsrPartition]) -> None:
        """Written: the replicas take their leadership, then the image serves the topic (whatever the
        replicas' outcome, the image follows the file)."""
        try:
            await self._apply(new)
        finally:
            self.store.publish_delta(MetadataDelta.of([topic]))

    async def _write_with_logs(self, topic: TopicMetadata, new: list[LeaderAndIsrPartition]) -> None:
        """Logs first, then the file; if the file write fails, the logs go again (all or nothing)."""
        configs = topic.configs
        await self.replica_manager.create_replica_logs(new, lambda _: configs)
        try:
            await self.store.write_topic(topic)
        except BaseException:
            await self.replica_manager.remove_replica_logs(new)
            raise

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        async with self._writes:
            recorded = self.store.recorded_topic(name)
            if recorded is None:
                raise KeyError(name)
            topic = dataclasses.replace(recorded, configs=dict(configs))
            await self.store.write_topic(topic)
            self.store.publish_delta(MetadataDelta.of([topic], configs_changed=[name]))  # the logs take them
            return topic

    async def delete_topic(self, name: str) -> None:
        """StopReplica (delete) of every hosted partition, then the file: the tombstoned dirs record the
        deletion durably and free the space the file write may need; then the tombstones go."""
        async with self._writes:
            topic = self.store.recorded_topic(name)
            if topic is None:
                raise KeyError(name)
            rm = self.replica_manager
            hosted = {tp for tp in rm.partitions if tp[0] == name}
            doomed = {tp: True for tp in hosted | {tp for tp in rm.offline_partitions if tp[0] == name}}
            errors = await self.publisher.stop_replicas(LOCAL_CONTROLLER_EPOCH, doomed)
            tombstoned = sum(1 for tp in hosted if not errors.get(tp))
            forgotten = await self.store.write_deletion(name, recorded_elsewhere=tombstoned > 0)
            self.store.publish_delta(MetadataDelta.of(deleted=[forgotten]))
            await rm.purge_tombstones()


def local_reassignment_results(store: MetadataStore, broker_id: int,
                               requests: dict[TopicPartition, list[int] | None]) -> dict[TopicPartition, tuple[int, str | None]]:
    """AlterPartitionReassignments on a single node (a one-broker cluster): nothing is ever being moved, a
    target equal to the current replicas is done at once, and any other broker is not registered."""
    results: dict[TopicPartition, tuple[int, str | None]] = {}
    for tp, target in requests.items():
        topic = store.topic(tp[0])
        state = topic.partitions.get(tp[1]) if topic is not None else None
        if target is None:
            results[tp] = (Errors.NoReassignmentInProgressError.errno,
                           f"No reassignment of {tp[0]}-{tp[1]} is in progress.")
            continue
        why = invalid_target(target, ReplicaAssignment(list(state.replicas) if state else []), [broker_id])
        if why is not None:
            results[tp] = (Errors.InvalidReplicationAssignmentError.errno, why)
        elif state is None:
            results[tp] = (Errors.UnknownTopicOrPartitionError.errno, "The partition does not exist.")
        elif sorted(target) != sorted(state.replicas):  # recorded on another broker id: nothing can move here
            results[tp] = (Errors.InvalidReplicationAssignmentError.errno,
                           f"Only broker {broker_id} can host replicas on a single node.")
        else:
            results[tp] = (0, None)
    return results
