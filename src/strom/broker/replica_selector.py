"""Replica selectors (KIP-392): which replica a consumer should fetch a partition from.

With ``replica.selector.class`` set, the leader answers a consumer's Fetch (v11+, which carries the
consumer's ``client.rack``) with ``preferred_read_replica`` when another replica suits the consumer
better, and no records; the consumer then fetches from that replica, which serves it up to its own
high watermark. Unset (the default), every consumer reads from the leader, as before KIP-392.

Only the leader selects, and only among replicas that could serve the consumer's next offset right
now: in the ISR, alive (reachable on the consumer's listener), and holding the fetch offset. A
follower out of the ISR is never picked, so a consumer is not tied to a replica that keeps lagging.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# The names ``replica.selector.class`` accepts (the config's validator lists the same ones).
KAFKA_RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
STROM_RACK_AWARE = "strom.broker.replica_selector.RackAwareReplicaSelector"


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """What a Fetch v11+ tells about the consumer (Kafka's ClientMetadata)."""

    rack_id: str
    client_id: str | None = None
    client_address: str | None = None
    listener_name: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One candidate replica as the leader sees it now."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int  # 0 for the leader


class ReplicaSelector(Protocol):
    """Picks the replica a consumer should read from; the leader (or None) keeps it on the leader."""

    def select(self, client: ClientMetadata, leader: ReplicaView, replicas: list[ReplicaView]) -> ReplicaView | None:
        ...


class RackAwareReplicaSelector:
    """A replica in the consumer's rack: the leader if it is there, else the most caught-up one of them.

    A consumer without a rack, or whose rack holds no candidate, stays on the leader."""

    def select(self, client: ClientMetadata, leader: ReplicaView, replicas: list[ReplicaView]) -> ReplicaView | None:
        if not client.rack_id:
            return leader
        same_rack = [r for r in replicas if r.rack == client.rack_id]
        if not same_rack:
            return leader
        if any(r.broker_id == leader.broker_id for r in same_rack):
            return leader
        # Most records first; among equals, the one that was in sync most recently.
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_last_caught_up_ms, -r.broker_id))


REPLICA_SELECTORS: dict[str, type[RackAwareReplicaSelector]] = {
    KAFKA_RACK_AWARE: RackAwareReplicaSelector,
    STROM_RACK_AWARE: RackAwareReplicaSelector,
}


def replica_selector_for(class_name: str | None) -> ReplicaSelector | None:
    """The selector ``replica.selector.class`` names; None (leader only) when it is unset.

    The config's validator already refused any other name at start-up; ValueError guards callers
    that bypass it."""
    if not class_name:
        return None
    cls = REPLICA_SELECTORS.get(class_name)
    if cls is None:
        raise ValueError(f"unknown replica.selector.class {class_name!r}; known: {', '.join(REPLICA_SELECTORS)}")
    return cls()
