"""MetadataPublisher: turns metadata deltas into explicit, ordered calls on the broker.

Kafka's broker applies a metadata delta in one place (``applyDelta``); so does this, in a fixed
order, the same for a cluster and a single node:
1. the replica manager: configs of hosted logs, deleted topics (leadership comes as LeaderAndIsr,
   ``apply_leadership``, from the ZooKeeper controller or a single node's LocalController);
2. the coordinators whose internal topic the delta touched: load what this broker now leads,
   unload the rest.
Client entities (quotas, SCRAM) and ACLs are not topic metadata: the store tells their listeners
(the quota manager, the SCRAM cache, the authorizer) after its own write, independently of topics.
Listener lists made the order an accident of registration; here it is the code below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from strom.metadata.image import MetadataDelta

if TYPE_CHECKING:
    from strom.broker.replica_manager import LeaderAndIsrPartition, ReplicaManager
    from strom.coordinator.common import PartitionedCoordinator
    from strom.server_common.types import TopicPartition

log = logging.getLogger(__name__)


class MetadataPublisher:
    def __init__(self, replica_manager: ReplicaManager,
                 coordinators: Sequence[PartitionedCoordinator] = (),
                 sync_coordinator: Callable[[PartitionedCoordinator], None] | None = None) -> None:
        self.replica_manager = replica_manager
        self.coordinators = list(coordinators)
        self._sync = sync_coordinator

    def add_coordinator(self, coordinator: PartitionedCoordinator) -> None:
        self.coordinators.append(coordinator)

    def set_coordinator_sync(self, sync: Callable[[PartitionedCoordinator], None]) -> None:
        self._sync = sync

    def publish(self, delta: MetadataDelta) -> None:
        names = delta.topic_names
        if not names:
            return  # brokers or the controller only: nothing here depends on them
        # 1. Partitions and logs: a coordinator may only load what the replica manager hosts.
        self.replica_manager.apply_delta(delta)
        # 2. Coordinators of internal topics: load what we now lead, unload what we lost.
        self.sync_coordinators(names)

    async def apply_leadership(self, controller_epoch: int, partitions: list[LeaderAndIsrPartition],
                         topic_configs: Callable[[str], dict[str, str]]) -> dict[TopicPartition, int]:
        """LeaderAndIsr: the replica manager first (logs, leaders, fetchers), then the coordinators
        of the internal topics it touched load what this broker now leads and unload the rest."""
        errors = await self.replica_manager.become_leader_or_follower(controller_epoch, partitions, topic_configs)
        self.sync_coordinators({lp.topic for lp in partitions})
        return errors

    async def stop_replicas(self, controller_epoch: int, partitions: dict[TopicPartition, bool]
                            ) -> dict[TopicPartition, int]:
        errors = await self.replica_manager.stop_replicas(controller_epoch, partitions)
        self.sync_coordinators({tp[0] for tp in partitions})
        return errors

    def sync_coordinators(self, topics: set[str] | None = None) -> None:
        if self._sync is None:
            return
        for coordinator in self.coordinators:
            if topics is None or coordinator.topic_name in topics:
                self._sync(coordinator)
