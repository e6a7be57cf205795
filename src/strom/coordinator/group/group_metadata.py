"""GroupMetadata: the classic group state machine, its members and committed offsets.

States and the only legal transitions (Kafka's GroupState)::

    Empty ──────────────► PreparingRebalance ──► CompletingRebalance ──► Stable
      ▲                     ▲    │                     │                  │
      └─────────────────────┼────┘ (nobody rejoined)   │                  │
                            └──────────────────────────┴──────────────────┘
    any state ──► Dead (group deleted, expired, or its partition moved away)

PreparingRebalance waits for every member to (re)join; CompletingRebalance waits
for the leader's SyncGroup with the assignment; Stable hands out assignments and
accepts heartbeats. This class holds state and answers questions about it; the
GroupCoordinator drives the transitions and owns the timers.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

from strom.coordinator.group.consumer_group import ConsumerGroup
from strom.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from strom.coordinator.group.member_metadata import MemberMetadata
from strom.server_common.types import TopicPartition


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


_VALID_PREVIOUS: dict[GroupState, set[GroupState]] = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


class IllegalGroupStateTransition(RuntimeError):
    """A bug guard: the coordinator asked for a transition Kafka's state machine forbids."""


@dataclass(slots=True)
class OffsetAndMetadata:
    """A committed offset: the next offset to consume, plus what the committer attached."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only set by OffsetCommit v2-v4 with an explicit retention time


@dataclass(slots=True)
class CommitRecordMetadataAndOffset:
    """An offset together with the log offset of the batch that carries it (Kafka's name).

    When a transactional commit completes, the offset appended later to the log wins, so a
    plain OffsetCommit written after the transaction's TxnOffsetCommit is not overwritten by
    the marker. ``append_offset`` is None while the append is still in flight.
    """

    offset: OffsetAndMetadata
    append_offset: int | None = None

    def older_than(self, other: CommitRecordMetadataAndOffset) -> bool:
        if self.append_offset is None or other.append_offset is None:
            return True
        return self.append_offset < other.append_offset


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupMetadata:
    def __init__(self, group_id: str, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.current_state_timestamp: int = now_ms()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: set[str] = set()  # got MEMBER_ID_REQUIRED, not joined yet
        self.pending_sync_members: set[str] = set()  # joined this generation, no SyncGroup yet
        self.num_members_awaiting_join = 0
        self.supported_protocols: Counter[str] = Counter()
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None
        self.offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        self.pending_offset_commits: dict[TopicPartition, int] = {}
        # Log offset of the batch behind each committed offset (see CommitRecordMetadataAndOffset).
        self.offset_append_offsets: dict[TopicPartition, int] = {}
        # producer id -> offsets written by TxnOffsetCommit, invisible until the commit marker.
        self.pending_transactional_offset_commits: dict[int, dict[TopicPartition, CommitRecordMetadataAndOffset]] = {}
        # Set while the group runs KIP-848's consumer protocol (group.protocol=consumer).
        self.consumer_group: ConsumerGroup | None = None

    # -- state -----------------------------------------------------------------
    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalGroupStateTransition(
                f"group {self.group_id} cannot move from {self.state} to {target}")
        self.state = target
        self.current_state_timestamp = now_ms()

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # -- members ---------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    @property
    def group_type(self) -> str:
        """ListGroups' type: ``consumer`` for KIP-848 groups, ``classic`` otherwise."""
        return "classic" if self.consumer_group is None else "consumer"

    @property
    def state_name(self) -> str:
        """The state as ListGroups shows it (a consumer group has its own states)."""
        return str(self.state) if self.consumer_group is None else str(self.consumer_group.state)

    @property
    def has_consumer_members(self) -> bool:
        """Members of the consumer protocol (KIP-848) are in the group: it is not empty."""
        return self.consumer_group is not None and bool(self.consumer_group.members)

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocols())
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.supported_protocols.subtract(member.protocols())
        self.supported_protocols = +self.supported_protocols
        if member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member_id(self, instance_id: str) -> str | None:
        return self.static_members.get(instance_id)

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> MemberMetadata:
        """A restarted static member takes over its old entry under a new member id."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def update_member(self, member: MemberMetadata, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int) -> None:
        self.supported_protocols.subtract(member.protocols())
        self.supported_protocols.update(name for name, _ in protocols)
        self.supported_protocols = +self.supported_protocols
        member.supported_protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms

    def has_all_members_joined(self) -> bool:
        return self.num_members_awaiting_join == len(self.members) and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else promote a member that did; False if nobody did."""
        if self.leader_id is not None:
            leader = self.members.get(self.leader_id)
            if leader is not None and leader.is_awaiting_join:
                return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -------------------------------------------------------------
    def supports_protocols(self, protocol_type: str, protocols: list[str]) -> bool:
        """Can a member with these protocols join? (Empty groups accept any non-empty set.)"""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and any(
            self.supported_protocols.get(p, 0) == len(self.members) for p in protocols)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {p for p, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its most preferred common protocol; most votes wins.

        Ties go to the protocol the leader prefers, so the choice is deterministic.
        """
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id} has no protocol supported by every member")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        winners = {p for p, v in votes.items() if v == best}
        leader = self.members.get(self.leader_id or "")
        if leader is not None:
            for name in leader.protocols():
                if name in winners:
                    return name
        return sorted(winners)[0]

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members = set(self.members)

    def compute_subscribed_topics(self) -> set[str] | None:
        """Union of the members' subscribed topics for consumer groups; None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None if self.members else set()
        topics: set[str] = set()
        for m in self.members.values():
            try:
                found = subscribed_topics(m.metadata(self.protocol_name))
            except KeyError:
                return None
            if found is None:
                return None
            topics |= found
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        assert self.protocol_name is not None
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    # -- offsets ---------------------------------------------------------------
    def has_offsets(self, besides: Collection[TopicPartition] = ()) -> bool:
        """Whether any offset is committed, in flight or pending in a transaction; ``besides``: other
        than those of these partitions (about to be removed with ``remove_offsets``)."""
        if not besides:
            return bool(self.offsets) or bool(self.pending_offset_commits) \
                or bool(self.pending_transactional_offset_commits)
        gone = set(besides)
        return any(tp not in gone for tp in self.offsets) or bool(self.pending_offset_commits) \
            or any(tp not in gone for pending in self.pending_transactional_offset_commits.values() for tp in pending)

    def has_pending_offset_commits_for(self, tp: TopicPartition) -> bool:
        """A commit of this partition is in flight or waits for its transaction (UNSTABLE_OFFSET_COMMIT)."""
        if tp in self.pending_offset_commits:
            return True
        return any(tp in pending for pending in self.pending_transactional_offset_commits.values())

    def has_pending_offset_commits_from_producer(self, producer_id: int) -> bool:
        return producer_id in self.pending_transactional_offset_commits

    def commit_offset(self, tp: TopicPartition, off: OffsetAndMetadata, append_offset: int | None) -> None:
        self.offsets[tp] = off
        if append_offset is None:
            self.offset_append_offsets.pop(tp, None)
        else:
            self.offset_append_offsets[tp] = append_offset

    # -- transactional offsets (TxnOffsetCommit) --------------------------------
    def prepare_txn_offset_commit(self, producer_id: int, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """Record offsets before their append, so OffsetFetch(require_stable) already sees them pending."""
        pending = self.pending_transactional_offset_commits.setdefault(producer_id, {})
        for tp, off in offsets.items():
            pending[tp] = CommitRecordMetadataAndOffset(off)

    def on_txn_offset_commit_append(self, producer_id: int, tp: TopicPartition, append_offset: int) -> None:
        pending = self.pending_transactional_offset_commits.get(producer_id)
        entry = pending.get(tp) if pending else None
        if entry is not None and entry.append_offset is None:
            entry.append_offset = append_offset

    def fail_pending_txn_offset_commit(self, producer_id: int, tp: TopicPartition) -> None:
        """The append failed: forget the offset unless an earlier append of it already succeeded."""
        pending = self.pending_transactional_offset_commits.get(producer_id)
        if pending is None:
            return
        entry = pending.get(tp)
        if entry is not None and entry.append_offset is None:
            del pending[tp]
        if not pending:
            del self.pending_transactional_offset_commits[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, committed: bool) -> int:
        """The transaction's marker is in the log: publish (commit) or drop (abort); returns offsets published."""
        pending = self.pending_transactional_offset_commits.pop(producer_id, None)
        if not pending or not committed:
            return 0
        published = 0
        for tp, entry in pending.items():
            if entry.append_offset is None:
                continue  # its append never completed, so the marker cannot cover it
            current_pos = self.offset_append_offsets.get(tp)
            current = CommitRecordMetadataAndOffset(self.offsets[tp], current_pos) if tp in self.offsets else None
            if current is None or current.older_than(entry):
                self.commit_offset(tp, entry.offset, entry.append_offset)
                published += 1
        return published

    def remove_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        removed = {}
        for tp in partitions:
            off = self.offsets.pop(tp, None)
            self.offset_append_offsets.pop(tp, None)
            if off is not None:
                removed[tp] = off
            # As Kafka: a deleted offset takes any not yet committed transactional one with it.
            for pid, pending in list(self.pending_transactional_offset_commits.items()):
                pending.pop(tp, None)
                if not pending:
                    del self.pending_transactional_offset_commits[pid]
        return removed

    def expired_offsets(self, now: int, retention_ms: int) -> list[TopicPartition]:
        """Offsets to drop per KIP-211 (nothing is changed: expiry tombstones them first).

        Empty groups lose all offsets ``retention_ms`` after they became empty (or after
        the commit, for groups that never had members); active consumer groups lose only
        offsets of topics they no longer subscribe to; an explicit expire timestamp
        from an old OffsetCommit wins.
        """
        def expired(tp: TopicPartition, off: OffsetAndMetadata, base: int) -> bool:
            if tp in self.pending_offset_commits:
                return False
            if off.expire_timestamp >= 0:
                return now >= off.expire_timestamp
            return now - base >= retention_ms

        victims: list[TopicPartition] = []
        if self.has_consumer_members:
            return victims
        if self.state == GroupState.EMPTY:
            # Kafka counts from when the group became empty; a later commit (a reset by
            # the consumer-groups tool, a simple consumer) restarts the clock for its offset.
            for tp, off in self.offsets.items():
                if expired(tp, off, max(self.current_state_timestamp, off.commit_timestamp)):
                    victims.append(tp)
        elif self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None \
                and self.state == GroupState.STABLE:
            for tp, off in self.offsets.items():
                if tp[0] not in self.subscribed_topics and expired(tp, off, off.commit_timestamp):
                    victims.append(tp)
        return victims

    def __repr__(self) -> str:
        return (f"GroupMetadata({self.group_id!r}, state={self.state}, generation={self.generation_id}, "
                f"protocol={self.protocol_type}/{self.protocol_name}, leader={self.leader_id}, "
                f"members={list(self.members)})")
