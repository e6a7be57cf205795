"""ConsumerGroupCoordinator: the KIP-848 consumer group protocol (ConsumerGroupHeartbeat), beside
the classic one.

A member joins with epoch 0, then heartbeats with its current epoch; every heartbeat may bring
it a new assignment (the coordinator runs the server-side assignor, see ``assignors``) and
carries back the partitions it owns, which is how revocation is acknowledged (see
``consumer_group.ConsumerGroup.reconcile``). A member leaves with epoch -1 (a static member with
-2, keeping its partitions until its session times out or it comes back). A member that stops
heartbeating for the session timeout, or that does not revoke within its rebalance timeout, is
removed and its partitions go to the others.

A consumer group shares its ``GroupMetadata`` with the classic protocol: offsets, ListGroups and
DescribeGroups see one namespace. Everything runs on the broker's loop; timers are loop timers.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import kafka.errors as Errors

from strom.coordinator.group.assignors import ASSIGNORS, AssignmentMember
from strom.coordinator.group.classic_members import ClassicMembers
from strom.coordinator.group.consumer_group import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicPartitionKey,
    nest,
)
from strom.coordinator.group.consumer_group_records import (
    CURRENT_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    TARGET_MEMBER,
    TARGET_METADATA,
    current_assignment_value,
    group_key,
    group_metadata_value,
    member_metadata_value,
    subscription_hash,
    target_member_value,
    target_metadata_value,
)
from strom.coordinator.group.group_metadata import GroupMetadata, GroupState
from strom.coordinator.group.group_metadata_manager import GroupMetadataManager, map_append_error

if TYPE_CHECKING:
    from strom.coordinator.group.group_config import GroupConfigs
    from strom.coordinator.group.group_coordinator import GroupCoordinator
    from strom.metadata.store import MetadataStore

log = logging.getLogger(__name__)

NONE = 0
INVALID_REQUEST = Errors.InvalidRequestError.errno
UNKNOWN_MEMBER_ID = Errors.UnknownMemberIdError.errno
FENCED_MEMBER_EPOCH = Errors.FencedMemberEpochError.errno
STALE_MEMBER_EPOCH = Errors.StaleMemberEpochError.errno
UNRELEASED_INSTANCE_ID = Errors.UnreleasedInstanceIdError.errno
UNSUPPORTED_ASSIGNOR = Errors.UnsupportedAssignorError.errno
GROUP_MAX_SIZE_REACHED = Errors.GroupMaxSizeReachedError.errno
GROUP_ID_NOT_FOUND = Errors.GroupIdNotFoundError.errno
ILLEGAL_GENERATION = Errors.IllegalGenerationError.errno
INVALID_REGULAR_EXPRESSION = 128  # not in kafka-python's table


@dataclass(slots=True)
class ConsumerGroupConfig:
    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    max_size: int = 2**31 - 1
    assignors: list[str] = field(default_factory=lambda: ["uniform", "range"])
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy


@dataclass(slots=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeat's fields, as the handler decoded them (owned partitions by topic id)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: list[tuple[uuid.UUID | None, list[int]]] | None = None
    version: int = 1
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class HeartbeatResult:
    error_code: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: list[tuple[uuid.UUID, list[int]]] | None = None  # None: unchanged


class ConsumerGroupCoordinator:
    def __init__(self, classic: GroupCoordinator, metadata: MetadataStore, config: ConsumerGroupConfig,
                 group_configs: GroupConfigs | None = None) -> None:
        self.classic = classic
        self.group_configs = group_configs  # per-group overrides of the session timeout and heartbeat interval
        self.manager: GroupMetadataManager = classic.manager
        self.metadata: MetadataStore = metadata
        self.config: ConsumerGroupConfig = config
        self._session_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._background: set[asyncio.Task[int]] = set()
        self._regexes: dict[str, re.Pattern[str]] = {}
        self.classic_members = ClassicMembers(self, config.migration_policy)

    # -- ConsumerGroupHeartbeat --------------------------------------------------
    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        error, message = self._validate_request(req)
        if error:
            return HeartbeatResult(error, message)
        error = self.classic.validate_group_status(req.group_id, require_non_empty_id=True)
        if error:
            return HeartbeatResult(error)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return await self._leave(req)
        upgrading = self._upgradable(req)
        if upgrading is not None:
            # The first consumer-protocol member of a classic group: the group converts first.
            saved, ending = self.classic_members.upgrade(upgrading)
            assert upgrading.consumer_group is not None
            before = ConsumerGroup(req.group_id)
            result = await self._heartbeat(upgrading, upgrading.consumer_group, before, req, ending)
            if result.error_code:  # nothing of the upgrade was written: the group stays classic
                self.classic_members.undo_upgrade(upgrading, saved)
            return result
        group, error = self._group_for(req)
        if group is None:
            return HeartbeatResult(error or UNKNOWN_MEMBER_ID)
        cg = group.consumer_group
        assert cg is not None
        return await self._heartbeat(group, cg, copy.deepcopy(cg), req)

    def _upgradable(self, req: HeartbeatRequest) -> GroupMetadata | None:
        """A non-empty classic group a joining consumer-protocol member converts (online upgrade)."""
        group = self.manager.get_group(req.group_id)
        if group is None or group.consumer_group is not None or group.is_in(GroupState.DEAD):
            return None
        if req.member_epoch != JOIN_EPOCH or (not group.members and group.is_in(GroupState.EMPTY)):
            return None
        if len(group.members) >= self.config.max_size or not self.classic_members.can_upgrade(group):
            return None
        return group

    async def _heartbeat(self, group: GroupMetadata, cg: ConsumerGroup, before: ConsumerGroup, req: HeartbeatRequest,
                         first: list[tuple[bytes, bytes | None]] | None = None) -> HeartbeatResult:
        joined = False
        if req.member_epoch == JOIN_EPOCH:
            member, joined, error = self._join(cg, req)
        else:
            member, error = self._known_member(cg, req)
        if member is None:
            return HeartbeatResult(error)
        subscription_changed = self._update_subscription(member, req)
        metadata_changed = self._refresh_subscription_metadata(cg)
        if joined or subscription_changed or metadata_changed:
            self._bump(cg, f"member {member.member_id} joined" if joined else
                       f"member {member.member_id} changed its subscription" if subscription_changed else
                       "subscribed topics changed")
        if cg.group_epoch > cg.target_assignment_epoch:
            self._compute_target(cg)
        owned = self._owned(req.owned)
        was_revoking = member.state is MemberState.UNREVOKED_PARTITIONS
        cg.reconcile(member, owned)
        if member.state is MemberState.UNREVOKED_PARTITIONS and not was_revoking:
            self._schedule_revocation_timeout(cg, member)
        self._schedule_session_timeout(cg, member)
        error = await self._persist(before, cg, first)
        if error:
            return HeartbeatResult(error)
        return self._answer(cg.group_id, member, full=req.member_epoch == JOIN_EPOCH or (owned is not None and owned != member.assigned))

    # -- persistence ----------------------------------------------------------------
    def _ids(self, assignment: Mapping[str, set[int]] | set[TopicPartitionKey]) -> dict[uuid.UUID, list[int]]:
        """Partitions by topic name -> by topic id (topics deleted meanwhile are left out)."""
        nested = nest(assignment) if isinstance(assignment, set) else assignment
        out: dict[uuid.UUID, list[int]] = {}
        for topic, parts in nested.items():
            meta = self.metadata.topic(topic)
            if meta is not None and parts:
                out[meta.topic_id] = sorted(parts)
        return out

    def _records(self, before: ConsumerGroup, after: ConsumerGroup) -> list[tuple[bytes, bytes | None]]:
        """What changed between two states of a group, as the records Kafka 4.x writes for it."""
        gid = after.group_id
        records: list[tuple[bytes, bytes | None]] = []
        for mid in before.members.keys() - after.members.keys():
            records += [(group_key(CURRENT_ASSIGNMENT, gid, mid), None), (group_key(TARGET_MEMBER, gid, mid), None),
                        (group_key(MEMBER_METADATA, gid, mid), None)]
        if (before.group_epoch, before.metadata_hash) != (after.group_epoch, after.metadata_hash):
            records.append((group_key(GROUP_METADATA, gid), group_metadata_value(after.group_epoch,
                                                                               after.metadata_hash)))
        for mid, m in after.members.items():
            b = before.members.get(mid)
            if b is None or _member_metadata(b) != _member_metadata(m):
                records.append((group_key(MEMBER_METADATA, gid, mid), member_metadata_value(m)))
        for mid in after.members:  # a new target, or a member new under this id (a static member back)
            target = after.target.get(mid, {})
            if mid not in before.members or before.target.get(mid, {}) != target:
                records.append((group_key(TARGET_MEMBER, gid, mid), target_member_value(self._ids(target))))
        if before.target_assignment_epoch != after.target_assignment_epoch:
            records.append((group_key(TARGET_METADATA, gid), target_metadata_value(after.target_assignment_epoch)))
        for mid, m in after.members.items():
            b = before.members.get(mid)
            if b is None or _current_assignment(b) != _current_assignment(m):
                records.append((group_key(CURRENT_ASSIGNMENT, gid, mid), current_assignment_value(
                    m, self._ids(m.assigned), self._ids(m.pending_revocation))))
        return records

    async def _persist(self, before: ConsumerGroup, after: ConsumerGroup,
                       first: list[tuple[bytes, bytes | None]] | None = None) -> int:
        """Append what the group's state change means to its __consumer_offsets partition (after
        ``first``, records of a conversion from the classic protocol); the reply waits for the
        commit. 0, or the error the member gets if the append fails, in which case the change is
        undone (if no later one was made on top of it)."""
        records = (first or []) + self._records(before, after)
        if not records:
            return NONE
        after.changes += 1
        change = after.changes
        try:
            await self.manager.write(after.group_id, records)
        except Exception as exc:  # noqa: BLE001 - every failure maps to a protocol error
            code = map_append_error(exc, for_offsets=False)
            log.warning("storing consumer group %s failed: %s (error %d)", after.group_id, exc, code)
            if after.changes == change:
                self._revert(after, before)
            return code
        return NONE

    def _revert(self, cg: ConsumerGroup, before: ConsumerGroup) -> None:
        """Put the group back as the log has it (``before`` is a private copy); members get new timers."""
        for member_id in list(cg.members):
            self._cancel_session_timeout(cg, member_id)
        changes = cg.changes
        cg.__dict__.update(before.__dict__)
        cg.changes = changes
        for member in cg.members.values():
            self._schedule_session_timeout(cg, member)

    def _persist_in_background(self, before: ConsumerGroup, after: ConsumerGroup) -> None:
        """A change no request waits for (a member expired): write it all the same."""
        task = asyncio.get_running_loop().create_task(self._persist(before, after))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- loading ---------------------------------------------------------------------
    def on_group_loaded(self, group: GroupMetadata) -> None:
        """A group replayed from the log: resolve its partitions to topic names, rebuild who owns
        what, and give every member a full session to come back."""
        cg = group.consumer_group
        if cg is None or cg.loaded is None:
            return
        names = {t.topic_id: name for name, t in self.metadata.topics().items()}

        def by_name(assignment: dict[uuid.UUID, list[int]]) -> set[TopicPartitionKey]:
            return {(names[tid], p) for tid, parts in assignment.items() if tid in names for p in parts}

        for mid, loaded in cg.loaded.items():
            member = cg.members.get(mid)
            if member is None:
                continue
            member.assigned, member.pending_revocation = by_name(loaded.assigned), by_name(loaded.pending)
            for tp in member.assigned | member.pending_revocation:
                cg.owners[tp] = mid
            cg.target[mid] = nest(by_name(loaded.target))
            self._schedule_session_timeout(cg, member)
        cg.loaded = None

    def _validate_request(self, req: HeartbeatRequest) -> tuple[int, str | None]:
        if not req.group_id:
            return INVALID_REQUEST, "GroupId can't be empty."
        if req.instance_id == "":
            return INVALID_REQUEST, "InstanceId can't be empty."
        epoch = req.member_epoch
        if epoch < STATIC_LEAVE_EPOCH:
            return INVALID_REQUEST, f"MemberEpoch {epoch} is invalid."
        if not req.member_id and (req.version >= 1 or epoch != JOIN_EPOCH):
            return INVALID_REQUEST, "MemberId can't be empty."
        if epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
            return INVALID_REQUEST, "InstanceId can't be null when leaving with epoch -2."
        if epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms <= 0:
                return INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."
            if req.owned is None or any(parts for _, parts in req.owned):
                return INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                return INVALID_REQUEST, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            return UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported."
        if req.subscribed_topic_regex:
            try:
                self._regex(req.subscribed_topic_regex)
            except re.error as exc:
                return INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex is invalid: {exc}"
        return NONE, None

    def _regex(self, pattern: str) -> re.Pattern[str]:
        compiled = self._regexes.get(pattern)
        if compiled is None:
            compiled = self._regexes[pattern] = re.compile(pattern)
        return compiled

    def _group_for(self, req: HeartbeatRequest) -> tuple[GroupMetadata | None, int]:
        """The group, created (or converted from an empty classic group) by a join."""
        group = self.manager.get_group(req.group_id)
        if group is None or group.is_in(GroupState.DEAD):
            if req.member_epoch != JOIN_EPOCH:
                return None, UNKNOWN_MEMBER_ID
            group = self.manager.add_group(GroupMetadata(req.group_id))
        if group.consumer_group is None:
            if group.members or not group.is_in(GroupState.EMPTY):
                return None, GROUP_ID_NOT_FOUND  # a classic group with members (no online migration)
            if req.member_epoch != JOIN_EPOCH:
                return None, UNKNOWN_MEMBER_ID
            group.consumer_group = ConsumerGroup(req.group_id)
            group.protocol_type = "consumer"
        return group, NONE

    def _join(self, cg: ConsumerGroup, req: HeartbeatRequest) -> tuple[ConsumerGroupMember | None, bool, int]:
        """(member, whether it is new to the group, error)."""
        member_id = req.member_id or str(uuid.uuid4())
        new = ConsumerGroupMember(member_id, client_id=req.client_id, client_host=req.client_host,
                                  instance_id=req.instance_id)
        if req.instance_id is not None:
            holder = cg.static_members.get(req.instance_id)
            if holder is not None and holder != member_id:
                old = cg.members[holder]
                if not old.left_static:
                    return None, False, UNRELEASED_INSTANCE_ID
                # The static member is back: it resumes its epoch and partitions, no rebalance.
                self._cancel_session_timeout(cg, old.member_id)
                self._copy_subscription(old, new)
                cg.replace_static_member(old, new)
                log.info("static member %s of consumer group %s rejoined as %s", req.instance_id, cg.group_id,
                         member_id)
                return new, False, NONE
        same = cg.members.get(member_id)
        if same is not None and same.left_static and same.instance_id == req.instance_id:
            same.left_static = False  # the static member is back under the same id: nothing moves
            return same, False, NONE
        if member_id in cg.members:
            # Rejoining (epoch 0, owning nothing): start over as a new member.
            self._cancel_session_timeout(cg, member_id)
            cg.remove_member(member_id)
        elif len(cg.members) >= self.config.max_size:
            return None, False, GROUP_MAX_SIZE_REACHED
        cg.add_member(new)
        return new, True, NONE

    @staticmethod
    def _copy_subscription(old: ConsumerGroupMember, new: ConsumerGroupMember) -> None:
        new.subscribed_topic_names, new.subscribed_topic_regex = old.subscribed_topic_names, old.subscribed_topic_regex
        new.server_assignor, new.rack_id = old.server_assignor, old.rack_id
        new.rebalance_timeout_ms = old.rebalance_timeout_ms

    def _known_member(self, cg: ConsumerGroup, req: HeartbeatRequest) -> tuple[ConsumerGroupMember | None, int]:
        member = cg.members.get(req.member_id)
        if member is None or member.left_static:
            return None, UNKNOWN_MEMBER_ID
        epoch = req.member_epoch
        if epoch > member.member_epoch:
            return None, FENCED_MEMBER_EPOCH
        if epoch < member.member_epoch:
            # The member may not have seen our last answer: its previous epoch is fine as long as
            # it owns nothing it should not.
            owned = self._owned(req.owned)
            if epoch != member.previous_member_epoch or (owned is not None and not owned <= member.assigned):
                return None, FENCED_MEMBER_EPOCH
        return member, NONE

    @staticmethod
    def _update_subscription(member: ConsumerGroupMember, req: HeartbeatRequest) -> bool:
        """Apply what the heartbeat changed; True if the assignment depends on the change."""
        changed = False
        if req.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
            changed |= names != member.subscribed_topic_names
            member.subscribed_topic_names = names
        if req.subscribed_topic_regex is not None:
            regex = req.subscribed_topic_regex or None
            changed |= regex != member.subscribed_topic_regex
            member.subscribed_topic_regex = regex
        if req.server_assignor is not None:
            changed |= req.server_assignor != member.server_assignor
            member.server_assignor = req.server_assignor
        return changed

    def _member_topics(self, member: ConsumerGroupMember, topics: Mapping[str, Any]) -> set[str]:
        names = {t for t in member.subscribed_topic_names if t in topics}
        if member.subscribed_topic_regex:
            pattern = self._regex(member.subscribed_topic_regex)
            names |= {t for t in topics if not t.startswith("__") and pattern.fullmatch(t)}
        return names

    def _refresh_subscription_metadata(self, cg: ConsumerGroup) -> bool:
        """True if a subscribed topic appeared, vanished or grew (the group epoch must move)."""
        topics = self.metadata.topics()
        subscribed: set[str] = set()
        for m in cg.members.values():
            subscribed |= self._member_topics(m, topics)
        current = {t: len(topics[t].partitions) for t in subscribed}
        cg.subscription_metadata = current
        digest = subscription_hash(current)
        if digest != cg.metadata_hash:
            cg.metadata_hash = digest
            return True
        return False

    def _compute_target(self, cg: ConsumerGroup) -> None:
        topics = self.metadata.topics()
        members = [AssignmentMember(m.member_id, frozenset(self._member_topics(m, topics)),
                                    cg.target.get(m.member_id, {}), m.rack_id)
                   for m in cg.members.values()]
        assignor = ASSIGNORS[cg.preferred_assignor(self.config.assignors[0])]
        racks = self._partition_racks(cg, topics) if any(m.rack_id for m in members) else None
        cg.target = assignor.assign(members, cg.subscription_metadata, racks)
        cg.target_assignment_epoch = cg.group_epoch
        log.info("consumer group %s: target assignment of epoch %d computed by %s for %d members",
                 cg.group_id, cg.group_epoch, assignor.name, len(members))

    def _partition_racks(self, cg: ConsumerGroup, topics: Mapping[str, Any]) -> dict[TopicPartitionKey, frozenset[str]]:
        """Racks of the brokers holding each subscribed partition's replicas (for rack-aware assignment)."""
        broker_racks = {b.broker_id: b.rack for b in self.metadata.live_brokers() if b.rack}
        out: dict[TopicPartitionKey, frozenset[str]] = {}
        for topic in cg.subscription_metadata:
            meta = topics.get(topic)
            for p, state in (meta.partitions.items() if meta is not None else ()):
                out[(topic, p)] = frozenset(broker_racks[r] for r in state.replicas if r in broker_racks)
        return out

    @staticmethod
    def _bump(cg: ConsumerGroup, reason: str) -> None:
        cg.group_epoch += 1
        log.info("consumer group %s moves to epoch %d: %s", cg.group_id, cg.group_epoch, reason)

    def _owned(self, owned: list[tuple[uuid.UUID | None, list[int]]] | None) -> set[TopicPartitionKey] | None:
        if owned is None:
            return None
        out: set[TopicPartitionKey] = set()
        for topic_id, parts in owned:
            topic = self.metadata.topic_by_id(topic_id) if topic_id is not None else None
            if topic is not None:
                out.update((topic.name, p) for p in parts)
        return out

    def _answer(self, group_id: str, member: ConsumerGroupMember, full: bool) -> HeartbeatResult:
        sent = (member.member_epoch, frozenset(member.assigned))
        assignment = None
        if full or member.last_sent != sent:
            member.last_sent = sent
            by_topic: dict[str, list[int]] = {}
            for topic, p in member.assigned:
                by_topic.setdefault(topic, []).append(p)
            assignment = []
            for topic, parts in sorted(by_topic.items()):
                meta = self.metadata.topic(topic)
                if meta is not None:
                    assignment.append((meta.topic_id, sorted(parts)))
        return HeartbeatResult(NONE, None, member.member_id, member.member_epoch,
                               self._timeouts(group_id)[1], assignment)

    def _timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of the group: its own configs, else the broker's."""
        if self.group_configs is None:
            return self.config.session_timeout_ms, self.config.heartbeat_interval_ms
        t = self.group_configs.timeouts(group_id)
        return t.session_timeout_ms, t.heartbeat_interval_ms

    # -- leaving -------------------------------------------------------------------
    async def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group = self.manager.get_group(req.group_id)
        cg = group.consumer_group if group is not None else None
        member = cg.members.get(req.member_id) if cg is not None else None
        if cg is None or member is None:
            return HeartbeatResult(UNKNOWN_MEMBER_ID)
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # Its partitions stay reserved for it until it is back or its session expires.
            before = copy.deepcopy(cg)
            member.left_static = True
            log.info("static member %s left consumer group %s temporarily", member.instance_id, cg.group_id)
            error = await self._persist(before, cg)
            if error:
                return HeartbeatResult(error)
            return HeartbeatResult(NONE, None, member.member_id, STATIC_LEAVE_EPOCH, 0)
        before = copy.deepcopy(cg)
        self._remove(cg, member, "left the group")
        protocol = self.classic_members.downgrade_protocol(cg)
        if protocol is not None and group is not None:
            error = await self.classic_members.downgrade(group, before, protocol)
        else:
            error = await self._persist(before, cg)
        if error:
            return HeartbeatResult(error)
        return HeartbeatResult(NONE, None, member.member_id, LEAVE_EPOCH, 0)

    def _remove(self, cg: ConsumerGroup, member: ConsumerGroupMember, reason: str) -> None:
        self._cancel_session_timeout(cg, member.member_id)
        cg.remove_member(member.member_id)
        self._bump(cg, f"member {member.member_id} {reason}")

    # -- timeouts -----------------------------------------------------------------
    def _schedule_session_timeout(self, cg: ConsumerGroup, member: ConsumerGroupMember) -> None:
        key = (cg.group_id, member.member_id)
        old = self._session_timers.pop(key, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        timeout_ms = member.classic.session_timeout_ms if member.classic is not None else \
            self._timeouts(cg.group_id)[0]
        self._session_timers[key] = loop.call_later(timeout_ms / 1000,
                                                    self._expire, cg, member, "session timed out")

    def _cancel_session_timeout(self, cg: ConsumerGroup, member_id: str) -> None:
        handle = self._session_timers.pop((cg.group_id, member_id), None)
        if handle is not None:
            handle.cancel()

    def _schedule_revocation_timeout(self, cg: ConsumerGroup, member: ConsumerGroupMember) -> None:
        epoch = member.member_epoch

        def check() -> None:
            if (cg.members.get(member.member_id) is member and member.state is MemberState.UNREVOKED_PARTITIONS
                    and member.member_epoch == epoch):
                self._expire(cg, member, "did not revoke its partitions within its rebalance timeout")

        asyncio.get_running_loop().call_later(member.rebalance_timeout_ms / 1000, check)

    def _expire(self, cg: ConsumerGroup, member: ConsumerGroupMember, reason: str) -> None:
        if cg.members.get(member.member_id) is not member:
            return
        group = self.manager.get_group(cg.group_id)
        if group is None or group.consumer_group is not cg or not self.manager.is_group_local(cg.group_id):
            return  # the group moved away (or was replaced): not ours to change
        log.info("member %s of consumer group %s is removed: %s", member.member_id, cg.group_id, reason)
        before = copy.deepcopy(cg)
        self._remove(cg, member, reason)
        protocol = self.classic_members.downgrade_protocol(cg) if not member.uses_classic_protocol else None
        if protocol is not None:
            task = asyncio.get_running_loop().create_task(self.classic_members.downgrade(group, before, protocol))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        self._persist_in_background(before, cg)

    def forget(self, group: GroupMetadata) -> None:
        """The group is unloaded or the coordinator stops: drop its timers."""
        cg = group.consumer_group
        if cg is None:
            return
        for member_id in list(cg.members):
            self._cancel_session_timeout(cg, member_id)

    # -- ConsumerGroupDescribe -------------------------------------------------------
    def describe(self, group_id: str) -> tuple[int, str | None, ConsumerGroup | None]:
        """(error, message, the group): only consumer-protocol groups are described here."""
        error = self.classic.validate_group_status(group_id, require_non_empty_id=True)
        if error:
            return error, None, None
        group = self.manager.get_group(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if group.consumer_group is None:
            return GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.", None
        return NONE, None, group.consumer_group

    def assignor_of(self, cg: ConsumerGroup) -> str:
        return cg.preferred_assignor(self.config.assignors[0])

    # -- what offsets need (OffsetCommit / TxnOffsetCommit / OffsetFetch) ------------
    @staticmethod
    def validate_offset_commit(cg: ConsumerGroup, member_id: str, member_epoch: int, transactional: bool) -> int:
        if member_epoch < 0 and not member_id and not cg.members:
            return NONE  # outside group management (admin client, assign()), the group being empty
        member = cg.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if member.uses_classic_protocol and member_epoch != member.member_epoch:
            return ILLEGAL_GENERATION  # a classic member's generation is its member epoch
        if member_epoch > member.member_epoch:
            return ILLEGAL_GENERATION if transactional else FENCED_MEMBER_EPOCH
        if member_epoch < member.member_epoch:
            return ILLEGAL_GENERATION if transactional else STALE_MEMBER_EPOCH
        return NONE

    @staticmethod
    def validate_offset_fetch(cg: ConsumerGroup, member_id: str | None, member_epoch: int) -> int:
        if member_epoch == -1:
            return NONE  # not a member asking (an admin client)
        member = cg.members.get(member_id or "")
        if member is None:
            return UNKNOWN_MEMBER_ID
        if member_epoch > member.member_epoch:
            return FENCED_MEMBER_EPOCH
        if member_epoch < member.member_epoch:
            return STALE_MEMBER_EPOCH
        return NONE


def _member_metadata(m: ConsumerGroupMember) -> tuple[Any, ...]:
    return (m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names, m.subscribed_topic_regex,
            m.rebalance_timeout_ms, m.server_assignor)


def _current_assignment(m: ConsumerGroupMember) -> tuple[Any, ...]:
    return (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation, m.left_static)
