"""Online migration between the classic and the consumer group protocols (KIP-848, as Kafka 4.0).

A group moves between the protocols without stopping:

- **upgrade**: the first ConsumerGroupHeartbeat joining a classic group whose members speak the
  ``consumer`` protocol type turns it into a consumer group. The classic members become its
  members (their subscription and assignment read from their JoinGroup metadata and SyncGroup
  assignment) at the classic generation as their epoch;
- classic members of a consumer group (those converted, and new ones joining) keep speaking
  JoinGroup / SyncGroup / Heartbeat / LeaveGroup, answered from the consumer group's state: a
  Heartbeat answers REBALANCE_IN_PROGRESS while the member is not reconciled to the target, the
  member rejoins, its JoinGroup reports what it owns (which is how it acknowledges a revocation)
  and its SyncGroup gets its current assignment, encoded as a ConsumerProtocolAssignment. The
  server-side assignor decides; revocation before assignment holds for them as for the others;
- **downgrade**: when the last consumer-protocol member leaves and only classic members remain,
  the group becomes a classic group again at the group epoch as generation, and rebalances.

``group.consumer.migration.policy`` allows the upgrade, the downgrade, both or neither; new
classic members join a consumer group unless it is ``disabled`` (members already in the group are
always served). Each conversion is one append: the old protocol's tombstones and the new
protocol's records, so a restart resumes whichever the log holds.
"""

from __future__ import annotations

import copy
import logging
import uuid
from typing import TYPE_CHECKING, Any

import kafka.errors as Errors

from strom.coordinator.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicPartitionKey,
    nest,
)
from strom.coordinator.group.consumer_group_records import (
    consumer_group_member_tombstones,
    consumer_group_tombstones,
)
from strom.coordinator.group.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from strom.coordinator.group.group_metadata import GroupMetadata, GroupState
from strom.coordinator.group.member_metadata import JoinGroupResult, MemberMetadata, SyncGroupResult
from strom.coordinator.group.records import group_metadata_key, group_metadata_value

if TYPE_CHECKING:
    from strom.coordinator.group.consumer_group_coordinator import ConsumerGroupCoordinator
    from strom.coordinator.group.group_coordinator import MemberIdentity

log = logging.getLogger(__name__)

NONE = 0
UNKNOWN_MEMBER_ID = Errors.UnknownMemberIdError.errno
ILLEGAL_GENERATION = Errors.IllegalGenerationError.errno
REBALANCE_IN_PROGRESS = Errors.RebalanceInProgressError.errno
INCONSISTENT_GROUP_PROTOCOL = Errors.InconsistentGroupProtocolError.errno
FENCED_INSTANCE_ID = Errors.FencedInstanceIdError.errno
MEMBER_ID_REQUIRED = Errors.MemberIdRequiredError.errno
GROUP_MAX_SIZE_REACHED = Errors.GroupMaxSizeReachedError.errno

POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


class ClassicMembers:
    """Serves classic-protocol members from a consumer group's state, and converts groups."""

    def __init__(self, coordinator: ConsumerGroupCoordinator, policy: str) -> None:
        self.coordinator = coordinator
        self.policy = policy.lower()

    @property
    def upgrade_enabled(self) -> bool:
        return self.policy in ("bidirectional", "upgrade")

    @property
    def downgrade_enabled(self) -> bool:
        return self.policy in ("bidirectional", "downgrade")

    # -- upgrade: classic group -> consumer group ------------------------------------------
    def can_upgrade(self, group: GroupMetadata) -> bool:
        if not self.upgrade_enabled:
            log.info("cannot upgrade classic group %s: online upgrade is disabled", group.group_id)
            return False
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            log.info("cannot upgrade classic group %s: its members do not use the consumer protocol type",
                     group.group_id)
            return False
        for m in group.members.values():
            if decode_subscription(_subscription_of(group, m)) is None:
                log.info("cannot upgrade classic group %s: member %s has a malformed subscription", group.group_id,
                         m.member_id)
                return False
        return True

    def upgrade(self, group: GroupMetadata) -> tuple[dict[str, Any], list[tuple[bytes, bytes | None]]]:
        """Turn a non-empty classic group into a consumer group in memory. Returns the classic state
        (to put back if the append fails) and the record that ends the classic group."""
        classic = self.coordinator.classic
        saved = dict(group.__dict__)
        saved["members"] = dict(group.members)
        # Whatever the classic members wait for belongs to a rebalance that will not complete.
        for old_member in group.members.values():
            old_member.complete_join(JoinGroupResult(old_member.member_id, REBALANCE_IN_PROGRESS))
            old_member.complete_sync(SyncGroupResult(REBALANCE_IN_PROGRESS))
            classic._remove_heartbeat(old_member)  # noqa: SLF001 - the classic timers stop here
        # So do the rebalance's join and sync deadlines: left behind, they would end the rebalance
        # of the classic group a downgrade makes early, dropping members still within their time.
        classic.rebalance_purgatory.cancel_for_key(("group", group.group_id))
        classic.rebalance_purgatory.cancel_for_key(("sync", group.group_id))
        cg = ConsumerGroup(group.group_id)
        cg.group_epoch = cg.target_assignment_epoch = group.generation_id
        topics = self.coordinator.metadata.topics()
        for m in group.members.values():
            sub = decode_subscription(_subscription_of(group, m))
            # What it may own: its last assignment, and what its latest JoinGroup said it owns (a
            # cooperative member keeps its partitions through a rebalance whose assignment was reset).
            assigned = decode_assignment(m.assignment) or {}
            owned = {(t, p) for t, parts in assigned.items() for p in parts} | (sub.owned_partitions if sub else set())
            owned = {tp for tp in owned if tp[0] in topics}
            member = ConsumerGroupMember(
                m.member_id, client_id=m.client_id, client_host=m.client_host, instance_id=m.group_instance_id,
                rack_id=sub.rack_id if sub else None, rebalance_timeout_ms=m.rebalance_timeout_ms,
                subscribed_topic_names=tuple(sorted(set(sub.topics))) if sub else (),
                member_epoch=group.generation_id, previous_member_epoch=group.generation_id,
                assigned={tp for tp in owned if tp not in cg.owners},
                classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.supported_protocols)))
            cg.add_member(member)
            for tp in member.assigned:
                cg.owners[tp] = member.member_id
            cg.target[member.member_id] = nest(set(member.assigned))
        group.members.clear()
        group.static_members.clear()
        group.pending_members.clear()
        group.pending_sync_members.clear()
        group.supported_protocols.clear()
        group.num_members_awaiting_join = 0
        group.leader_id = None
        group.state = GroupState.EMPTY  # a consumer group's GroupMetadata stays Empty (its state is its own)
        group.consumer_group = cg
        group.protocol_type = CONSUMER_PROTOCOL_TYPE
        for member in cg.members.values():
            self.coordinator._schedule_session_timeout(cg, member)  # noqa: SLF001
        log.info("classic group %s with %d members upgraded to a consumer group at epoch %d", group.group_id,
                 len(cg.members), cg.group_epoch)
        return saved, [(group_metadata_key(group.group_id), None)]

    def undo_upgrade(self, group: GroupMetadata, saved: dict[str, Any]) -> None:
        """The upgrade could not be written: the group is the classic one the log holds, rebalancing."""
        cg = group.consumer_group
        if cg is not None:
            for member_id in list(cg.members):
                self.coordinator._cancel_session_timeout(cg, member_id)  # noqa: SLF001
        group.__dict__.update(saved)
        classic = self.coordinator.classic
        for member in group.members.values():
            classic._complete_and_schedule_next_heartbeat(group, member)  # noqa: SLF001
        if group.can_rebalance():
            classic._prepare_rebalance(group, "the upgrade to a consumer group failed")  # noqa: SLF001

    # -- downgrade: consumer group -> classic group ------------------------------------------
    def downgrade_protocol(self, cg: ConsumerGroup) -> str | None:
        """The classic protocol the remaining members would use, or None if the group may not
        (or cannot) become a classic group now."""
        if not cg.members or any(not m.uses_classic_protocol for m in cg.members.values()):
            return None
        if not self.downgrade_enabled:
            log.info("cannot downgrade consumer group %s: online downgrade is disabled", cg.group_id)
            return None
        if len(cg.members) > self.coordinator.classic.config.max_size:
            log.info("cannot downgrade consumer group %s: more members than group.max.size", cg.group_id)
            return None
        members = list(cg.members.values())
        common = set(members[0].classic.protocol_names) if members[0].classic else set()
        for m in members[1:]:
            common &= set(m.classic.protocol_names) if m.classic else set()
        if not common:
            log.info("cannot downgrade consumer group %s: its classic members share no protocol", cg.group_id)
            return None
        votes: dict[str, int] = {}
        for m in members:
            assert m.classic is not None
            choice = next(name for name in m.classic.protocol_names if name in common)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda name: votes[name])

    async def downgrade(self, group: GroupMetadata, before: ConsumerGroup, protocol: str) -> int:
        """Make the consumer group a classic one (members keep their ids and, mostly, their generation)
        and start a rebalance; one append holds the consumer group's tombstones and the classic
        group's record."""
        cg = group.consumer_group
        assert cg is not None
        classic = self.coordinator.classic
        for member_id in list(cg.members):
            self.coordinator._cancel_session_timeout(cg, member_id)  # noqa: SLF001
        group.consumer_group = None
        # Kafka takes the group epoch; the epoch most members are at (the latest on a tie) lets them
        # go on heartbeating and committing into the rebalance instead of losing their partitions
        # to ILLEGAL_GENERATION. The rebalance moves the generation past it.
        epochs: dict[int, int] = {}
        for m in cg.members.values():
            epochs[m.member_epoch] = epochs.get(m.member_epoch, 0) + 1
        group.generation_id = max(epochs, key=lambda e: (epochs[e], e))
        group.protocol_type = CONSUMER_PROTOCOL_TYPE
        group.protocol_name = protocol
        group.leader_id = None
        for cm in cg.members.values():
            assert cm.classic is not None
            mm = MemberMetadata(cm.member_id, cm.instance_id, cm.client_id, cm.client_host, cm.rebalance_timeout_ms,
                                cm.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(cm.classic.protocols))
            mm.assignment = encode_assignment(_by_topic(cm.assigned))
            group.add(mm)
        group.subscribed_topics = group.compute_subscribed_topics()
        group.state = GroupState.STABLE  # as Kafka: the converted group is stable, then rebalances
        records: list[tuple[bytes, bytes | None]] = []
        for mid in before.members:
            records += consumer_group_member_tombstones(group.group_id, mid)
        records += consumer_group_tombstones(group.group_id)
        assignments = {m.member_id: m.assignment for m in group.members.values()}
        records.append((group_metadata_key(group.group_id),
                        group_metadata_value(self.coordinator.manager.group_record(group, assignments))))
        log.info("consumer group %s downgraded to a classic group (protocol %s, generation %d, %d members)",
                 group.group_id, protocol, group.generation_id, len(group.members))
        for classic_member in group.members.values():
            classic._complete_and_schedule_next_heartbeat(group, classic_member)  # noqa: SLF001
        classic._prepare_rebalance(group, "downgraded from a consumer group")  # noqa: SLF001
        try:
            await self.coordinator.manager.write(group.group_id, records)
        except Exception as exc:  # noqa: BLE001 - the log keeps the consumer group: serve it again
            log.warning("downgrading consumer group %s failed: %s", group.group_id, exc)
            for classic_member in list(group.members.values()):
                classic._remove_heartbeat(classic_member)  # noqa: SLF001
                classic_member.complete_join(JoinGroupResult(classic_member.member_id, REBALANCE_IN_PROGRESS))
            classic.rebalance_purgatory.cancel_for_key(("group", group.group_id))  # the rebalance is void
            group.members.clear()
            group.static_members.clear()
            group.supported_protocols.clear()
            group.num_members_awaiting_join = 0
            group.leader_id = None
            group.state = GroupState.EMPTY
            group.consumer_group = before
            for member in before.members.values():
                self.coordinator._schedule_session_timeout(before, member)  # noqa: SLF001
            return Errors.CoordinatorNotAvailableError.errno
        return NONE

    # -- the classic APIs, answered by a consumer group --------------------------------------
    def serves_join(self, group: GroupMetadata, member_id: str) -> bool:
        """Does this JoinGroup go to the consumer group? (A classic member joining an empty consumer
        group makes it a classic group instead, as before any migration.)"""
        cg = group.consumer_group
        return cg is not None and (bool(cg.members) or member_id in cg.members)

    async def join(self, group: GroupMetadata, member_id: str, instance_id: str | None, require_known_member_id: bool,
                   client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                   protocol_type: str, protocols: list[tuple[str, bytes]]) -> JoinGroupResult:
        co = self.coordinator
        cg = group.consumer_group
        assert cg is not None
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            return JoinGroupResult(member_id, INCONSISTENT_GROUP_PROTOCOL)
        sub = decode_subscription(protocols[0][1])
        if sub is None:
            return JoinGroupResult(member_id, INCONSISTENT_GROUP_PROTOCOL)
        before = copy.deepcopy(cg)
        if instance_id is not None and member_id:
            # A static member naming a member id rejoins as the holder of its instance id, which
            # must exist (as Kafka 4.0: a dynamic member's unknown id is taken as its new id).
            holder_id = cg.static_members.get(instance_id)
            if holder_id is None:
                return JoinGroupResult(member_id, UNKNOWN_MEMBER_ID)
            if holder_id != member_id:
                return JoinGroupResult(member_id, FENCED_INSTANCE_ID)
        member = cg.members.get(member_id) if member_id else None
        joined = False
        replaced: ConsumerGroupMember | None = None
        if member is not None:
            if member.classic is None:
                return JoinGroupResult(member_id, UNKNOWN_MEMBER_ID)  # a consumer-protocol member
        else:
            if self.policy == "disabled":
                return JoinGroupResult(member_id, INCONSISTENT_GROUP_PROTOCOL)
            if instance_id is not None and instance_id in cg.static_members:
                holder = cg.members[cg.static_members[instance_id]]
                co._remove(cg, holder, "was replaced by a new incarnation of its static member")  # noqa: SLF001
                replaced = holder
            if not member_id:
                member_id = f"{client_id}-{uuid.uuid4()}"
                if require_known_member_id and instance_id is None:
                    return JoinGroupResult(member_id, MEMBER_ID_REQUIRED)
            if len(cg.members) >= co.config.max_size:
                return JoinGroupResult(member_id, GROUP_MAX_SIZE_REACHED)
            member = ConsumerGroupMember(member_id, instance_id=instance_id)
            cg.add_member(member)
            joined = True
        member.client_id, member.client_host = client_id, client_host
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.classic = ClassicMemberMetadata(session_timeout_ms, tuple(protocols))
        member.rack_id = sub.rack_id or member.rack_id
        topics = tuple(sorted(set(sub.topics)))
        changed = topics != member.subscribed_topic_names or member.subscribed_topic_regex is not None \
            or member.server_assignor is not None
        member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor = topics, None, None
        metadata_changed = co._refresh_subscription_metadata(cg)  # noqa: SLF001
        if joined or changed or metadata_changed:
            co._bump(cg, f"classic member {member_id} joined" if joined else  # noqa: SLF001
                     f"classic member {member_id} changed its subscription" if changed else "subscribed topics changed")
        if cg.group_epoch > cg.target_assignment_epoch:
            co._compute_target(cg)  # noqa: SLF001
        # What it reports owning is how a classic member acknowledges a revocation (an eager
        # member has given everything up before it joins).
        owned: set[TopicPartitionKey] = set(sub.owned_partitions)
        was_revoking = member.state is MemberState.UNREVOKED_PARTITIONS
        cg.reconcile(member, owned)
        if member.state is MemberState.UNREVOKED_PARTITIONS and not was_revoking:
            co._schedule_revocation_timeout(cg, member)  # noqa: SLF001
        co._schedule_session_timeout(cg, member)  # noqa: SLF001
        # A classic static member replacing the last consumer-protocol member: the group turns
        # classic (as Kafka 4.0) and rebalances; the member rejoins it as a classic member.
        protocol = self.downgrade_protocol(cg) if replaced is not None and replaced.classic is None else None
        if protocol is not None:
            error = await self.downgrade(group, before, protocol)
            if error:
                return JoinGroupResult(member_id, error)
            return JoinGroupResult(member_id, NONE, generation_id=group.generation_id,
                                   protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=protocol)
        error = await co._persist(before, cg)  # noqa: SLF001
        if error:
            return JoinGroupResult(member_id, error)
        return JoinGroupResult(member_id, NONE, generation_id=member.member_epoch,
                               protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=protocols[0][0])

    def _classic_member(self, cg: ConsumerGroup, member_id: str, instance_id: str | None,
                        generation_id: int | None) -> tuple[ConsumerGroupMember | None, int]:
        member = cg.members.get(member_id)
        if instance_id is not None:
            holder = cg.static_members.get(instance_id)
            if holder is not None and holder != member_id:
                return None, FENCED_INSTANCE_ID
        if member is None or member.classic is None:
            return None, UNKNOWN_MEMBER_ID
        if generation_id is not None and generation_id != member.member_epoch:
            return None, ILLEGAL_GENERATION
        return member, NONE

    def sync(self, group: GroupMetadata, generation_id: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> SyncGroupResult:
        cg = group.consumer_group
        assert cg is not None
        member, error = self._classic_member(cg, member_id, instance_id, generation_id)
        if member is None:
            return SyncGroupResult(error)
        assert member.classic is not None
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or \
                (protocol_name is not None and protocol_name not in member.classic.protocol_names):
            return SyncGroupResult(INCONSISTENT_GROUP_PROTOCOL)
        self.coordinator._schedule_session_timeout(cg, member)  # noqa: SLF001
        return SyncGroupResult(NONE, CONSUMER_PROTOCOL_TYPE, protocol_name or member.classic.protocol_names[0],
                               encode_assignment(_by_topic(member.assigned)))

    def heartbeat(self, group: GroupMetadata, member_id: str, instance_id: str | None, generation_id: int) -> int:
        cg = group.consumer_group
        assert cg is not None
        member, error = self._classic_member(cg, member_id, instance_id, generation_id)
        if member is None:
            return error
        self.coordinator._schedule_session_timeout(cg, member)  # noqa: SLF001
        return NONE if member.is_reconciled(cg.target_assignment_epoch) and \
            cg.target_assignment_epoch == cg.group_epoch else REBALANCE_IN_PROGRESS

    async def leave(self, group: GroupMetadata, leaving: list[MemberIdentity]) -> list[tuple[MemberIdentity, int]]:
        cg = group.consumer_group
        assert cg is not None
        co = self.coordinator
        before = copy.deepcopy(cg)
        results: list[tuple[MemberIdentity, int]] = []
        for ident in leaving:
            member_id = ident.member_id
            if ident.group_instance_id is not None:
                known = cg.static_members.get(ident.group_instance_id)
                if known is None:
                    results.append((ident, UNKNOWN_MEMBER_ID))
                    continue
                if member_id and member_id != known:
                    results.append((ident, FENCED_INSTANCE_ID))
                    continue
                member_id = known
            member = cg.members.get(member_id)
            if member is None or member.classic is None:
                results.append((ident, UNKNOWN_MEMBER_ID))
                continue
            co._remove(cg, member, "left the group (LeaveGroup)")  # noqa: SLF001
            results.append((ident, NONE))
        error = await co._persist(before, cg)  # noqa: SLF001
        if error:
            return [(ident, error if code == NONE else code) for ident, code in results]
        return results


def _subscription_of(group: GroupMetadata, member: MemberMetadata) -> bytes:
    """A classic member's subscription: its metadata for the group's protocol (else its first)."""
    if group.protocol_name in member.protocols():
        return member.metadata(group.protocol_name)
    return member.supported_protocols[0][1]


def _by_topic(partitions: set[TopicPartitionKey]) -> dict[str, list[int]]:
    return {topic: sorted(parts) for topic, parts in sorted(nest(partitions).items())}
