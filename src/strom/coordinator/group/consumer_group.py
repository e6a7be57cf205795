"""State of a KIP-848 consumer group: members, epochs, target assignment and who owns what.

Three epochs drive the protocol:

- the **group epoch** moves whenever what the assignment depends on changes (a member joins or
  leaves, a subscription changes, a subscribed topic appears or grows);
- the **target assignment epoch** catches up with it when the assignor has computed the
  target partitions of every member for that group epoch;
- each **member epoch** catches up with the target one member at a time, as that member
  reconciles (``reconcile``).

Reconciliation revokes before it assigns: a member first gives up what its target no longer
holds (it keeps its epoch until it says so), and a partition is handed to its new member only
once no other member owns it (``owners``). So a partition is never owned by two members at once,
and members that need no change keep consuming through a rebalance.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strom.coordinator.group.assignors import Assignment

if TYPE_CHECKING:
    from strom.coordinator.group.consumer_group_records import LoadedMember

TopicPartitionKey = tuple[str, int]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"  # must give partitions up before it moves on
    UNRELEASED_PARTITIONS = "unreleased_partitions"  # waits for partitions others still own


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


def flatten(assignment: Assignment) -> set[TopicPartitionKey]:
    return {(topic, p) for topic, parts in assignment.items() for p in parts}


def nest(partitions: set[TopicPartitionKey]) -> Assignment:
    out: Assignment = {}
    for topic, p in partitions:
        out.setdefault(topic, set()).add(p)
    return out


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member speaking the classic protocol (JoinGroup/SyncGroup) inside a consumer group
    brought with its JoinGroup: its session timeout and its protocols (name, subscription)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass(slots=True)
class ConsumerGroupMember:
    member_id: str
    client_id: str = ""
    client_host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: set[TopicPartitionKey] = field(default_factory=set)  # may consume now
    pending_revocation: set[TopicPartitionKey] = field(default_factory=set)  # still owned, must give up
    left_static: bool = False  # a static member that left with epoch -2 and may come back
    last_sent: tuple[int, frozenset[TopicPartitionKey]] | None = None  # (epoch, partitions) last answered
    classic: ClassicMemberMetadata | None = None  # set: it speaks the classic protocol (online migration)

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def is_reconciled(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch


class ConsumerGroup:
    """One consumer group's protocol state (the offsets stay on its ``GroupMetadata``)."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.target_assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> target partitions
        self.subscription_metadata: dict[str, int] = {}  # subscribed topic -> partition count
        self.metadata_hash = 0  # digest of subscription_metadata, persisted with the group epoch
        # Replayed from the log, partitions by topic id until the loop resolves them (on_group_loaded).
        self.loaded: dict[str, LoadedMember] | None = None
        self.changes = 0  # state changes written so far (a failed write reverts only the latest)
        self.owners: dict[TopicPartitionKey, str] = {}  # partition -> member that owns it

    # -- state ---------------------------------------------------------------
    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.target_assignment_epoch != self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.target_assignment_epoch or m.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members ask for (ties: the configured order's first), else the default."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return default
        return max(sorted(votes), key=lambda name: votes[name])

    # -- membership ----------------------------------------------------------
    def add_member(self, member: ConsumerGroupMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.release(member, member.assigned | member.pending_revocation)
        self.target.pop(member_id, None)
        return member

    def replace_static_member(self, old: ConsumerGroupMember, new: ConsumerGroupMember) -> None:
        """A static member came back under a new member id: it takes over epoch and partitions."""
        del self.members[old.member_id]
        new.member_epoch, new.previous_member_epoch, new.state = old.member_epoch, old.previous_member_epoch, old.state
        new.assigned, new.pending_revocation = old.assigned, old.pending_revocation
        for tp in new.assigned | new.pending_revocation:
            self.owners[tp] = new.member_id
        if old.member_id in self.target:
            self.target[new.member_id] = self.target.pop(old.member_id)
        self.add_member(new)

    def release(self, member: ConsumerGroupMember, partitions: set[TopicPartitionKey]) -> None:
        for tp in partitions:
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]

    # -- reconciliation ------------------------------------------------------
    def reconcile(self, member: ConsumerGroupMember, owned: set[TopicPartitionKey] | None) -> None:
        """Move ``member`` toward its target assignment, given the partitions it says it owns
        (None: it did not say, as a heartbeat with nothing new does)."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & member.pending_revocation:
                return  # still revoking
            self.release(member, member.pending_revocation)
            member.pending_revocation = set()
            member.state = MemberState.STABLE
        target_epoch = self.target_assignment_epoch
        if member.member_epoch == target_epoch and member.state is MemberState.STABLE:
            return
        target = flatten(self.target.get(member.member_id, {}))
        kept = member.assigned & target
        to_revoke = member.assigned - target
        if to_revoke:
            member.assigned = kept
            member.pending_revocation = to_revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            return
        wanted = target - kept
        free = {tp for tp in wanted if self.owners.get(tp, member.member_id) == member.member_id}
        for tp in free:
            self.owners[tp] = member.member_id
        member.assigned = kept | free
        if member.member_epoch != target_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = target_epoch
        member.state = MemberState.STABLE if free == wanted else MemberState.UNRELEASED_PARTITIONS
