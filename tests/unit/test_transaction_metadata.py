"""Kafka's transaction state machine: legal transitions, epoch bumps, fencing and id rotation."""

from __future__ import annotations

import pytest

from strom.coordinator.transaction.transaction_metadata import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    VALID_PREVIOUS_STATES,
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
)

S = TransactionState


def md(state: TransactionState = S.EMPTY, epoch: int = 0, partitions: set[tuple[str, int]] | None = None
       ) -> TransactionMetadata:
    return TransactionMetadata("tx", 1000, producer_epoch=epoch, txn_timeout_ms=60000, state=state,
                               topic_partitions=set(partitions or ()), txn_start_timestamp=5,
                               txn_last_update_timestamp=5)


def test_state_names_and_status_bytes_are_kafkas() -> None:
    assert [(s.value, s.kafka_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert S.from_kafka_name("PrepareCommit") is S.PREPARE_COMMIT
    assert S.from_kafka_name("Bogus") is None


@pytest.mark.parametrize("target", list(S))
@pytest.mark.parametrize("source", list(S))
def test_only_kafkas_transitions_are_legal(source: TransactionState, target: TransactionState) -> None:
    m = md(source)
    ok = source in VALID_PREVIOUS_STATES[target]
    try:
        m._prepare(target, m.producer_id, m.producer_epoch, m.last_producer_epoch, m.txn_timeout_ms,
                   frozenset(), m.txn_start_timestamp, 10)
    except IllegalTransition:
        assert not ok
    else:
        assert ok
        assert m.pending_state is target


def test_commit_cycle() -> None:
    m = md()
    t = m.prepare_add_partitions({("a", 0)}, now=100)
    assert m.pending_transition_in_progress
    m.complete_transition(t)
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (S.ONGOING, {("a", 0)}, 100)
    m.complete_transition(m.prepare_add_partitions({("b", 1)}, now=200))
    assert m.txn_start_timestamp == 100  # the transaction started with its first partition
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_COMMIT, now=300))
    assert m.state is S.PREPARE_COMMIT and m.topic_partitions == {("a", 0), ("b", 1)}
    m.complete_transition(m.prepare_complete(now=400))
    assert m.state is S.COMPLETE_COMMIT and not m.topic_partitions and m.txn_last_update_timestamp == 400
    m.complete_transition(m.prepare_add_partitions({("c", 0)}, now=500))
    assert m.txn_start_timestamp == 500


def test_a_pending_transition_blocks_another() -> None:
    m = md()
    m.prepare_add_partitions({("a", 0)}, now=1)
    with pytest.raises(IllegalTransition):
        m.prepare_add_partitions({("a", 1)}, now=2)
    m.abandon_transition()
    assert m.state is S.EMPTY and not m.pending_transition_in_progress


def test_epoch_bump_retry_and_fencing() -> None:
    m = md(epoch=NO_PRODUCER_EPOCH)
    t = m.prepare_increment_producer_epoch(30000, None, now=1)
    assert (t.producer_epoch, t.last_producer_epoch) == (0, NO_PRODUCER_EPOCH)
    m.complete_transition(t)
    t = m.prepare_increment_producer_epoch(30000, 0, now=2)  # KIP-360 client holding epoch 0
    assert (t.producer_epoch, t.last_producer_epoch) == (1, 0)
    m.complete_transition(t)
    t = m.prepare_increment_producer_epoch(30000, 0, now=3)  # the same request retried: same answer
    assert (t.producer_epoch, t.last_producer_epoch) == (1, 0)
    m.abandon_transition()
    assert m.prepare_increment_producer_epoch(30000, 7, now=4) is None  # a zombie's epoch


def test_fencing_an_open_transaction_bumps_the_epoch_and_leads_to_prepare_abort() -> None:
    m = md(S.ONGOING, epoch=3, partitions={("a", 0)})
    m.complete_transition(m.prepare_fence_producer_epoch())
    assert (m.state, m.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 4)
    with pytest.raises(IllegalTransition):
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, now=9)
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_ABORT, now=9))
    assert (m.state, m.producer_epoch, m.topic_partitions) == (S.PREPARE_ABORT, 4, {("a", 0)})


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    m = md(epoch=MAX_EPOCH - 1)
    assert m.is_producer_epoch_exhausted
    with pytest.raises(IllegalTransition):
        m.prepare_increment_producer_epoch(30000, None, now=1)
    t = m.prepare_producer_id_rotation(2000, 30000, now=1, record_last_epoch=True)
    m.complete_transition(t)
    assert (m.producer_id, m.producer_epoch, m.last_producer_id, m.last_producer_epoch) == \
        (2000, 0, 1000, MAX_EPOCH - 1)
    fenced = md(S.ONGOING, epoch=MAX_EPOCH - 1)
    assert fenced.prepare_fence_producer_epoch().producer_epoch == MAX_EPOCH - 1  # the reserve is not spent
