"""GroupCoordinator: the classic consumer group protocol (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup). Committed offsets (OffsetCommit, OffsetFetch, OffsetDelete, TxnOffsetCommit)
live in ``offset_metadata_manager``; their handlers are forwarded there, and this class answers
the few questions offsets ask of the group protocol (``GroupProtocol``).

A rebalance has two phases. Join: every member (re)sends JoinGroup and is parked
until all known members have rejoined or the rebalance timeout expires; then a new
generation starts, one protocol is chosen that every member supports, and the
leader receives everyone's metadata. Sync: the leader runs the client-side assignor
and sends the assignment in its SyncGroup; the coordinator persists it and answers
each member's parked SyncGroup with its own share. Heartbeats keep members alive
and tell them (REBALANCE_IN_PROGRESS) when to rejoin. Cooperative (incremental)
rebalancing needs nothing extra here: the clients simply rejoin twice.

Everything runs on the broker's single asyncio loop, so group state needs no locks;
parked requests are asyncio futures and timeouts are purgatory operations.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import kafka.errors as Errors

from strom.coordinator.clock import Clock
from strom.coordinator.group.consumer_group_coordinator import ConsumerGroupCoordinator
from strom.coordinator.group.delayed import DelayedHeartbeat, DelayedJoin, DelayedSync, InitialDelayedJoin
from strom.coordinator.group.group_metadata import GroupMetadata, GroupState, OffsetAndMetadata
from strom.coordinator.group.group_metadata_manager import GROUP_METADATA_TOPIC_NAME, GroupMetadataManager
from strom.coordinator.group.member_metadata import JoinGroupResult, MemberMetadata, SyncGroupResult
from strom.coordinator.group.offset_metadata_manager import OffsetMetadataManager
from strom.coordinator.runtime import in_chunks
from strom.server_common.purgatory import DelayedOperationPurgatory
from strom.server_common.timing_wheel import Timer
from strom.server_common.types import TopicPartition

log = logging.getLogger(__name__)

NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = Errors.CoordinatorLoadInProgressError.errno
COORDINATOR_NOT_AVAILABLE = Errors.CoordinatorNotAvailableError.errno
NOT_COORDINATOR = Errors.NotCoordinatorError.errno
ILLEGAL_GENERATION = Errors.IllegalGenerationError.errno
INCONSISTENT_GROUP_PROTOCOL = Errors.InconsistentGroupProtocolError.errno
INVALID_GROUP_ID = Errors.InvalidGroupIdError.errno
UNKNOWN_MEMBER_ID = Errors.UnknownMemberIdError.errno
INVALID_SESSION_TIMEOUT = Errors.InvalidSessionTimeoutError.errno
REBALANCE_IN_PROGRESS = Errors.RebalanceInProgressError.errno
LOAD_YIELD_EVERY = 500  # groups whose heartbeats are scheduled per loop iteration after a load
MEMBER_ID_REQUIRED = Errors.MemberIdRequiredError.errno
FENCED_INSTANCE_ID = Errors.FencedInstanceIdError.errno
GROUP_MAX_SIZE_REACHED = Errors.GroupMaxSizeReachedError.errno
GROUP_ID_NOT_FOUND = Errors.GroupIdNotFoundError.errno
NON_EMPTY_GROUP = Errors.NonEmptyGroupError.errno
GROUP_SUBSCRIBED_TO_TOPIC = Errors.GroupSubscribedToTopicError.errno
UNKNOWN_SERVER_ERROR = Errors.UnknownError.errno

# How long a member that joined but never completed a join phase may linger (Kafka's value).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1


@dataclass(slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None


@dataclass(slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[tuple[MemberMetadata, bytes, bytes]]  # member, metadata, assignment
    error_code: int = NONE


class GroupCoordinator:
    def __init__(self, broker_id: int, manager: GroupMetadataManager, config: GroupConfig, timer: Timer) -> None:
        self.broker_id = broker_id
        self.manager = manager
        self.config = config
        self.heartbeat_purgatory = DelayedOperationPurgatory("Heartbeat", timer, broker_id)
        self.rebalance_purgatory = DelayedOperationPurgatory("Rebalance", timer, broker_id)
        self.active = True
        self.offsets = OffsetMetadataManager(manager, self)
        self.clock: Clock = manager.clock  # record timestamps; delays run on ``timer``'s own clock
        self.consumer_groups: ConsumerGroupCoordinator | None = None  # KIP-848, when the protocol is enabled

    # -- common checks -----------------------------------------------------------
    def _validate_group_status(self, group_id: str | None, require_non_empty_id: bool) -> int:
        """Coordinator-level checks in Kafka's order: id, ownership, loading."""
        if group_id is None or (require_non_empty_id and group_id == ""):
            return INVALID_GROUP_ID
        if not self.active:
            return COORDINATOR_NOT_AVAILABLE
        if self.manager.is_group_loading(group_id):
            return COORDINATOR_LOAD_IN_PROGRESS
        if not self.manager.is_group_local(group_id):
            return NOT_COORDINATOR
        return NONE

    def _validate_current_member(self, group: GroupMetadata, member_id: str, instance_id: str | None,
                                 generation_id: int | None) -> int:
        if instance_id is not None:
            known = group.static_member_id(instance_id)
            if known is not None and known != member_id:
                return FENCED_INSTANCE_ID
        if not group.has(member_id):
            return UNKNOWN_MEMBER_ID
        if generation_id is not None and generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        return NONE

    # -- JoinGroup ---------------------------------------------------------------
    async def handle_join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                                require_known_member_id: bool, client_id: str, client_host: str,
                                rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                                protocols: list[tuple[str, bytes]]) -> JoinGroupResult:
        error = self._validate_group_status(group_id, require_non_empty_id=True)
        if error:
            return JoinGroupResult(member_id, error)
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return JoinGroupResult(member_id, INVALID_SESSION_TIMEOUT)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0 has no rebalance timeout
        is_unknown = member_id == ""
        group = self.manager.get_group(group_id)
        if group is None:
            if not is_unknown:
                return JoinGroupResult(member_id, UNKNOWN_MEMBER_ID)
            group = self.manager.add_group(GroupMetadata(group_id))
        if self.consumer_groups is not None and self.consumer_groups.classic_members.serves_join(group, member_id):
            # A classic member of a consumer group (online migration): the consumer group answers.
            return await self.consumer_groups.classic_members.join(
                group, member_id, group_instance_id, require_known_member_id, client_id, client_host,
                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[JoinGroupResult] = loop.create_future()
        if is_unknown:
            self._do_new_member_join(group, group_instance_id, require_known_member_id, client_id, client_host,
                                     rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, future)
        else:
            self._do_current_member_join(group, member_id, group_instance_id, client_id, client_host,
                                         rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, future)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            # This join may have been the last one the rebalance was waiting for.
            self.rebalance_purgatory.check_and_complete(("group", group.group_id))
        return await future

    def _group_is_over_capacity(self, group: GroupMetadata) -> bool:
        return group.size >= self.config.max_size

    def _do_new_member_join(self, group: GroupMetadata, instance_id: str | None, require_known_member_id: bool,
                            client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                            protocol_type: str, protocols: list[tuple[str, bytes]],
                            future: asyncio.Future[JoinGroupResult]) -> None:
        def reply(code: int, mid: str = "") -> None:
            future.set_result(JoinGroupResult(mid, code))

        if group.is_in(GroupState.DEAD):
            # The group was deleted or unloaded under us; the client will look it up again.
            return reply(COORDINATOR_NOT_AVAILABLE)
        if group.has_consumer_members:
            return reply(INCONSISTENT_GROUP_PROTOCOL)  # a consumer-protocol group (no online migration)
        group.consumer_group = None  # an empty consumer group becomes a classic one
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            return reply(INCONSISTENT_GROUP_PROTOCOL)
        new_member_id = f"{client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_member_id = group.static_member_id(instance_id)
            if old_member_id is not None:
                log.info("static member %s of group %s rejoined with new member id %s", instance_id,
                         group.group_id, new_member_id)
                return self._update_static_member_and_rebalance(group, old_member_id, new_member_id, instance_id,
                                                                protocols, rebalance_timeout_ms,
                                                                session_timeout_ms, future)
        if self._group_is_over_capacity(group):
            return reply(GROUP_MAX_SIZE_REACHED)
        if require_known_member_id and instance_id is None:
            # KIP-394: hand out the id first so a client that dies mid-join leaves no ghost member.
            group.pending_members.add(new_member_id)
            self._schedule_heartbeat_expiration(group, new_member_id, True, session_timeout_ms)
            return reply(MEMBER_ID_REQUIRED, new_member_id)
        self._add_member_and_rebalance(group, new_member_id, instance_id, client_id, client_host,
                                       rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, future)
        return None

    def _do_current_member_join(self, group: GroupMetadata, member_id: str, instance_id: str | None,
                                client_id: str, client_host: str, rebalance_timeout_ms: int,
                                session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                                future: asyncio.Future[JoinGroupResult]) -> None:
        def reply(code: int) -> None:
            future.set_result(JoinGroupResult(member_id, code))

        if group.is_in(GroupState.DEAD):
            return reply(COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            return reply(INCONSISTENT_GROUP_PROTOCOL)
        if member_id in group.pending_members:
            if instance_id is not None:
                return reply(UNKNOWN_MEMBER_ID)  # static members are never pending
            if self._group_is_over_capacity(group):
                group.pending_members.discard(member_id)
                return reply(GROUP_MAX_SIZE_REACHED)
            self._add_member_and_rebalance(group, member_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, future)
            return None
        error = self._validate_current_member(group, member_id, instance_id, None)
        if error:
            return reply(error)
        member = group.get(member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              future)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # A retried JoinGroup of this generation: answer with what it missed.
                future.set_result(self._join_result(group, member_id))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, future)
        elif group.is_in(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining (e.g. new topic metadata) or a changed subscription: rebalance.
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, future)
            else:
                future.set_result(self._join_result(group, member_id))
        else:
            reply(UNKNOWN_MEMBER_ID)
        return None

    def _join_result(self, group: GroupMetadata, member_id: str) -> JoinGroupResult:
        return JoinGroupResult(
            member_id=member_id, error_code=NONE, generation_id=group.generation_id,
            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.current_member_metadata() if group.is_leader(member_id) else [])

    def _add_member_and_rebalance(self, group: GroupMetadata, member_id: str, instance_id: str | None,
                                  client_id: str, client_host: str, rebalance_timeout_ms: int,
                                  session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                                  future: asyncio.Future[JoinGroupResult]) -> None:
        member = MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                                session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        member.awaiting_join = future
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        # A new member that disconnects before the join completes must not block the group forever.
        # (Scheduled first: completing the join below replaces it with the session timeout.)
        self._complete_and_schedule_next_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata,
                                     protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                                     session_timeout_ms: int, future: asyncio.Future[JoinGroupResult]) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms)
        self._park_join(group, member, future)
        self._prepare_or_complete(group, f"updating metadata of member {member.member_id}")

    def _park_join(self, group: GroupMetadata, member: MemberMetadata, future: asyncio.Future[JoinGroupResult]
                   ) -> None:
        if member.awaiting_join is not None:
            # The client retried its JoinGroup; the old request gets an answer it can retry on.
            member.complete_join(JoinGroupResult(member.member_id, REBALANCE_IN_PROGRESS))
        else:
            group.num_members_awaiting_join += 1
        member.awaiting_join = future

    def _prepare_or_complete(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(("group", group.group_id))
        else:
            self._maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(self, group: GroupMetadata, old_member_id: str, new_member_id: str,
                                            instance_id: str, protocols: list[tuple[str, bytes]],
                                            rebalance_timeout_ms: int, session_timeout_ms: int,
                                            future: asyncio.Future[JoinGroupResult]) -> None:
        """A static member restarted: swap in its new member id without a rebalance when possible."""
        old = group.get(old_member_id)
        # Whatever the fenced incarnation was waiting for, it will never get it now.
        if old.awaiting_join is not None:
            old.complete_join(JoinGroupResult(old_member_id, FENCED_INSTANCE_ID))
            group.num_members_awaiting_join -= 1
        old.complete_sync(SyncGroupResult(FENCED_INSTANCE_ID))
        if old.heartbeat is not None:
            old.heartbeat.cancel()
            old.heartbeat = None
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        protocols_changed = not member.matches(protocols)
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms)
        self._complete_and_schedule_next_heartbeat(group, member)
        if group.is_in(GroupState.STABLE):
            if not protocols_changed and group.protocol_name in group.candidate_protocols():
                # Same subscription: keep the assignment, no rebalance (KIP-345). The leader is
                # told to skip assignment (KIP-814) but still gets the members for older clients.
                result = self._join_result(group, new_member_id)
                result.skip_assignment = group.is_leader(new_member_id)
                asyncio.get_running_loop().create_task(self._persist_then_reply(group, result, future))
                return
            self._park_join(group, member, future)
            self._maybe_prepare_rebalance(group, f"static member {instance_id} changed its protocols")
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            self._park_join(group, member, future)
            self._maybe_prepare_rebalance(group, f"static member {instance_id} rejoined during sync")
        else:  # PreparingRebalance: it simply takes part in the ongoing join
            self._park_join(group, member, future)
            self.rebalance_purgatory.check_and_complete(("group", group.group_id))

    async def _persist_then_reply(self, group: GroupMetadata, result: JoinGroupResult,
                                  future: asyncio.Future[JoinGroupResult]) -> None:
        """Record a static member's new member id so a coordinator restart still knows it."""
        error = await self.manager.store_group(group, {m.member_id: m.assignment for m in group.members.values()})
        if error:
            log.warning("could not persist static member replacement in group %s: error %d", group.group_id, error)
        if not future.done():
            future.set_result(result)

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, REBALANCE_IN_PROGRESS)
        group.pending_sync_members.clear()
        if group.is_in(GroupState.EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            op: DelayedJoin = InitialDelayedJoin(self, group, delay,
                                                 max(group.rebalance_timeout_ms() - delay, 0))
        else:
            op = DelayedJoin(self, group, group.rebalance_timeout_ms())
        log.info("preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
                 group.group_id, group.state, group.generation_id, reason)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        self.rebalance_purgatory.try_complete_else_watch(op, [("group", group.group_id)])

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
            member.complete_sync(SyncGroupResult(error))

    # callbacks of DelayedJoin / InitialDelayedJoin
    def try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]) -> bool:
        if group.has_all_members_joined():
            return force_complete()
        return False

    def on_initial_join_delay_elapsed(self, op: InitialDelayedJoin) -> None:
        group = op.group
        if group.new_member_added and op.remaining_ms > 0 and group.is_in(GroupState.PREPARING_REBALANCE):
            group.new_member_added = False
            delay = min(op.delay_ms, op.remaining_ms)
            nxt = InitialDelayedJoin(self, group, delay, max(op.remaining_ms - delay, 0))
            self.rebalance_purgatory.try_complete_else_watch(nxt, [("group", group.group_id)])
        else:
            self.on_complete_join(group)

    def on_complete_join(self, group: GroupMetadata) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return  # the group died or was unloaded while the join phase ran
        for member in [m for m in group.not_yet_rejoined_members() if not m.is_static]:
            log.info("removing member %s of group %s: it did not rejoin within the rebalance timeout",
                     member.member_id, group.group_id)
            self._remove_heartbeat(member)
            group.remove(member.member_id)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined remain: wait for them (or their session expiry).
            log.warning("group %s could not complete rebalance because no members rejoined", group.group_id)
            self.rebalance_purgatory.try_complete_else_watch(
                DelayedJoin(self, group, group.rebalance_timeout_ms()), [("group", group.group_id)])
            return
        group.init_next_generation()
        if group.is_in(GroupState.EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            asyncio.get_running_loop().create_task(self._store_empty_group(group))
            return
        log.info("stabilized group %s generation %d (protocol %s) with %d members", group.group_id,
                 group.generation_id, group.protocol_name, group.size)
        for member in list(group.members.values()):
            result = self._join_result(group, member.member_id)
            was_waiting = member.complete_join(result)
            if was_waiting:
                group.num_members_awaiting_join -= 1
            member.is_new = False
            self._complete_and_schedule_next_heartbeat(group, member)
        group.num_members_awaiting_join = 0
        self._schedule_pending_sync(group)

    async def _store_empty_group(self, group: GroupMetadata) -> None:
        error = await self.manager.store_group(group, {})
        if error:
            log.warning("failed to write empty metadata for group %s: error %d", group.group_id, error)

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        op = DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms())
        self.rebalance_purgatory.try_complete_else_watch(op, [("sync", group.group_id)])

    def try_complete_pending_sync(self, group: GroupMetadata, generation_id: int,
                                  force_complete: Callable[[], bool]) -> bool:
        if generation_id != group.generation_id or not group.pending_sync_members \
                or not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return force_complete()
        return False

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        if generation_id != group.generation_id or not group.pending_sync_members:
            return
        if not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        missing = list(group.pending_sync_members)
        log.info("removing members %s of group %s: no SyncGroup within the rebalance timeout", missing,
                 group.group_id)
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                self._remove_heartbeat(member)
                group.remove(member_id)
        group.pending_sync_members.clear()
        self._maybe_prepare_rebalance(group, "members did not sync in time")

    # -- heartbeats and expiry ---------------------------------------------------
    def _schedule_heartbeat_expiration(self, group: GroupMetadata, member_id: str, is_pending: bool,
                                       timeout_ms: int) -> DelayedHeartbeat:
        op = DelayedHeartbeat(self, group, member_id, is_pending, timeout_ms)
        self.heartbeat_purgatory.try_complete_else_watch(op, [("member", group.group_id, member_id)])
        return op

    def _complete_and_schedule_next_heartbeat(self, group: GroupMetadata, member: MemberMetadata,
                                              timeout_ms: int | None = None) -> None:
        """Proof of life: satisfy the pending session-timeout check and start the next one."""
        if member.heartbeat is not None:
            member.heartbeat.cancel()
            member.heartbeat.force_complete()
        member.heartbeat_satisfied = False
        member.heartbeat = self._schedule_heartbeat_expiration(
            group, member.member_id, False, member.session_timeout_ms if timeout_ms is None else timeout_ms)

    def _remove_heartbeat(self, member: MemberMetadata) -> None:
        if member.heartbeat is not None:
            member.heartbeat.cancel()
            member.heartbeat.force_complete()
            member.heartbeat = None

    def try_complete_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool,
                               force_complete: Callable[[], bool]) -> bool:
        if is_pending:
            return member_id not in group.pending_members and force_complete()
        member = group.members.get(member_id)
        if member is None:
            return force_complete()
        return False

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None:
        if is_pending:
            if member_id in group.pending_members:
                log.info("pending member %s of group %s expired", member_id, group.group_id)
                group.pending_members.discard(member_id)
                if group.is_in(GroupState.PREPARING_REBALANCE):
                    self.rebalance_purgatory.check_and_complete(("group", group.group_id))
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("member %s of group %s expired (session timeout %d ms)", member_id, group.group_id,
                 member.session_timeout_ms)
        self._remove_member_and_update_group(group, member, "session timeout")

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        group.remove(member.member_id)  # first: it keeps the count of members awaiting join right
        member.complete_join(JoinGroupResult(member.member_id, UNKNOWN_MEMBER_ID))
        member.complete_sync(SyncGroupResult(UNKNOWN_MEMBER_ID))
        self._remove_heartbeat(member)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"removing member {member.member_id} ({reason})")
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(("group", group.group_id))

    async def handle_heartbeat(self, group_id: str, member_id: str, instance_id: str | None,
                               generation_id: int) -> int:
        error = self._validate_group_status(group_id, require_non_empty_id=True)
        if error:
            # A loading coordinator cannot know the member yet; the client will just retry.
            return NONE if error == COORDINATOR_LOAD_IN_PROGRESS else error
        group = self.manager.get_group(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        if group.consumer_group is not None and self.consumer_groups is not None:
            return self.consumer_groups.classic_members.heartbeat(group, member_id, instance_id, generation_id)
        if group.is_in(GroupState.DEAD):
            return COORDINATOR_NOT_AVAILABLE
        if group.is_in(GroupState.EMPTY):
            return UNKNOWN_MEMBER_ID
        error = self._validate_current_member(group, member_id, instance_id, generation_id)
        if error:
            return error
        member = group.get(member_id)
        self._complete_and_schedule_next_heartbeat(group, member)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return REBALANCE_IN_PROGRESS
        return NONE

    # -- SyncGroup ---------------------------------------------------------------
    async def handle_sync_group(self, group_id: str, generation_id: int, member_id: str,
                                instance_id: str | None, protocol_type: str | None, protocol_name: str | None,
                                assignments: dict[str, bytes]) -> SyncGroupResult:
        error = self._validate_group_status(group_id, require_non_empty_id=True)
        if error:
            # Kafka: a coordinator still loading makes the member rejoin instead of waiting.
            return SyncGroupResult(REBALANCE_IN_PROGRESS if error == COORDINATOR_LOAD_IN_PROGRESS else error)
        group = self.manager.get_group(group_id)
        if group is None:
            return SyncGroupResult(UNKNOWN_MEMBER_ID)
        if group.consumer_group is not None and self.consumer_groups is not None:
            return self.consumer_groups.classic_members.sync(group, generation_id, member_id, instance_id,
                                                             protocol_type, protocol_name)
        if group.is_in(GroupState.DEAD):
            return SyncGroupResult(COORDINATOR_NOT_AVAILABLE)
        error = self._validate_current_member(group, member_id, instance_id, generation_id)
        if error:
            return SyncGroupResult(error)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return SyncGroupResult(INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(GroupState.EMPTY):
            return SyncGroupResult(UNKNOWN_MEMBER_ID)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return SyncGroupResult(REBALANCE_IN_PROGRESS)
        member = group.get(member_id)
        group.pending_sync_members.discard(member_id)
        self.rebalance_purgatory.check_and_complete(("sync", group.group_id))
        if group.is_in(GroupState.STABLE):
            self._complete_and_schedule_next_heartbeat(group, member)
            return SyncGroupResult(NONE, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: park until the leader's assignment is stored.
        future: asyncio.Future[SyncGroupResult] = asyncio.get_running_loop().create_future()
        if member.awaiting_sync is not None:
            member.complete_sync(SyncGroupResult(REBALANCE_IN_PROGRESS))
        member.awaiting_sync = future
        self._complete_and_schedule_next_heartbeat(group, member)
        if group.is_leader(member_id):
            full = {mid: assignments.get(mid, b"") for mid in group.members}
            generation = group.generation_id
            error = await self.manager.store_group(group, full)
            if group.is_in(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation:
                if error:
                    self._reset_and_propagate_assignment_error(group, error)
                    self._maybe_prepare_rebalance(group, f"error {error} storing the assignment")
                else:
                    for mid, m in group.members.items():
                        m.assignment = full[mid]
                        m.complete_sync(SyncGroupResult(NONE, group.protocol_type, group.protocol_name,
                                                        m.assignment))
                    group.transition_to(GroupState.STABLE)
                    log.info("assignment received from leader %s for group %s for generation %d",
                             member_id, group.group_id, generation)
        return await future

    # -- LeaveGroup --------------------------------------------------------------
    async def handle_leave_group(self, group_id: str, leaving: list[MemberIdentity], reason: str | None = None
                                 ) -> tuple[int, list[tuple[MemberIdentity, int]]]:
        error = self._validate_group_status(group_id, require_non_empty_id=True)
        if error:
            return error, []
        group = self.manager.get_group(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return NONE if group is None else COORDINATOR_NOT_AVAILABLE, \
                [(m, UNKNOWN_MEMBER_ID) for m in leaving]
        if group.consumer_group is not None and self.consumer_groups is not None:
            return NONE, await self.consumer_groups.classic_members.leave(group, leaving)
        results = []
        for ident in leaving:
            member_id = ident.member_id
            if ident.group_instance_id is not None:
                known = group.static_member_id(ident.group_instance_id)
                if known is None:
                    results.append((ident, UNKNOWN_MEMBER_ID))
                    continue
                if member_id and member_id != known:
                    results.append((ident, FENCED_INSTANCE_ID))
                    continue
                member_id = known
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                if group.is_in(GroupState.PREPARING_REBALANCE):
                    self.rebalance_purgatory.check_and_complete(("group", group.group_id))
                results.append((ident, NONE))
                continue
            member = group.members.get(member_id)
            if member is None:
                results.append((ident, UNKNOWN_MEMBER_ID))
                continue
            log.info("member %s left group %s%s", member_id, group.group_id, f" ({reason})" if reason else "")
            self._remove_member_and_update_group(group, member, reason or "member left the group")
            results.append((ident, NONE))
        return NONE, results

    # -- offsets (strom.coordinator.group.offset_metadata_manager) -------------------
    async def handle_commit_offsets(self, group_id: str, member_id: str, instance_id: str | None,
                                    generation_id: int, offsets: dict[TopicPartition, OffsetAndMetadata]
                                    ) -> dict[TopicPartition, int]:
        return await self.offsets.commit_offsets(group_id, member_id, instance_id, generation_id, offsets)

    async def handle_txn_offset_commit(self, transactional_id: str, group_id: str, producer_id: int,
                                       producer_epoch: int, member_id: str, generation_id: int,
                                       group_instance_id: str | None,
                                       offsets: dict[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, int]:
        return await self.offsets.txn_offset_commit(transactional_id, group_id, producer_id, producer_epoch,
                                                    member_id, generation_id, group_instance_id, offsets)

    def on_txn_completed(self, producer_id: int, offsets_partitions: set[int], committed: bool) -> None:
        """The transaction's marker was written to these ``__consumer_offsets`` partitions: its
        pending offsets become the committed ones (commit) or vanish (abort)."""
        touched = self.offsets.complete_txn(producer_id, set(offsets_partitions), committed)
        if touched:
            log.debug("%s transactional offsets of producer %d in %d groups", "committed" if committed
                      else "aborted", producer_id, touched)

    def partitions_with_pending_offsets(self, group_id: str, partitions: list[TopicPartition]
                                        ) -> set[TopicPartition]:
        return self.offsets.partitions_with_pending_offsets(group_id, partitions)

    def handle_fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None
                             ) -> tuple[int, dict[TopicPartition, OffsetAndMetadata | None]]:
        return self.offsets.fetch_offsets(group_id, partitions)

    async def handle_delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                                    ) -> tuple[int, dict[TopicPartition, int]]:
        return await self.offsets.delete_offsets(group_id, partitions)

    # -- what offsets need from the classic protocol (offset_metadata_manager.GroupProtocol) ----
    def validate_group_status(self, group_id: str | None, require_non_empty_id: bool) -> int:
        return self._validate_group_status(group_id, require_non_empty_id)

    def validate_offset_commit(self, group: GroupMetadata, member_id: str, instance_id: str | None,
                               generation_id: int) -> int:
        if group.consumer_group is not None:
            return ConsumerGroupCoordinator.validate_offset_commit(group.consumer_group, member_id, generation_id,
                                                                   transactional=False)
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self._validate_current_member(group, member_id, instance_id, generation_id)
            if error:
                return error
        elif not group.is_in(GroupState.EMPTY):
            # A commit outside group management would race the group's own members.
            return UNKNOWN_MEMBER_ID
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return REBALANCE_IN_PROGRESS
        return NONE

    def validate_txn_offset_commit(self, group: GroupMetadata, member_id: str, instance_id: str | None,
                                   generation_id: int) -> int:
        if group.consumer_group is not None:
            return ConsumerGroupCoordinator.validate_offset_commit(group.consumer_group, member_id, generation_id,
                                                                   transactional=True)
        if instance_id is not None:
            known = group.static_member_id(instance_id)
            if known is not None and known != member_id:
                return FENCED_INSTANCE_ID
        if member_id and not group.has(member_id):
            return UNKNOWN_MEMBER_ID
        if generation_id >= 0 and generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        return NONE

    def is_consumer_protocol_member(self, group_id: str, member_id: str) -> bool:
        group = self.manager.get_group(group_id) if self.manager.is_group_local(group_id) else None
        return group is not None and group.consumer_group is not None and member_id in group.consumer_group.members

    def validate_offset_fetch_member(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9+ from a consumer-protocol member: is its epoch current? 0 if so."""
        group = self.manager.get_group(group_id) if self.manager.is_group_local(group_id) else None
        if group is None or group.consumer_group is None:
            return NONE
        return ConsumerGroupCoordinator.validate_offset_fetch(group.consumer_group, member_id, member_epoch)

    def on_offset_commit(self, group: GroupMetadata, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is not None:
            self._complete_and_schedule_next_heartbeat(group, member)

    # -- admin -------------------------------------------------------------------
    def handle_list_groups(self, states: set[str] | None = None) -> tuple[int, list[GroupMetadata]]:
        if not self.active:
            return COORDINATOR_NOT_AVAILABLE, []
        if self.manager.loading_partitions:
            return COORDINATOR_LOAD_IN_PROGRESS, []
        groups = [g for g in self.manager.groups.values() if not g.is_in(GroupState.DEAD)]
        if states:
            wanted = {s.lower() for s in states}
            groups = [g for g in groups if g.state_name.lower() in wanted]
        return NONE, groups

    def handle_describe_group(self, group_id: str) -> GroupSummary:
        error = self._validate_group_status(group_id, require_non_empty_id=False)
        if error:
            return GroupSummary(group_id, "", "", "", [], error)
        group = self.manager.get_group(group_id)
        if group is None or group.consumer_group is not None:
            # A consumer-protocol group is not a classic one: DescribeGroups (up to v5) says Dead, as Kafka.
            return GroupSummary(group_id, str(GroupState.DEAD), "", "", [])
        if group.is_in(GroupState.STABLE):
            proto = group.protocol_name or ""
            members = [(m, m.metadata(proto) if proto in m.protocols() else b"", m.assignment)
                       for m in group.members.values()]
            return GroupSummary(group_id, str(group.state), group.protocol_type or "", proto, members)
        members = [(m, b"", b"") for m in group.members.values()]
        return GroupSummary(group_id, str(group.state), group.protocol_type or "", "", members)

    async def handle_delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        results: dict[str, int] = {}
        for group_id in group_ids:
            error = self._validate_group_status(group_id, require_non_empty_id=False)
            if error:
                results[group_id] = error
                continue
            group = self.manager.get_group(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                results[group_id] = GROUP_ID_NOT_FOUND
            elif not group.is_in(GroupState.EMPTY) or group.has_consumer_members:
                results[group_id] = NON_EMPTY_GROUP
            else:
                results[group_id] = await self.manager.delete_group(group)  # dead once the tombstones commit
                if results[group_id] == NONE:
                    log.info("deleted group %s", group_id)
        return results

    # -- partition ownership (strom.coordinator.common.PartitionedCoordinator) ------
    @property
    def topic_name(self) -> str:
        return GROUP_METADATA_TOPIC_NAME

    @property
    def owned_partitions(self) -> set[int]:
        return self.manager.owned_partitions

    @property
    def loading_partitions(self) -> set[int]:
        return self.manager.loading_partitions

    def set_partition_count(self, count: int) -> None:
        self.manager.num_partitions = count

    def on_election(self, partition: int) -> None:
        """This broker became leader of an ``__consumer_offsets`` partition: load its groups (blocking)."""
        if self.manager.is_partition_owned(partition):
            return
        self.manager.load_partition(partition, self._on_group_loaded)

    async def load_partition(self, partition: int) -> None:
        """Like on_election, but off the loop: a worker thread reads the log and rebuilds the groups
        (decoding every record of a large partition would stall the loop), the loop only installs
        them and schedules their members' heartbeats in chunks. Meanwhile requests for the
        partition's groups get COORDINATOR_LOAD_IN_PROGRESS and clients retry. A read failure
        propagates so the caller (``coordinator.common.load_with_retry``) retries it."""
        if self.manager.is_partition_owned(partition):
            return
        self.manager.loading_partitions.add(partition)  # callers may have marked it already
        try:
            groups = await self.manager.runtime.load(partition, self.manager.read_and_rebuild)
        finally:
            self.manager.loading_partitions.discard(partition)
        if not self.active:
            return
        self.manager.install_groups(partition, groups)

        def schedule_heartbeats(group: GroupMetadata) -> None:
            if self.manager.groups.get(group.group_id) is group:  # not unloaded meanwhile
                self._on_group_loaded(group)

        await in_chunks(groups, schedule_heartbeats, LOAD_YIELD_EVERY)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        # Members recovered from the log get a full session to reconnect and heartbeat.
        if self.consumer_groups is not None:
            self.consumer_groups.on_group_loaded(group)
        for member in group.members.values():
            self._complete_and_schedule_next_heartbeat(group, member)

    def on_resignation(self, partition: int) -> None:
        """Leadership moved away: answer everything parked with NOT_COORDINATOR and forget the groups."""
        for group in self.manager.unload_partition(partition):
            self._kill_group(group, NOT_COORDINATOR)
        self.manager.runtime.forget(partition)

    def _kill_group(self, group: GroupMetadata, error: int) -> None:
        if self.consumer_groups is not None:
            self.consumer_groups.forget(group)
        for member in group.members.values():
            member.complete_join(JoinGroupResult(member.member_id, error))
            member.complete_sync(SyncGroupResult(error))
            self._remove_heartbeat(member)
        group.transition_to(GroupState.DEAD)
        self.rebalance_purgatory.cancel_for_key(("group", group.group_id))
        self.rebalance_purgatory.cancel_for_key(("sync", group.group_id))

    async def cleanup_group_metadata(self) -> int:
        return await self.manager.cleanup_group_metadata()

    def shutdown(self) -> None:
        self.active = False
        for partition in list(self.manager.owned_partitions):
            self.on_resignation(partition)


__all__ = ["GroupCoordinator", "GroupConfig", "MemberIdentity", "GroupSummary", "GROUP_METADATA_TOPIC_NAME"]
