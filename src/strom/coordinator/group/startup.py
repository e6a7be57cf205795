"""Wiring of the group coordinator into the broker: config, ownership, the offsets topic.

The coordinator of a group is whichever broker leads the group's partition of
``__consumer_offsets``; this module keeps the coordinator's set of owned partitions
in step with the metadata store (load on election, unload on resignation) and
creates the topic on first use, as Kafka does when the first FindCoordinator arrives.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import kafka.errors as Errors

from strom.cluster.metadata import TopicMetadata
from strom.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from strom.coordinator.group.group_metadata_manager import GROUP_METADATA_TOPIC_NAME, GroupMetadataManager
from strom.server_common.timing_wheel import Timer

if TYPE_CHECKING:
    from strom.broker.server import KafkaServer

log = logging.getLogger(__name__)
_LOADS: set[asyncio.Task[None]] = set()  # keeps running loads referenced until they finish


def create_group_coordinator(server: KafkaServer, timer: Timer) -> GroupCoordinator:
    cfg = server.config
    manager = GroupMetadataManager(
        server.broker_id, server.replica_manager,
        num_partitions=_num_partitions(server),
        retention_ms=cfg.get("offsets.retention.minutes") * 60_000,
        max_metadata_size=cfg.get("offset.metadata.max.bytes"),
    )
    config = GroupConfig(
        min_session_timeout_ms=cfg.get("group.min.session.timeout.ms"),
        max_session_timeout_ms=cfg.get("group.max.session.timeout.ms"),
        initial_rebalance_delay_ms=cfg.get("group.initial.rebalance.delay.ms"),
        max_size=cfg.get("group.max.size"),
    )
    coordinator = GroupCoordinator(server.broker_id, manager, config, timer)

    def on_metadata_change(kind: str, topic: TopicMetadata) -> None:
        if topic.name == GROUP_METADATA_TOPIC_NAME:
            sync_ownership(server, coordinator)

    server.metadata.add_listener(on_metadata_change)
    return coordinator


def _num_partitions(server: KafkaServer) -> int:
    """An existing topic's partition count wins over the config, as in Kafka."""
    topic = server.metadata.topic(GROUP_METADATA_TOPIC_NAME)
    if topic is not None and topic.partitions:
        return len(topic.partitions)
    return server.config.get("offsets.topic.num.partitions")


def sync_ownership(server: KafkaServer, coordinator: GroupCoordinator) -> None:
    """Load partitions we now lead, unload those we no longer lead."""
    topic = server.metadata.topic(GROUP_METADATA_TOPIC_NAME)
    manager = coordinator.manager
    led: set[int] = set()
    if topic is not None:
        manager.num_partitions = len(topic.partitions) or manager.num_partitions
        led = {p for p, st in topic.partitions.items() if st.leader == server.broker_id
               and (GROUP_METADATA_TOPIC_NAME, p) in server.replica_manager.partitions}
    for partition in sorted(manager.owned_partitions - led):
        coordinator.on_resignation(partition)
    for partition in sorted(led - manager.owned_partitions - manager.loading_partitions):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coordinator.on_election(partition)
        else:
            manager.loading_partitions.add(partition)  # from now on: COORDINATOR_LOAD_IN_PROGRESS
            task = loop.create_task(coordinator.load_partition(partition))
            _LOADS.add(task)
            task.add_done_callback(_LOADS.discard)


def ensure_offsets_topic(server: KafkaServer) -> TopicMetadata | None:
    """Create ``__consumer_offsets`` on first use: compacted, replication capped to live brokers."""
    topic = server.metadata.topic(GROUP_METADATA_TOPIC_NAME)
    if topic is not None:
        return topic
    cfg = server.config
    live = len(server.metadata.live_brokers())
    rf = min(cfg.get("offsets.topic.replication.factor"), max(live, 1))
    try:
        server.admin_manager.create_topic(
            GROUP_METADATA_TOPIC_NAME, cfg.get("offsets.topic.num.partitions"), rf,
            configs={"cleanup.policy": "compact", "segment.bytes": str(cfg.get("offsets.topic.segment.bytes")),
                     "compression.type": "producer"})
        log.info("created %s with replication factor %d", GROUP_METADATA_TOPIC_NAME, rf)
    except Errors.TopicAlreadyExistsError:
        pass
    return server.metadata.topic(GROUP_METADATA_TOPIC_NAME)
