"""The group coordinator's delayed operations, parked in the broker's purgatory.

* DelayedJoin — the join phase of a rebalance: completes as soon as every known
  member has rejoined, or when the rebalance timeout (largest among members) runs
  out, after which members that did not rejoin are dropped.
* InitialDelayedJoin — the first rebalance of an empty group waits
  ``group.initial.rebalance.delay.ms`` (extended while members keep arriving, up to
  the rebalance timeout) so a fleet of consumers starting together does one
  rebalance instead of one per member.
* DelayedHeartbeat — one per member: expires after the session timeout unless a
  heartbeat (or any proof of life) satisfied it; expiry removes the member.
* DelayedSync — the sync phase: members that got their JoinGroup response but never
  sent SyncGroup within the rebalance timeout are removed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.server_common.purgatory import DelayedOperation

if TYPE_CHECKING:
    from strom.coordinator.group.group_coordinator import GroupCoordinator
    from strom.coordinator.group.group_metadata import GroupMetadata


class DelayedJoin(DelayedOperation):
    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, rebalance_timeout_ms: int) -> None:
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_join(self.group, self.force_complete)

    def on_complete(self) -> None:
        self.coordinator.on_complete_join(self.group)

    def on_expiration(self) -> None:
        pass


class InitialDelayedJoin(DelayedJoin):
    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, delay_ms: int,
                 remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.delay_ms = delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False  # only the timer ends the initial delay

    def on_complete(self) -> None:
        self.coordinator.on_initial_join_delay_elapsed(self)


class DelayedHeartbeat(DelayedOperation):
    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, member_id: str,
                 is_pending: bool, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.is_pending = is_pending

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_heartbeat(self.group, self.member_id, self.is_pending,
                                                       self.force_complete)

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator.on_expire_heartbeat(self.group, self.member_id, self.is_pending)


class DelayedSync(DelayedOperation):
    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, generation_id: int,
                 rebalance_timeout_ms: int) -> None:
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_pending_sync(self.group, self.generation_id, self.force_complete)

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator.on_expire_pending_sync(self.group, self.generation_id)
