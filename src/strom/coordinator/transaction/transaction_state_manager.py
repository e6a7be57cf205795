"""TransactionStateManager: the transactional ids of the ``__transaction_state`` partitions led here.

Each id lives in partition ``abs(javaHash(id)) % transaction.state.log.num.partitions``;
the broker leading it is the id's transaction coordinator. Every state change is appended
there (acks=all) before it takes effect, so a new leader rebuilds the exact state by
replaying the partition. The coordinator epoch of a partition is its leader epoch at load
time: markers carry it, so a partition leader can refuse markers from a deposed coordinator.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import kafka.errors as Errors

from strom.coordinator.clock import SYSTEM_CLOCK, Clock
from strom.coordinator.common import partition_for
from strom.coordinator.runtime import COMMIT_MARKER, CoordinatorRuntime
from strom.coordinator.transaction.transaction_log import (
    SchemaError,
    key_to_bytes,
    read_key,
    read_value,
    value_to_bytes,
)
from strom.coordinator.transaction.transaction_metadata import (
    COMPLETED_STATES,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
NONE = 0
NOT_COORDINATOR = Errors.NotCoordinatorError.errno
COORDINATOR_NOT_AVAILABLE = Errors.CoordinatorNotAvailableError.errno
COORDINATOR_LOAD_IN_PROGRESS = Errors.CoordinatorLoadInProgressError.errno
UNKNOWN_SERVER_ERROR = Errors.UnknownError.errno
# Open transactions the timeout applies to (a fenced one whose abort could not be logged yet too).
_OPEN_STATES = frozenset({TransactionState.ONGOING, TransactionState.PREPARE_EPOCH_FENCE})


def map_append_error(exc: BaseException) -> int:
    """Kafka's translation of a failed ``__transaction_state`` append into what the client sees."""
    errno = getattr(exc, "errno", None)
    if errno in (Errors.UnknownTopicOrPartitionError.errno, Errors.NotEnoughReplicasError.errno,
                 Errors.NotEnoughReplicasAfterAppendError.errno, Errors.RequestTimedOutError.errno):
        return COORDINATOR_NOT_AVAILABLE
    if errno in (Errors.NotLeaderForPartitionError.errno, Errors.KafkaStorageError.errno):
        return NOT_COORDINATOR
    if not isinstance(exc, Errors.KafkaError):
        log.error("unexpected error appending to %s", TRANSACTION_STATE_TOPIC_NAME, exc_info=exc)
    return UNKNOWN_SERVER_ERROR


@dataclass(frozen=True, slots=True)
class CoordinatorEpochAndTxnMetadata:
    coordinator_epoch: int
    metadata: TransactionMetadata


@dataclass(frozen=True, slots=True)
class TransactionalIdAndProducerIdEpoch:
    transactional_id: str
    producer_id: int
    producer_epoch: int


class TransactionStateManager:
    """Owns the transaction metadata of the ``__transaction_state`` partitions this broker leads.

    ``replica_manager`` needs ``append_records({tp: bytes}, acks)`` and
    ``get_partition(topic, partition)`` (a broker Partition) — the broker's ReplicaManager.
    """

    def __init__(self, broker_id: int, replica_manager: Any, num_partitions: int = 50,
                 transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000, clock: Clock = SYSTEM_CLOCK) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.num_partitions = num_partitions
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        # partition -> (coordinator epoch, transactional id -> metadata)
        self.transaction_metadata_cache: dict[int, tuple[int, dict[str, TransactionMetadata]]] = {}
        self.loading_partitions: set[int] = set()
        self.clock = clock
        self.runtime = CoordinatorRuntime(TRANSACTION_STATE_TOPIC_NAME, replica_manager, clock)

    @property
    def owned_partitions(self) -> set[int]:
        return set(self.transaction_metadata_cache)

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def coordinator_epoch(self, partition: int) -> int | None:
        entry = self.transaction_metadata_cache.get(partition)
        return entry[0] if entry else None

    # -- lookup --------------------------------------------------------------------
    def get_transaction_state(self, transactional_id: str
                              ) -> tuple[int, CoordinatorEpochAndTxnMetadata | None]:
        """(error, metadata): NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, or the id's state if known."""
        partition = self.partition_for(transactional_id)
        if partition in self.loading_partitions:
            return COORDINATOR_LOAD_IN_PROGRESS, None
        entry = self.transaction_metadata_cache.get(partition)
        if entry is None:
            return NOT_COORDINATOR, None
        epoch, ids = entry
        md = ids.get(transactional_id)
        return NONE, None if md is None else CoordinatorEpochAndTxnMetadata(epoch, md)

    def put_transaction_state_if_not_exists(self, md: TransactionMetadata
                                            ) -> tuple[int, CoordinatorEpochAndTxnMetadata | None]:
        err, existing = self.get_transaction_state(md.transactional_id)
        if err or existing is not None:
            return err, existing
        epoch, ids = self.transaction_metadata_cache[self.partition_for(md.transactional_id)]
        ids[md.transactional_id] = md
        return NONE, CoordinatorEpochAndTxnMetadata(epoch, md)

    def all_transactions(self) -> Iterator[TransactionMetadata]:
        for _epoch, ids in self.transaction_metadata_cache.values():
            yield from ids.values()

    def timed_out_transactions(self, now: int | None = None) -> list[TransactionalIdAndProducerIdEpoch]:
        """Open transactions older than their timeout, with nothing else in flight."""
        now = self.clock.wall_ms() if now is None else now
        return [TransactionalIdAndProducerIdEpoch(md.transactional_id, md.producer_id, md.producer_epoch)
                for md in self.all_transactions()
                if md.state in _OPEN_STATES and not md.pending_transition_in_progress
                and md.txn_start_timestamp + md.txn_timeout_ms < now]

    # -- writing -------------------------------------------------------------------
    async def append_transaction_to_log(self, transactional_id: str, coordinator_epoch: int,
                                        transit: TxnTransitMetadata, tombstone: bool = False) -> int:
        """Append the target state (acks=all) and, once durable, make it current; returns an error code.

        If the partition moved or was reloaded meanwhile (another coordinator epoch), the
        write did not count for this coordinator: NOT_COORDINATOR, and the cache is left alone.
        """
        partition = self.partition_for(transactional_id)
        if self.coordinator_epoch(partition) != coordinator_epoch:
            return self._abandon_if_still_ours(transactional_id, coordinator_epoch, NOT_COORDINATOR)

        def apply(_offset: int) -> int:
            """Committed: make the target current, unless the partition moved or was reloaded
            meanwhile (another coordinator epoch), in which case the write did not count here."""
            err, current = self.get_transaction_state(transactional_id)
            if err or current is None or current.coordinator_epoch != coordinator_epoch:
                return NOT_COORDINATOR
            current.metadata.complete_transition(transit)
            if transit.state == TransactionState.DEAD:
                self.transaction_metadata_cache[partition][1].pop(transactional_id, None)
            return NONE

        value = None if tombstone else value_to_bytes(transit)
        try:
            return await self.runtime.write(partition, [(key_to_bytes(transactional_id), value)], apply)
        except Exception as exc:  # noqa: BLE001 - every failure maps to a protocol error
            code = map_append_error(exc)
            log.warning("appending %s of %s to %s-%d failed: %s (error %d)", transit.state.kafka_name,
                        transactional_id, TRANSACTION_STATE_TOPIC_NAME, partition, exc, code)
            return self._abandon_if_still_ours(transactional_id, coordinator_epoch, code)

    def _abandon_if_still_ours(self, transactional_id: str, coordinator_epoch: int, code: int) -> int:
        """A transition that was not written: drop its pending mark if the id is still ours."""
        err, current = self.get_transaction_state(transactional_id)
        if err or current is None or current.coordinator_epoch != coordinator_epoch:
            return code or NOT_COORDINATOR
        current.metadata.abandon_transition()
        return code

    # -- loading -------------------------------------------------------------------
    def read_partition(self, partition: int) -> list[tuple[bytes | None, bytes | None]]:
        """All (key, value) records of one partition in offset order; blocking file I/O."""
        return [(r.key, r.value) for r in self.runtime.read_records(partition) if r.kind < COMMIT_MARKER]

    def current_leader_epoch(self, partition: int) -> int:
        return self.replica_manager.get_partition(TRANSACTION_STATE_TOPIC_NAME, partition).leader_epoch

    def replay(self, partition: int, coordinator_epoch: int, records: Iterable[tuple[bytes | None, bytes | None]]
               ) -> dict[str, TransactionMetadata]:
        """Rebuild one partition's ids and own it, in one go (tools and tests; the broker rebuilds off the loop)."""
        ids = self.rebuild(partition, records)
        self.install(partition, coordinator_epoch, ids)
        return ids

    def read_and_rebuild(self, partition: int) -> dict[str, TransactionMetadata]:
        """Blocking, for a worker thread: read a partition and rebuild its ids, installing nothing."""
        return self.rebuild(partition, self.read_partition(partition))

    def rebuild(self, partition: int, records: Iterable[tuple[bytes | None, bytes | None]]
                ) -> dict[str, TransactionMetadata]:
        """The ids one partition's records describe (latest record per key wins, tombstones delete);
        touches no shared state, so it may run off the loop."""
        latest: dict[str, TxnTransitMetadata | None] = {}
        for key, value in records:
            if key is None:
                continue
            try:
                tid = read_key(key)
                latest[tid] = None if value is None else read_value(value)
            except SchemaError as exc:
                log.warning("skipping unreadable record in %s-%d: %s", TRANSACTION_STATE_TOPIC_NAME, partition, exc)
        return {tid: TransactionMetadata.from_transit(tid, t) for tid, t in latest.items()
                if t is not None and self.partition_for(tid) == partition}

    def install(self, partition: int, coordinator_epoch: int, ids: dict[str, TransactionMetadata]) -> None:
        """On the loop: serve the rebuilt ids under this coordinator epoch."""
        self.transaction_metadata_cache[partition] = (coordinator_epoch, ids)
        if ids:
            log.info("loaded %d transactional ids from %s-%d (coordinator epoch %d)", len(ids),
                     TRANSACTION_STATE_TOPIC_NAME, partition, coordinator_epoch)

    def unload_partition(self, partition: int) -> dict[str, TransactionMetadata]:
        entry = self.transaction_metadata_cache.pop(partition, None)
        return entry[1] if entry else {}

    # -- expiry --------------------------------------------------------------------
    def expirable_transactional_ids(self, now: int | None = None) -> list[tuple[int, TransactionMetadata]]:
        """(coordinator epoch, metadata) of idle ids past ``transactional.id.expiration.ms``."""
        now = self.clock.wall_ms() if now is None else now
        out = []
        for epoch, ids in self.transaction_metadata_cache.values():
            for md in ids.values():
                if (md.state in COMPLETED_STATES and not md.pending_transition_in_progress
                        and md.txn_last_update_timestamp + self.transactional_id_expiration_ms <= now):
                    out.append((epoch, md))
        return out
