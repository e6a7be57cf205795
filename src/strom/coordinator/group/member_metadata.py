"""MemberMetadata: one member of a classic group as the GroupCoordinator sees it.

The coordinator never interprets a member's protocol metadata (the consumer's
subscription) or its assignment: assignors run in the clients. It only keeps them,
hands them to the leader, and persists them in ``__consumer_offsets``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.coordinator.group.delayed import DelayedHeartbeat


@dataclass(slots=True)
class JoinGroupResult:
    """What a JoinGroup caller gets back once the join phase of a rebalance completes."""

    member_id: str
    error_code: int = 0
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    # (member_id, group_instance_id, metadata) for the leader only.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncGroupResult:
    error_code: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class MemberMetadata:
    """A member's identity, timeouts, supported protocols and pending responses.

    ``awaiting_join`` / ``awaiting_sync`` hold the futures of the member's JoinGroup /
    SyncGroup requests parked until the rebalance phase ends (Kafka's callbacks).
    """

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]]) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = protocols
        self.assignment: bytes = b""
        self.awaiting_join: asyncio.Future[JoinGroupResult] | None = None
        self.awaiting_sync: asyncio.Future[SyncGroupResult] | None = None
        # A member that joined but whose first join phase has not completed yet:
        # it may vanish (client disconnected) so it expires on its own, longer timer.
        self.is_new = False
        self.heartbeat_satisfied = False
        self.heartbeat: DelayedHeartbeat | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocols(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.supported_protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata, in the same order: a no-op rejoin."""
        return self.supported_protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        """Whether the member is alive for the pending session-timeout check.

        New members must prove themselves; members parked in a rebalance phase count
        as alive (the rebalance timeout governs them); others need a fresh heartbeat.
        """
        if self.is_new:
            return self.heartbeat_satisfied
        if self.is_awaiting_join or self.is_awaiting_sync:
            return True
        return self.heartbeat_satisfied

    def complete_join(self, result: JoinGroupResult) -> bool:
        fut, self.awaiting_join = self.awaiting_join, None
        if fut is not None and not fut.done():
            fut.set_result(result)
            return True
        return False

    def complete_sync(self, result: SyncGroupResult) -> bool:
        fut, self.awaiting_sync = self.awaiting_sync, None
        if fut is not None and not fut.done():
            fut.set_result(result)
            return True
        return False

    def describe(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "client_id": self.client_id, "client_host": self.client_host}

    def __repr__(self) -> str:
        return (f"MemberMetadata(member_id={self.member_id!r}, instance={self.group_instance_id!r}, "
                f"client_id={self.client_id!r}, session={self.session_timeout_ms}, "
                f"rebalance={self.rebalance_timeout_ms}, protocols={self.protocols()})")
