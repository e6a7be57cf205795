"""Wiring of the transaction coordinator into the broker: its config and ``__transaction_state``.

The generic part (own the partitions of an internal topic, load on election, unload on
resignation) lives in ``strom.coordinator.common``; this module supplies what is particular
to transactions, exactly as ``coordinator.group.startup`` does for groups.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from strom.coordinator.common import attach_coordinator, ensure_internal_topic, internal_topic_partitions
from strom.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from strom.coordinator.transaction.transaction_marker_channel_manager import (
    HOLD_MARKERS_ENV,
    TransactionMarkerChannelManager,
)
from strom.coordinator.transaction.transaction_state_manager import (
    TRANSACTION_STATE_TOPIC_NAME,
    TransactionStateManager,
)
from strom.metadata.store import TopicMetadata

if TYPE_CHECKING:
    from strom.broker.admin_manager import AdminManager
    from strom.broker.server import KafkaServer
    from strom.config import BrokerConfig
    from strom.metadata.store import MetadataStore


def create_transaction_coordinator(server: KafkaServer) -> TransactionCoordinator:
    """Build the coordinator from the broker config and have it follow ``__transaction_state``."""
    cfg = server.config
    manager = TransactionStateManager(
        server.broker_id, server.replica_manager,
        num_partitions=internal_topic_partitions(server, TRANSACTION_STATE_TOPIC_NAME,
                                                 cfg.get("transaction.state.log.num.partitions")),
        transactional_id_expiration_ms=cfg.get("transactional.id.expiration.ms"),
    )
    channel = TransactionMarkerChannelManager(
        server.broker_id, server.metadata, server.replica_manager, lambda: server.group_coordinator,
        hold_markers=os.environ.get(HOLD_MARKERS_ENV) == "1", security=server.inter_broker_security)
    coordinator = TransactionCoordinator(
        server.broker_id, manager, channel, server.producer_id_manager.generate,
        lambda group_id: server.group_coordinator.manager.partition_for(group_id),
        max_timeout_ms=cfg.get("transaction.max.timeout.ms"))
    attach_coordinator(server, coordinator)
    return coordinator


async def ensure_transaction_state_topic(cfg: BrokerConfig, metadata: MetadataStore, admin_manager: AdminManager
                                         ) -> TopicMetadata | None:
    """Create ``__transaction_state`` on first use: compacted, replication and min ISR capped to live brokers."""
    rf = min(cfg.get("transaction.state.log.replication.factor"), max(len(metadata.live_brokers()), 1))
    return await ensure_internal_topic(
        metadata, admin_manager, TRANSACTION_STATE_TOPIC_NAME, cfg.get("transaction.state.log.num.partitions"), rf,
        {"cleanup.policy": "compact", "segment.bytes": str(cfg.get("transaction.state.log.segment.bytes")),
         "min.insync.replicas": str(min(cfg.get("transaction.state.log.min.isr"), rf)),
         "compression.type": "uncompressed", "unclean.leader.election.enable": "false"})
