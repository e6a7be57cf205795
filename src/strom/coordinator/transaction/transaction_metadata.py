"""TransactionMetadata: one transactional id's producer id, epoch and transaction state.

The states and their legal predecessors are Kafka's. A change is made in two steps, as
Kafka's coordinator does: ``prepare_*`` checks the transition and returns the target
(a ``TxnTransitMetadata``) while marking the transition pending, the target is appended
to ``__transaction_state``, and only then ``complete_transition`` applies it. A pending
transition makes every other request for the id answer CONCURRENT_TRANSACTIONS, which is
how clients are told to retry instead of racing the log write.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue


def now_ms() -> int:
    return int(time.time() * 1000)


class TransactionState(IntEnum):
    """Kafka's transaction states; the value is the ``transaction_status`` byte of the log record."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name ListTransactions and DescribeTransactions speak (``PrepareCommit``, ...)."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TransactionState.EMPTY: "Empty", TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit", TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit", TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead", TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}

S = TransactionState
# Which states each state may be entered from (Kafka's TransactionState.validPreviousStates).
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
# States in which no transaction is open: the id may expire, InitProducerId may bump the epoch.
COMPLETED_STATES = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


def is_epoch_exhausted(epoch: int) -> bool:
    """One epoch is kept in reserve so a fenced producer can still be aborted with epoch + 1."""
    return epoch >= MAX_EPOCH - 1


class IllegalTransition(Exception):
    """A transition Kafka's state machine does not allow (a coordinator bug or a corrupt log)."""


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """What a transition leads to; also exactly what one ``__transaction_state`` value holds."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[tuple[str, int]]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass(eq=False, slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60000
    state: TransactionState = TransactionState.EMPTY
    topic_partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # -- preparing ---------------------------------------------------------------
    def _prepare(self, state: TransactionState, producer_id: int, epoch: int, last_epoch: int, timeout_ms: int,
                 partitions: frozenset[tuple[str, int]], start_ts: int, update_ts: int,
                 last_producer_id: int | None = None) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransition(f"{self.transactional_id}: transition to {state.kafka_name} while "
                                    f"{self.pending_state.kafka_name} is pending")
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}")
        self.pending_state = state
        return TxnTransitMetadata(producer_id, self.last_producer_id if last_producer_id is None else last_producer_id,
                                  epoch, last_epoch, timeout_ms, state, partitions, start_ts, update_ts)

    def prepare_increment_producer_epoch(self, timeout_ms: int, expected_epoch: int | None, now: int
                                         ) -> TxnTransitMetadata | None:
        """InitProducerId on a known id: bump the epoch. None means the caller is fenced.

        A request naming the epoch before the last bump is a retry of that bump: it gets the
        current epoch again instead of a second bump.
        """
        if self.is_producer_epoch_exhausted:
            raise IllegalTransition(f"{self.transactional_id}: epoch {self.producer_epoch} is exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(S.EMPTY, self.producer_id, epoch, last_epoch, timeout_ms, frozenset(), -1, now)

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        """The epoch ran out: continue under a new producer id at epoch 0."""
        return self._prepare(S.EMPTY, new_producer_id, 0,
                             self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             timeout_ms, frozenset(), -1, now, last_producer_id=self.producer_id)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Abort an open transaction under a bumped epoch, so the producer that opened it is fenced.

        Never written to the log: it leads straight into PrepareAbort with the bumped epoch.
        """
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransition(f"{self.transactional_id}: cannot fence epoch {self.producer_epoch}")
        bumped = self.producer_epoch if self.is_producer_epoch_exhausted else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH,
                             self.txn_timeout_ms, frozenset(self.topic_partitions), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def prepare_add_partitions(self, partitions: set[tuple[str, int]], now: int) -> TxnTransitMetadata:
        start = now if self.state in COMPLETED_STATES else self.txn_start_timestamp
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(self.topic_partitions | partitions), start, now)

    def prepare_abort_or_commit(self, state: TransactionState, now: int) -> TxnTransitMetadata:
        return self._prepare(state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(self.topic_partitions), self.txn_start_timestamp, now)

    def prepare_complete(self, now: int) -> TxnTransitMetadata:
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._prepare(state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, now)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    # -- completing ----------------------------------------------------------------
    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """The target is durable (or, for PrepareEpochFence, in force): make it the current state."""
        if self.pending_state != transit.state:
            raise IllegalTransition(f"{self.transactional_id}: completing {transit.state.kafka_name} but "
                                    f"{self.pending_state.kafka_name if self.pending_state else 'nothing'} is pending")
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None

    def abandon_transition(self) -> None:
        """The append failed: the state stays as it was and the id takes requests again."""
        self.pending_state = None

    @classmethod
    def from_transit(cls, transactional_id: str, t: TxnTransitMetadata) -> TransactionMetadata:
        """The metadata a loaded log record describes."""
        return cls(transactional_id, t.producer_id, t.last_producer_id, t.producer_epoch, t.last_producer_epoch,
                   t.txn_timeout_ms, t.state, set(t.topic_partitions), t.txn_start_timestamp,
                   t.txn_last_update_timestamp)
