"""OffsetMetadataManager: committed offsets of the groups, apart from how a group rebalances.

OffsetCommit, TxnOffsetCommit, OffsetFetch and OffsetDelete, and the transactional offsets
a transaction marker publishes or drops. Offsets do not depend on the group protocol: what
they need from it is behind ``GroupProtocol`` (may this member commit? a commit is a sign of
life), so a second protocol (KIP-848's consumer groups) can sit beside the classic one and
share this module, as in Kafka's new group coordinator.

Every change is appended to the group's ``__consumer_offsets`` partition through the
coordinator runtime and applied to the group only once the append is committed.
"""

from __future__ import annotations

import logging
from typing import Protocol

import kafka.errors as Errors

from strom.coordinator.group.group_metadata import GroupMetadata, GroupState, OffsetAndMetadata
from strom.coordinator.group.group_metadata_manager import (
    COORDINATOR_NOT_AVAILABLE,
    GroupMetadataManager,
    map_append_error,
)
from strom.coordinator.group.records import offset_commit_key, offset_commit_value
from strom.server_common.types import TopicPartition

log = logging.getLogger(__name__)

NONE = 0
GROUP_ID_NOT_FOUND = Errors.GroupIdNotFoundError.errno
NON_EMPTY_GROUP = Errors.NonEmptyGroupError.errno
GROUP_SUBSCRIBED_TO_TOPIC = Errors.GroupSubscribedToTopicError.errno
OFFSET_METADATA_TOO_LARGE = Errors.OffsetMetadataTooLargeError.errno


class GroupProtocol(Protocol):
    """What committed offsets need from the protocol that manages the group's membership."""

    def validate_group_status(self, group_id: str | None, require_non_empty_id: bool) -> int:
        """Coordinator-level checks (id, ownership, loading); 0 if the group is served here."""
        ...

    def validate_offset_commit(self, group: GroupMetadata, member_id: str, instance_id: str | None,
                               generation_id: int) -> int:
        """May this member (or a committer outside group management) commit now? 0 if so."""
        ...

    def validate_txn_offset_commit(self, group: GroupMetadata, member_id: str, instance_id: str | None,
                                   generation_id: int) -> int:
        """TxnOffsetCommit's (KIP-447) member checks; 0 if the commit may proceed."""
        ...

    def on_offset_commit(self, group: GroupMetadata, member_id: str) -> None:
        """A member committed: proof of life, as a heartbeat is."""
        ...


class OffsetMetadataManager:
    """Committed and transactional offsets of the groups ``groups`` holds."""

    def __init__(self, groups: GroupMetadataManager, protocol: GroupProtocol) -> None:
        self.groups = groups
        self.protocol = protocol
        # Transaction completions that arrived while a partition was loading (see complete_txn).
        self._completions_during_load: dict[int, list[tuple[int, bool]]] = {}
        groups.on_partition_installed.append(self._apply_completions_during_load)

    # -- OffsetCommit ----------------------------------------------------------------
    async def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                             offsets: dict[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, int]:
        def all_(code: int) -> dict[TopicPartition, int]:
            return dict.fromkeys(offsets, code)

        error = self.protocol.validate_group_status(group_id, require_non_empty_id=False)
        if error:
            return all_(error)
        group = self.groups.get_group(group_id)
        if group is None:
            if generation_id < 0:
                # Not using group management (assign() + commit): the group exists only for its offsets.
                group = self.groups.add_group(GroupMetadata(group_id))
            else:
                return all_(Errors.IllegalGenerationError.errno)
        if group.is_in(GroupState.DEAD):
            return all_(COORDINATOR_NOT_AVAILABLE)
        error = self.protocol.validate_offset_commit(group, member_id, instance_id, generation_id)
        if error:
            return all_(error)
        self.protocol.on_offset_commit(group, member_id)
        return await self.store_offsets(group, offsets)

    def validate_offset_metadata(self, off: OffsetAndMetadata) -> bool:
        return len((off.metadata or "").encode("utf-8")) <= self.groups.max_metadata_size

    def _offset_records(self, group: GroupMetadata, offsets: dict[TopicPartition, OffsetAndMetadata]
                        ) -> tuple[dict[TopicPartition, OffsetAndMetadata], dict[TopicPartition, int],
                                   list[tuple[bytes, bytes | None]]]:
        """The offsets whose metadata fits (the rest get OFFSET_METADATA_TOO_LARGE) and their records."""
        errors: dict[TopicPartition, int] = {}
        valid = {}
        for tp, off in offsets.items():
            if self.validate_offset_metadata(off):
                valid[tp] = off
            else:
                errors[tp] = OFFSET_METADATA_TOO_LARGE
        records: list[tuple[bytes, bytes | None]] = [
            (offset_commit_key(group.group_id, tp[0], tp[1]), offset_commit_value(off)) for tp, off in valid.items()]
        return valid, errors, records

    async def store_offsets(self, group: GroupMetadata, offsets: dict[TopicPartition, OffsetAndMetadata]
                            ) -> dict[TopicPartition, int]:
        """Append one batch with all the commits, then apply them to the group; per-partition errors."""
        valid, errors, records = self._offset_records(group, offsets)
        if not valid:
            return errors
        for tp in valid:
            group.pending_offset_commits[tp] = group.pending_offset_commits.get(tp, 0) + 1

        def apply(base_offset: int) -> None:
            if not group.is_in(GroupState.DEAD):
                for tp, off in valid.items():
                    group.commit_offset(tp, off, base_offset)

        code = NONE
        try:
            await self.groups.write(group.group_id, records, apply)
        except Exception as exc:  # noqa: BLE001 - every failure maps to a protocol error
            code = map_append_error(exc, for_offsets=True)
            log.warning("storing offsets of group %s failed: %s (error %d)", group.group_id, exc, code)
        finally:
            for tp in valid:
                left = group.pending_offset_commits.get(tp, 1) - 1
                if left > 0:
                    group.pending_offset_commits[tp] = left
                else:
                    group.pending_offset_commits.pop(tp, None)
        for tp in valid:
            errors[tp] = code
        return errors

    # -- TxnOffsetCommit and transaction markers ---------------------------------------
    async def txn_offset_commit(self, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int,
                                member_id: str, generation_id: int, group_instance_id: str | None,
                                offsets: dict[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, int]:
        """Offsets written in the producer's transaction, pending until its marker.

        An unknown group is fine (a producer may commit for a group nobody joined yet); the
        v3 member fields, when given, are checked like OffsetCommit's so a zombie consumer
        of an old generation cannot commit (KIP-447).
        """
        def all_(code: int) -> dict[TopicPartition, int]:
            return dict.fromkeys(offsets, code)

        error = self.protocol.validate_group_status(group_id, require_non_empty_id=True)
        if error:
            return all_(error)
        group = self.groups.get_group(group_id)
        if group is None:
            group = self.groups.add_group(GroupMetadata(group_id))
        if group.is_in(GroupState.DEAD):
            return all_(COORDINATOR_NOT_AVAILABLE)
        error = self.protocol.validate_txn_offset_commit(group, member_id, group_instance_id, generation_id)
        if error:
            return all_(error)
        log.debug("transactional offset commit of %s (producer %d epoch %d) for group %s", transactional_id,
                  producer_id, producer_epoch, group_id)
        return await self.store_txn_offsets(group, producer_id, producer_epoch, offsets)

    async def store_txn_offsets(self, group: GroupMetadata, producer_id: int, producer_epoch: int,
                                offsets: dict[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, int]:
        """Append the offsets as a transactional batch of the producer; they stay pending in the
        group until ``complete_txn`` sees the transaction's marker."""
        valid, errors, records = self._offset_records(group, offsets)
        if not valid:
            return errors
        group.prepare_txn_offset_commit(producer_id, valid)

        def apply(base_offset: int) -> None:
            for tp in valid:
                group.on_txn_offset_commit_append(producer_id, tp, base_offset)

        code = NONE
        try:
            await self.groups.write(group.group_id, records, apply, producer_id=producer_id,
                                    producer_epoch=producer_epoch, transactional=True)
        except Exception as exc:  # noqa: BLE001
            code = map_append_error(exc, for_offsets=True)
            log.warning("storing transactional offsets of group %s (producer %d) failed: %s (error %d)",
                        group.group_id, producer_id, exc, code)
            for tp in valid:
                group.fail_pending_txn_offset_commit(producer_id, tp)
        for tp in valid:
            errors[tp] = code
        return errors

    def complete_txn(self, producer_id: int, partitions: set[int], committed: bool) -> int:
        """A transaction marker of ``producer_id`` reached these partitions: publish or drop its
        pending offsets in their groups; returns the groups touched. A partition still loading
        gets the completion after its replay (the marker may lie past what the load read)."""
        touched = 0
        for partition in partitions:
            if partition in self.groups.loading_partitions:
                self._completions_during_load.setdefault(partition, []).append((producer_id, committed))
        for group in list(self.groups.groups.values()):
            if self.groups.partition_for(group.group_id) not in partitions:
                continue
            if group.has_pending_offset_commits_from_producer(producer_id):
                group.complete_pending_txn_offset_commit(producer_id, committed)
                touched += 1
        return touched

    def _apply_completions_during_load(self, partition: int) -> None:
        for producer_id, committed in self._completions_during_load.pop(partition, []):
            self.complete_txn(producer_id, {partition}, committed)

    def partitions_with_pending_offsets(self, group_id: str, partitions: list[TopicPartition]
                                        ) -> set[TopicPartition]:
        """Partitions whose offset is about to change (OffsetFetch require_stable answers
        UNSTABLE_OFFSET_COMMIT for them): a commit in flight or one waiting for its transaction."""
        group = self.groups.get_group(group_id)
        if group is None:
            return set()
        return {tp for tp in partitions if group.has_pending_offset_commits_for(tp)}

    # -- OffsetFetch -------------------------------------------------------------------
    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None
                      ) -> tuple[int, dict[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets (None where nothing is committed); partitions=None means all of them."""
        error = self.protocol.validate_group_status(group_id, require_non_empty_id=False)
        if error:
            return error, {}
        group = self.groups.get_group(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return NONE, {tp: None for tp in partitions or []}
        if partitions is None:
            return NONE, dict(group.offsets)
        return NONE, {tp: group.offsets.get(tp) for tp in partitions}

    # -- OffsetDelete ------------------------------------------------------------------
    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> tuple[int, dict[TopicPartition, int]]:
        error = self.protocol.validate_group_status(group_id, require_non_empty_id=True)
        if error:
            return error, {}
        group = self.groups.get_group(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return GROUP_ID_NOT_FOUND, {}
        if group.members and group.protocol_type != "consumer":
            return NON_EMPTY_GROUP, {}
        results: dict[TopicPartition, int] = {}
        deletable = []
        consumer_topics = set(group.consumer_group.subscription_metadata) if group.has_consumer_members \
            and group.consumer_group is not None else set()
        for tp in partitions:
            if group.members and (group.subscribed_topics is None or group.is_subscribed_to_topic(tp[0])) \
                    or tp[0] in consumer_topics:
                results[tp] = GROUP_SUBSCRIBED_TO_TOPIC
            else:
                deletable.append(tp)
                results[tp] = NONE
        code = await self.tombstone_offsets(group, deletable)
        if code:
            for tp in deletable:
                results[tp] = code
        return NONE, results

    async def tombstone_offsets(self, group: GroupMetadata, partitions: list[TopicPartition]) -> int:
        """Tombstone committed offsets, then drop them from the group; returns an error code.

        A failed append leaves the offsets committed, as the log still says they are."""
        if not partitions:
            return NONE
        committed = [tp for tp in partitions if tp in group.offsets]
        if not committed:
            group.remove_offsets(partitions)  # pending transactional offsets go with them, nothing to write
            return NONE
        try:
            await self.groups.write(group.group_id,
                                    [(offset_commit_key(group.group_id, *tp), None) for tp in committed],
                                    lambda _offset: group.remove_offsets(partitions))
        except Exception as exc:  # noqa: BLE001
            log.warning("tombstoning offsets of group %s failed: %s", group.group_id, exc)
            return map_append_error(exc, for_offsets=True)
        return NONE
