"""TransactionCoordinator: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, as Kafka 3.x.

Every request runs its checks and prepares its transition without awaiting, so on the one
event loop nothing interleaves between the check and the pending mark; then the target
is appended to ``__transaction_state`` and the client is answered once it is durable.
Ending a transaction is two records around the markers: PrepareCommit/PrepareAbort
(EndTxn answers here), markers to every partition, then CompleteCommit/CompleteAbort.
A coordinator that loads a partition finishes the transactions it finds prepared, so a
crash between the two records loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import kafka.errors as Errors

from strom.coordinator.clock import Clock
from strom.coordinator.group.group_metadata_manager import GROUP_METADATA_TOPIC_NAME
from strom.coordinator.transaction.transaction_marker_channel_manager import TransactionMarkerChannelManager
from strom.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
)
from strom.coordinator.transaction.transaction_state_manager import (
    TRANSACTION_STATE_TOPIC_NAME,
    CoordinatorEpochAndTxnMetadata,
    TransactionStateManager,
)
from strom.server_common.types import TopicPartition

log = logging.getLogger(__name__)

NONE = 0
CONCURRENT_TRANSACTIONS = Errors.ConcurrentTransactionsError.errno
INVALID_REQUEST = Errors.InvalidRequestError.errno
INVALID_TXN_STATE = Errors.InvalidTxnStateError.errno
INVALID_PRODUCER_ID_MAPPING = Errors.InvalidProducerIdMappingError.errno
INVALID_TRANSACTION_TIMEOUT = Errors.InvalidTransactionTimeoutError.errno
PRODUCER_FENCED = Errors.ProducerFencedError.errno
INVALID_PRODUCER_EPOCH = Errors.InvalidProducerEpochError.errno
NOT_COORDINATOR = Errors.NotCoordinatorError.errno
TRANSACTION_ABORTABLE = 120  # KIP-890 (Kafka 3.8); kafka-python has no class for it
S = TransactionState


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinator:
    """The transaction coordinator of the ``__transaction_state`` partitions this broker leads.

    Implements ``coordinator.common.PartitionedCoordinator`` so the broker's metadata
    publisher loads and unloads partitions as their leadership moves.
    """

    def __init__(self, broker_id: int, state_manager: TransactionStateManager,
                 marker_channel: TransactionMarkerChannelManager,
                 generate_producer_id: Callable[[], Awaitable[int]],
                 offsets_partition_for: Callable[[str], int], max_timeout_ms: int = 900000) -> None:
        self.broker_id = broker_id
        self.txn_manager = state_manager
        self.clock: Clock = state_manager.clock  # one time source for the coordinator and its state
        self.marker_channel = marker_channel
        self.generate_producer_id = generate_producer_id
        self.offsets_partition_for = offsets_partition_for
        self.max_timeout_ms = max_timeout_ms
        self.active = True
        self._tasks: set[asyncio.Task[None]] = set()

    # -- InitProducerId --------------------------------------------------------------
    async def handle_init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                                      expected: tuple[int, int] | None = None) -> InitProducerIdResult:
        """A transactional producer (re)starts: bump its epoch, fencing every older instance.

        ``expected`` is the (producer id, epoch) a v3+ client already holds (KIP-360), or None.
        An open transaction is aborted first under a bumped epoch and the client is told
        CONCURRENT_TRANSACTIONS; its retry then bumps again once the abort completed.
        """
        if not transactional_id:
            return InitProducerIdResult(INVALID_REQUEST)
        if transaction_timeout_ms <= 0 or transaction_timeout_ms > self.max_timeout_ms:
            return InitProducerIdResult(INVALID_TRANSACTION_TIMEOUT)
        err, existing = self.txn_manager.get_transaction_state(transactional_id)
        if err:
            return InitProducerIdResult(err)
        if existing is None:
            new_pid = await self.generate_producer_id()
            err, existing = self.txn_manager.put_transaction_state_if_not_exists(TransactionMetadata(
                transactional_id, new_pid, txn_timeout_ms=transaction_timeout_ms,
                txn_last_update_timestamp=self.clock.wall_ms()))
            if err or existing is None:
                return InitProducerIdResult(err or NOT_COORDINATOR)
        md = existing.metadata
        if md.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and md.is_producer_epoch_exhausted \
                and not md.pending_transition_in_progress:
            rotated_pid = await self.generate_producer_id()  # before the checks: nothing may interleave after
        else:
            rotated_pid = None
        err, current = self.txn_manager.get_transaction_state(transactional_id)
        if err or current is None or current.metadata is not md:
            return InitProducerIdResult(err or CONCURRENT_TRANSACTIONS)
        coordinator_epoch = current.coordinator_epoch
        if md.pending_transition_in_progress:
            return InitProducerIdResult(CONCURRENT_TRANSACTIONS)
        if expected is not None and not self._is_valid_producer_id(md, *expected):
            return InitProducerIdResult(PRODUCER_FENCED)
        if md.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return InitProducerIdResult(CONCURRENT_TRANSACTIONS)  # markers still on their way
        if md.state in (S.ONGOING, S.PREPARE_EPOCH_FENCE):
            if md.state == S.ONGOING:
                # In force at once, never logged: the zombie's requests are fenced from now on.
                md.complete_transition(md.prepare_fence_producer_epoch())
            err = await self._end_transaction(transactional_id, md.producer_id, md.producer_epoch,
                                              commit=False, from_client=False)
            return InitProducerIdResult(err or CONCURRENT_TRANSACTIONS)
        if md.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return InitProducerIdResult(CONCURRENT_TRANSACTIONS)
        now = self.clock.wall_ms()
        if md.is_producer_epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
            if rotated_pid is None:
                return InitProducerIdResult(CONCURRENT_TRANSACTIONS)
            transit = md.prepare_producer_id_rotation(rotated_pid, transaction_timeout_ms, now, expected is not None)
        else:
            maybe = md.prepare_increment_producer_epoch(transaction_timeout_ms,
                                                        None if expected is None else expected[1], now)
            if maybe is None:
                return InitProducerIdResult(PRODUCER_FENCED)
            transit = maybe
        err = await self.txn_manager.append_transaction_to_log(transactional_id, coordinator_epoch, transit)
        if err:
            return InitProducerIdResult(err)
        return InitProducerIdResult(NONE, transit.producer_id, transit.producer_epoch)

    @staticmethod
    def _is_valid_producer_id(md: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
        """A KIP-360 client naming its id and epoch is fenced unless the id was just created, the
        epoch is current, or it retries a bump whose answer it lost."""
        if md.producer_epoch == NO_PRODUCER_EPOCH:
            return True
        if producer_id == md.producer_id and producer_epoch == md.producer_epoch:
            return True
        if producer_id == md.producer_id and producer_epoch == md.last_producer_epoch:
            return True
        return producer_id == md.last_producer_id and producer_epoch == md.last_producer_epoch

    def _producer_transaction(self, transactional_id: str, producer_id: int
                              ) -> tuple[int, CoordinatorEpochAndTxnMetadata | None]:
        """The transaction a request of this producer id may act on, or the error to answer instead."""
        if not transactional_id:
            return INVALID_REQUEST, None
        err, current = self.txn_manager.get_transaction_state(transactional_id)
        if err:
            return err, None
        if current is None or current.metadata.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING, None
        return NONE, current

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------
    async def handle_add_partitions_to_transaction(self, transactional_id: str, producer_id: int,
                                                   producer_epoch: int, partitions: set[TopicPartition]) -> int:
        """Record that the transaction writes to these partitions (durable before the producer writes)."""
        err, current = self._producer_transaction(transactional_id, producer_id)
        if current is None:
            return err
        md = current.metadata
        if md.producer_epoch != producer_epoch:
            return PRODUCER_FENCED
        if md.pending_transition_in_progress or md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return CONCURRENT_TRANSACTIONS
        if md.state == S.ONGOING and partitions <= md.topic_partitions:
            return NONE
        if md.state not in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return CONCURRENT_TRANSACTIONS
        transit = md.prepare_add_partitions(partitions, self.clock.wall_ms())
        return await self.txn_manager.append_transaction_to_log(transactional_id, current.coordinator_epoch,
                                                                transit)

    def handle_verify_partitions_in_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                                partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ with VerifyOnly (KIP-890 part 1): is each partition already in the
        producer's ongoing transaction? A leader asks before it appends transactional data. Nothing is
        written; a partition not in the transaction gets TRANSACTION_ABORTABLE, as Kafka 3.8+ answers."""
        err, current = self._producer_transaction(transactional_id, producer_id)
        if current is not None:
            md = current.metadata
            if md.producer_epoch != producer_epoch:
                err = PRODUCER_FENCED
            elif md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                err = CONCURRENT_TRANSACTIONS
            else:
                return {tp: NONE if tp in md.topic_partitions else TRANSACTION_ABORTABLE for tp in partitions}
        return dict.fromkeys(partitions, err)

    async def handle_add_offsets_to_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                                group_id: str) -> int:
        """The group's ``__consumer_offsets`` partition joins the transaction, so TxnOffsetCommit
        records there get the marker too."""
        return await self.handle_add_partitions_to_transaction(
            transactional_id, producer_id, producer_epoch,
            {(GROUP_METADATA_TOPIC_NAME, self.offsets_partition_for(group_id))})

    # -- EndTxn ------------------------------------------------------------------------
    async def handle_end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                     commit: bool) -> int:
        return await self._end_transaction(transactional_id, producer_id, producer_epoch, commit, from_client=True)

    async def _end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                               from_client: bool) -> int:
        err, current = self._producer_transaction(transactional_id, producer_id)
        if current is None:
            return err
        md = current.metadata
        if (from_client and producer_epoch != md.producer_epoch) or producer_epoch < md.producer_epoch:
            return PRODUCER_FENCED
        if md.pending_transition_in_progress:
            return CONCURRENT_TRANSACTIONS
        state = md.state
        if state in (S.ONGOING, S.PREPARE_EPOCH_FENCE):
            if state == S.PREPARE_EPOCH_FENCE and commit:
                return INVALID_TXN_STATE
            transit = md.prepare_abort_or_commit(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, self.clock.wall_ms())
        elif state == S.COMPLETE_COMMIT:
            return NONE if commit else INVALID_TXN_STATE  # a retry of an EndTxn that already completed
        elif state == S.COMPLETE_ABORT:
            return INVALID_TXN_STATE if commit else NONE
        elif state == S.PREPARE_COMMIT:
            return CONCURRENT_TRANSACTIONS if commit else INVALID_TXN_STATE
        elif state == S.PREPARE_ABORT:
            return INVALID_TXN_STATE if commit else CONCURRENT_TRANSACTIONS
        else:  # Empty: nothing to end; Dead: gone
            return INVALID_TXN_STATE
        coordinator_epoch = current.coordinator_epoch
        err = await self.txn_manager.append_transaction_to_log(transactional_id, coordinator_epoch, transit)
        if err:
            return err
        self._complete_in_background(transactional_id, coordinator_epoch, md)
        return NONE

    def _complete_in_background(self, transactional_id: str, coordinator_epoch: int, md: TransactionMetadata) -> None:
        """Markers then the Complete record, after the client has its answer."""
        task = asyncio.get_running_loop().create_task(
            self._send_markers_and_complete(transactional_id, coordinator_epoch, md),
            name=f"txn-markers-{transactional_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _still_coordinator(self, transactional_id: str, coordinator_epoch: int, md: TransactionMetadata) -> bool:
        err, current = self.txn_manager.get_transaction_state(transactional_id)
        return (self.active and not err and current is not None and current.metadata is md
                and current.coordinator_epoch == coordinator_epoch)

    async def _send_markers_and_complete(self, transactional_id: str, coordinator_epoch: int,
                                         md: TransactionMetadata) -> None:
        if md.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT) or md.pending_transition_in_progress:
            return
        commit = md.state == S.PREPARE_COMMIT
        producer_id, producer_epoch = md.producer_id, md.producer_epoch
        complete = md.prepare_complete(self.clock.wall_ms())  # pending from here on: clients see CONCURRENT_TRANSACTIONS
        try:
            delivered = await self.marker_channel.send_markers(
                coordinator_epoch, producer_id, producer_epoch, commit, set(md.topic_partitions),
                lambda: self._still_coordinator(transactional_id, coordinator_epoch, md),
                md.topic_partitions.discard)
        except Exception:
            log.exception("sending markers of %s failed", transactional_id)
            delivered = False
        if not delivered:
            if self._still_coordinator(transactional_id, coordinator_epoch, md):
                md.abandon_transition()
            return
        while self._still_coordinator(transactional_id, coordinator_epoch, md):
            err = await self.txn_manager.append_transaction_to_log(transactional_id, coordinator_epoch, complete)
            if not err or err == NOT_COORDINATOR:
                if not err:
                    log.debug("%s: %s", transactional_id, complete.state.kafka_name)
                return
            # Kafka retries a failed Complete append until the partition moves away.
            log.info("writing %s of %s failed (error %d); retrying", complete.state.kafka_name, transactional_id, err)
            md.pending_state = complete.state
            await self.clock.sleep(0.1)

    # -- timeouts and expiry -------------------------------------------------------------
    async def abort_timed_out_transactions(self) -> int:
        """Abort transactions open longer than their timeout, under a bumped epoch (the producer is fenced)."""
        aborted = 0
        for timed_out in self.txn_manager.timed_out_transactions():
            err, current = self.txn_manager.get_transaction_state(timed_out.transactional_id)
            if err or current is None:
                continue
            md = current.metadata
            if (md.producer_id != timed_out.producer_id or md.pending_transition_in_progress
                    or md.state not in (S.ONGOING, S.PREPARE_EPOCH_FENCE)):
                continue
            if md.state == S.ONGOING:
                md.complete_transition(md.prepare_fence_producer_epoch())
            log.info("aborting transaction %s (producer %d): open longer than its timeout of %d ms",
                     md.transactional_id, md.producer_id, md.txn_timeout_ms)
            err = await self._end_transaction(md.transactional_id, md.producer_id, md.producer_epoch,
                                              commit=False, from_client=False)
            if err:
                log.warning("aborting timed-out transaction %s failed: error %d", md.transactional_id, err)
            else:
                aborted += 1
        return aborted

    async def remove_expired_transactional_ids(self) -> int:
        """Tombstone ids idle longer than ``transactional.id.expiration.ms``."""
        removed = 0
        for coordinator_epoch, md in self.txn_manager.expirable_transactional_ids():
            if md.pending_transition_in_progress:
                continue
            dead = md.prepare_dead()
            err = await self.txn_manager.append_transaction_to_log(md.transactional_id, coordinator_epoch, dead,
                                                                   tombstone=True)
            if not err:
                removed += 1
        if removed:
            log.info("removed %d expired transactional ids", removed)
        return removed

    # -- describe / list -------------------------------------------------------------
    def handle_describe_transaction(self, transactional_id: str) -> tuple[int, TransactionMetadata | None]:
        err, current = self.txn_manager.get_transaction_state(transactional_id)
        if err:
            return err, None
        if current is None:
            return Errors.TransactionalIdNotFoundError.errno, None
        return NONE, current.metadata

    def handle_list_transactions(self, states: set[TransactionState] | None, producer_ids: set[int] | None,
                                 min_duration_ms: int = -1) -> tuple[int, list[TransactionMetadata]]:
        if not self.active:
            return NOT_COORDINATOR, []
        if self.txn_manager.loading_partitions:
            return Errors.CoordinatorLoadInProgressError.errno, []
        now = self.clock.wall_ms()
        out = []
        for md in self.txn_manager.all_transactions():
            if states and md.state not in states:
                continue
            if producer_ids and md.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (md.state != S.ONGOING or now - md.txn_start_timestamp < min_duration_ms):
                continue
            out.append(md)
        return NONE, out

    # -- PartitionedCoordinator ------------------------------------------------------
    @property
    def topic_name(self) -> str:
        return TRANSACTION_STATE_TOPIC_NAME

    @property
    def owned_partitions(self) -> set[int]:
        return self.txn_manager.owned_partitions

    @property
    def loading_partitions(self) -> set[int]:
        return self.txn_manager.loading_partitions

    def set_partition_count(self, count: int) -> None:
        self.txn_manager.num_partitions = count

    def on_election(self, partition: int) -> None:
        """Load synchronously (no running loop: tests and tools); prepared transactions wait for a loop."""
        if partition in self.owned_partitions:
            return
        self.txn_manager.replay(partition, self.txn_manager.current_leader_epoch(partition),
                                self.txn_manager.read_partition(partition))

    async def load_partition(self, partition: int) -> None:
        """Read the partition off the loop (meanwhile its ids answer COORDINATOR_LOAD_IN_PROGRESS),
        then finish every transaction it left prepared: its markers are (re)sent and it completes."""
        if partition in self.owned_partitions:
            return
        self.txn_manager.loading_partitions.add(partition)
        try:
            epoch = self.txn_manager.current_leader_epoch(partition)
            ids = await self.txn_manager.runtime.load(partition, self.txn_manager.read_and_rebuild)
        finally:
            self.txn_manager.loading_partitions.discard(partition)
        if not self.active:
            return
        self.txn_manager.install(partition, epoch, ids)
        for md in ids.values():
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                log.info("completing %s of %s found on load", md.state.kafka_name, md.transactional_id)
                self._complete_in_background(md.transactional_id, epoch, md)

    def on_resignation(self, partition: int) -> None:
        """Leadership moved: forget the partition; marker deliveries in flight notice and stop."""
        self.txn_manager.unload_partition(partition)
        self.txn_manager.runtime.forget(partition)

    async def shutdown(self) -> None:
        self.active = False
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.marker_channel.shutdown()


