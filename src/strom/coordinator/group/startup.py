"""Wiring of the group coordinator into the broker: its config and the offsets topic.

The generic part (own the partitions of an internal topic, load on election, unload on
resignation) lives in ``strom.coordinator.common``; this module only supplies what is
particular to groups: ``__consumer_offsets``, its settings and the group config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.coordinator.common import attach_coordinator, ensure_internal_topic, internal_topic_partitions
from strom.coordinator.group.assignors import assignor_names
from strom.coordinator.group.consumer_group_coordinator import ConsumerGroupConfig, ConsumerGroupCoordinator
from strom.coordinator.group.group_config import GroupConfigs
from strom.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from strom.coordinator.group.group_metadata_manager import GROUP_METADATA_TOPIC_NAME, GroupMetadataManager
from strom.metadata.store import TopicMetadata
from strom.server_common.timing_wheel import Timer

if TYPE_CHECKING:
    from strom.broker.admin_manager import AdminManager
    from strom.broker.server import KafkaServer
    from strom.config import BrokerConfig
    from strom.metadata.store import MetadataStore


def create_group_coordinator(server: KafkaServer, timer: Timer) -> GroupCoordinator:
    """Build the group coordinator from the broker config and have it follow ``__consumer_offsets``."""
    cfg = server.config
    manager = GroupMetadataManager(
        server.broker_id, server.replica_manager,
        num_partitions=internal_topic_partitions(server, GROUP_METADATA_TOPIC_NAME,
                                                 cfg.get("offsets.topic.num.partitions")),
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
    if "consumer" in cfg.get("group.coordinator.rebalance.protocols"):
        coordinator.consumer_groups = ConsumerGroupCoordinator(coordinator, server.metadata, ConsumerGroupConfig(
            heartbeat_interval_ms=cfg.get("group.consumer.heartbeat.interval.ms"),
            session_timeout_ms=cfg.get("group.consumer.session.timeout.ms"),
            max_size=cfg.get("group.consumer.max.size"),
            assignors=assignor_names(cfg.get("group.consumer.assignors")),
            migration_policy=cfg.get("group.consumer.migration.policy")),
            GroupConfigs(cfg, server.metadata))
    attach_coordinator(server, coordinator)
    return coordinator


async def ensure_offsets_topic(
    cfg: BrokerConfig, metadata: MetadataStore, admin_manager: AdminManager
) -> TopicMetadata | None:
    """Create ``__consumer_offsets`` on first use: compacted, replication capped to live brokers."""
    return await ensure_internal_topic(
        metadata, admin_manager, GROUP_METADATA_TOPIC_NAME, cfg.get("offsets.topic.num.partitions"),
        cfg.get("offsets.topic.replication.factor"),
        {"cleanup.policy": "compact", "segment.bytes": str(cfg.get("offsets.topic.segment.bytes")),
         "compression.type": "producer"})
