"""GroupMetadataManager: the group cache and its durable copy in ``__consumer_offsets``.

Each group lives in one partition of ``__consumer_offsets`` (Kafka's
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``); the broker leading
that partition is the group's coordinator. Every offset commit and every completed
rebalance is appended there as a keyed record, so the topic can be compacted down
to the latest offset per (group, topic, partition) and the latest metadata per
group. Becoming leader of a partition means replaying it to rebuild the cache
(``load_partition``); losing it means forgetting its groups (``unload_partition``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import kafka.errors as Errors

from strom.coordinator.clock import SYSTEM_CLOCK, Clock
from strom.coordinator.common import partition_for
from strom.coordinator.group.consumer_group_records import (
    ConsumerGroupLoad,
    ConsumerGroupRecordKey,
    RecordError,
    consumer_group_tombstones,
)
from strom.coordinator.group.group_metadata import (
    CommitRecordMetadataAndOffset,
    GroupMetadata,
    GroupState,
)
from strom.coordinator.group.member_metadata import MemberMetadata
from strom.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataRecord,
    MemberRecord,
    OffsetKey,
    SchemaError,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    read_group_metadata_value,
    read_key,
    read_offset_commit_value,
)
from strom.coordinator.runtime import (
    COMMIT_MARKER,
    TXN_RECORD,
    CoordinatorRuntime,
    LogRecord,
)
from strom.protocol.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from strom.server_common.types import TopicPartition

T = TypeVar("T")

log = logging.getLogger(__name__)

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"

NONE = 0
UNKNOWN_SERVER_ERROR = Errors.UnknownError.errno
COORDINATOR_NOT_AVAILABLE = Errors.CoordinatorNotAvailableError.errno
NOT_COORDINATOR = Errors.NotCoordinatorError.errno
REBALANCE_IN_PROGRESS = Errors.RebalanceInProgressError.errno
INVALID_COMMIT_OFFSET_SIZE = Errors.InvalidCommitOffsetSizeError.errno
_PRODUCER_ERRORS = frozenset(e.errno for e in (
    Errors.InvalidProducerEpochError, Errors.ProducerFencedError, Errors.InvalidTxnStateError,
    Errors.TransactionCoordinatorFencedError, Errors.OutOfOrderSequenceNumberError))


def map_append_error(exc: BaseException, for_offsets: bool) -> int:
    """Kafka's translation of log append failures into coordinator errors."""
    errno: int | None = getattr(exc, "errno", None)
    if errno in (Errors.UnknownTopicOrPartitionError.errno, Errors.NotEnoughReplicasError.errno,
                 Errors.NotEnoughReplicasAfterAppendError.errno):
        return COORDINATOR_NOT_AVAILABLE
    if errno in (Errors.NotLeaderForPartitionError.errno, Errors.KafkaStorageError.errno):
        return NOT_COORDINATOR
    if errno == Errors.RequestTimedOutError.errno:
        return REBALANCE_IN_PROGRESS
    if errno in (Errors.MessageSizeTooLargeError.errno, Errors.RecordListTooLargeError.errno):
        return INVALID_COMMIT_OFFSET_SIZE if for_offsets else UNKNOWN_SERVER_ERROR
    if errno is not None and errno in _PRODUCER_ERRORS:
        return errno  # a transactional append fenced by the log's producer state: the producer must know
    if not isinstance(exc, Errors.KafkaError):
        log.error("unexpected error appending to %s", GROUP_METADATA_TOPIC_NAME, exc_info=exc)
    return UNKNOWN_SERVER_ERROR


class GroupMetadataManager:
    """Owns the groups of the ``__consumer_offsets`` partitions this broker leads.

    ``replica_manager`` needs ``append_records({tp: bytes}, acks)`` (results, and None or a future
    of them while acks=all waits for the ISR) and
    ``get_partition(topic, partition)`` (a broker Partition) — the broker's
    ReplicaManager in production, a small stand-in in unit tests.
    """

    def __init__(self, broker_id: int, replica_manager: Any, num_partitions: int = 50,
                 retention_ms: int = 7 * 24 * 3600 * 1000, max_metadata_size: int = 4096,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.num_partitions = num_partitions
        self.retention_ms = retention_ms
        self.max_metadata_size = max_metadata_size
        self.groups: dict[str, GroupMetadata] = {}
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        self.clock = clock
        self.runtime = CoordinatorRuntime(GROUP_METADATA_TOPIC_NAME, replica_manager, clock)
        # Called on the loop with a partition once its groups are installed (the offsets replay
        # transaction markers that arrived during the load).
        self.on_partition_installed: list[Callable[[int], None]] = []

    # -- ownership ---------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def is_partition_owned(self, partition: int) -> bool:
        return partition in self.owned_partitions

    def is_group_local(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned_partitions

    def is_group_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading_partitions

    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        return self.groups.setdefault(group.group_id, group)

    def remove_group(self, group: GroupMetadata) -> None:
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    def groups_in_partition(self, partition: int) -> list[GroupMetadata]:
        return [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]

    # -- writing -----------------------------------------------------------------
    async def write(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]],
                    apply: Callable[[int], T] | None = None, *, timestamp: int | None = None,
                    producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                    transactional: bool = False) -> T | int:
        """Append to the group's partition through the runtime and ``apply`` once committed.

        Only a partition this broker coordinates is written (NOT_LEADER otherwise).
        """
        partition = self.partition_for(group_id)
        if partition not in self.owned_partitions:
            raise Errors.NotLeaderForPartitionError(f"{GROUP_METADATA_TOPIC_NAME}-{partition} is not led here")
        return await self.runtime.write(partition, records, apply, timestamp=timestamp, producer_id=producer_id,
                                        producer_epoch=producer_epoch, transactional=transactional)

    @staticmethod
    def group_record(group: GroupMetadata, assignments: dict[str, bytes]) -> GroupMetadataRecord:
        members = [
            MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                         m.session_timeout_ms,
                         m.metadata(group.protocol_name) if group.protocol_name else b"",
                         assignments.get(m.member_id, b""))
            for m in group.members.values()
        ]
        return GroupMetadataRecord(group.protocol_type or "", group.generation_id, group.protocol_name,
                                   group.leader_id, group.current_state_timestamp, members)

    async def store_group(self, group: GroupMetadata, assignments: dict[str, bytes]) -> int:
        """Persist a completed generation (members, subscriptions, assignments); returns an error code."""
        record = self.group_record(group, assignments)
        try:
            await self.write(group.group_id, [(group_metadata_key(group.group_id), group_metadata_value(record))])
        except Exception as exc:  # noqa: BLE001 - every failure maps to a protocol error
            code = map_append_error(exc, for_offsets=False)
            log.warning("storing metadata of group %s failed: %s (error %d)", group.group_id, exc, code)
            return code
        return NONE

    async def delete_group(self, group: GroupMetadata) -> int:
        """DeleteGroups: tombstone an empty group's metadata and all its offsets, then forget it.

        Written, then applied (as every state change on the runtime): the group and its offsets
        stay until the tombstones are committed, and a failed append leaves them as they are,
        which is what the log still says. The reply (the caller's return) waits for the commit."""
        offsets = list(group.offsets)
        records: list[tuple[bytes, bytes | None]] = [
            (offset_commit_key(group.group_id, *tp), None) for tp in offsets]
        records.append((group_metadata_key(group.group_id), None))
        if group.consumer_group is not None:
            records += consumer_group_tombstones(group.group_id)
        try:
            await self.write(group.group_id, records, functools.partial(self._apply_tombstones, group, offsets, True))
        except Exception as exc:  # noqa: BLE001
            log.warning("tombstoning group %s failed: %s", group.group_id, exc)
            return map_append_error(exc, for_offsets=False)
        return NONE

    def _apply_tombstones(self, group: GroupMetadata, offsets: list[TopicPartition], group_deleted: bool,
                          _base_offset: int) -> None:
        """Once the tombstones are committed: drop the offsets they cover; with the group's metadata
        tombstoned too, the group dies unless it came back to life meanwhile (a member joined, or a
        commit appended before the tombstones left an offset the log keeps)."""
        group.remove_offsets(offsets)
        if group_deleted and group.is_in(GroupState.EMPTY) and not group.has_consumer_members \
                and not group.has_offsets():
            group.transition_to(GroupState.DEAD)
            self.remove_group(group)

    # -- loading -----------------------------------------------------------------
    def read_partition(self, partition: int) -> list[LogRecord]:
        """All records and transaction markers of one partition, in offset order; blocking file I/O."""
        return list(self.runtime.read_records(partition))

    def load_partition(self, partition: int, on_group_loaded: Callable[[GroupMetadata], None]) -> int:
        """Read and replay one partition in one go (unit tests; the broker reads off the loop)."""
        self.loading_partitions.add(partition)
        try:
            records = self.read_partition(partition)
        finally:
            self.loading_partitions.discard(partition)
        return self.replay(partition, records, on_group_loaded)

    def replay(self, partition: int, records: Iterable[LogRecord],
               on_group_loaded: Callable[[GroupMetadata], None]) -> int:
        """Rebuild and install the groups of one partition in one go; returns groups loaded."""
        groups = self.rebuild_groups(partition, records)
        self.install_groups(partition, groups)
        for group in groups:
            on_group_loaded(group)
        return len(groups)

    def read_and_rebuild(self, partition: int) -> list[GroupMetadata]:
        """Blocking, for a worker thread: read a partition and rebuild its groups, installing nothing."""
        return self.rebuild_groups(partition, self.read_partition(partition))

    def rebuild_groups(self, partition: int, records: Iterable[LogRecord]) -> list[GroupMetadata]:
        """The groups one partition's records describe; touches no shared state, so it may run off the loop.

        The latest record per key wins and tombstones delete, exactly what compaction
        would leave behind, so a compacted and an uncompacted log load the same.
        Offsets of a transactional batch stay pending under their producer id until that
        producer's marker: a commit publishes them, an abort drops them, and those with no
        marker yet come back as the group's pending transactional offsets.
        """
        now = self.clock.wall_ms()
        offsets: dict[str, dict[TopicPartition, CommitRecordMetadataAndOffset]] = {}
        metadata: dict[str, GroupMetadataRecord | None] = {}
        pending: dict[int, dict[str, dict[TopicPartition, CommitRecordMetadataAndOffset]]] = {}
        consumer: dict[str, ConsumerGroupLoad] = {}  # KIP-848 consumer groups
        for offset, key, value, producer_id, kind in records:
            if kind >= COMMIT_MARKER:
                for group_id, group_pending in pending.pop(producer_id, {}).items():
                    if kind != COMMIT_MARKER:
                        continue
                    loaded = offsets.setdefault(group_id, {})
                    for tp, entry in group_pending.items():
                        current = loaded.get(tp)
                        if current is None or current.older_than(entry):
                            loaded[tp] = entry
                continue
            if key is None:
                continue
            try:
                k = read_key(key)
                if isinstance(k, OffsetKey):
                    tp = (k.topic, k.partition)
                    if kind == TXN_RECORD:
                        per_group = pending.setdefault(producer_id, {}).setdefault(k.group, {})
                    else:
                        per_group = offsets.setdefault(k.group, {})
                    if value is None:
                        per_group.pop(tp, None)
                    else:
                        per_group[tp] = CommitRecordMetadataAndOffset(read_offset_commit_value(value), offset)
                elif isinstance(k, GroupMetadataKey):
                    metadata[k.group] = None if value is None else read_group_metadata_value(value)
                elif isinstance(k, ConsumerGroupRecordKey):
                    consumer.setdefault(k.group, ConsumerGroupLoad(k.group)).apply(k, value)
            except (SchemaError, RecordError) as exc:
                log.warning("skipping unreadable record in %s-%d: %s", GROUP_METADATA_TOPIC_NAME, partition, exc)
        pending_groups = {g for per_producer in pending.values() for g, tps in per_producer.items() if tps}
        groups: list[GroupMetadata] = []
        for group_id in set(offsets) | set(metadata) | pending_groups | set(consumer):
            if self.partition_for(group_id) != partition:
                continue
            rec = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            consumer_group = consumer[group_id].build() if group_id in consumer else None
            if rec is None and not group_offsets and group_id not in pending_groups and consumer_group is None:
                continue  # deleted group, or nothing left of it
            group = self._rebuild_group(group_id, rec, group_offsets, now)
            if consumer_group is not None:
                group.consumer_group = consumer_group
                group.protocol_type = "consumer"
            for producer_id, by_group in pending.items():
                if by_group.get(group_id):
                    group.pending_transactional_offset_commits[producer_id] = dict(by_group[group_id])
            groups.append(group)
        return groups

    def install_groups(self, partition: int, groups: list[GroupMetadata]) -> None:
        """On the loop: serve rebuilt groups, then apply transaction markers that arrived during the load."""
        for group in groups:
            self.groups[group.group_id] = group
        self.owned_partitions.add(partition)
        for listener in self.on_partition_installed:
            listener(partition)
        if groups:
            log.info("loaded %d groups from %s-%d", len(groups), GROUP_METADATA_TOPIC_NAME, partition)

    @staticmethod
    def _rebuild_group(group_id: str, rec: GroupMetadataRecord | None,
                       offsets: dict[TopicPartition, CommitRecordMetadataAndOffset], now: int) -> GroupMetadata:
        group = GroupMetadata(group_id)
        for tp, entry in offsets.items():
            group.commit_offset(tp, entry.offset, entry.append_offset)
        if rec is None:
            latest = max((e.offset.commit_timestamp for e in offsets.values()), default=now)
            group.current_state_timestamp = latest
            return group
        group.protocol_type = rec.protocol_type or None
        group.generation_id = rec.generation
        group.protocol_name = rec.protocol
        for m in rec.members:
            member = MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.rebalance_timeout_ms, m.session_timeout_ms, rec.protocol_type,
                                    [(rec.protocol or "", m.subscription)])
            member.assignment = m.assignment
            group.add(member)
        leader: str | None = rec.leader
        if leader not in group.members:
            leader = next(iter(group.members), None)
        group.leader_id = leader
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        group.current_state_timestamp = rec.current_state_timestamp if rec.current_state_timestamp >= 0 \
            else now
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def unload_partition(self, partition: int) -> list[GroupMetadata]:
        """Forget the groups of a partition this broker no longer leads."""
        self.owned_partitions.discard(partition)
        gone = self.groups_in_partition(partition)
        for group in gone:
            del self.groups[group.group_id]
        return gone

    # -- expiry ------------------------------------------------------------------
    async def cleanup_group_metadata(self, now: int | None = None) -> int:
        """Expire offsets per offsets.retention.minutes; empty groups without offsets die.

        Written, then applied: the expired offsets (and a group that dies with them) are removed
        from memory only once their tombstones are committed; a failed append keeps them."""
        now = self.clock.wall_ms() if now is None else now
        removed = 0
        for group in list(self.groups.values()):
            if not self.is_group_local(group.group_id):
                continue
            expired = group.expired_offsets(now, self.retention_ms)
            records: list[tuple[bytes, bytes | None]] = [
                (offset_commit_key(group.group_id, *tp), None) for tp in expired]
            dies = (group.is_in(GroupState.EMPTY) and not group.has_consumer_members
                    and not group.has_offsets(besides=expired))
            if dies:
                records.append((group_metadata_key(group.group_id), None))
            if not records:
                continue
            try:
                await self.write(group.group_id, records,
                                 functools.partial(self._apply_tombstones, group, expired, dies), timestamp=now)
            except Exception as exc:  # noqa: BLE001
                log.warning("expiring offsets of group %s failed: %s", group.group_id, exc)
                continue
            removed += len(expired)
        if removed:
            log.info("removed %d expired offsets", removed)
        return removed
