"""AddPartitionsToTxn v4/v5, the brokers' form (KIP-890 part 1): several transactions per request, each
either added or only verified (VerifyOnly), as a partition leader of a Kafka 3.9 cluster asks its
transaction coordinator. Sent as raw requests, as another broker would send them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import InitProducerIdRequest
from kafka.protocol.producer.transaction import AddPartitionsToTxnRequest

from tests.integration.test_produce_consume import new_topic
from tests.integration.test_transactions import FAST, call
from tests.support.broker import BrokerProcess

A = AddPartitionsToTxnRequest
Txn = A.AddPartitionsToTxnTransaction
TRANSACTION_ABORTABLE = 120
UNKNOWN_PRODUCER_ID_MAPPING = KafkaError.INVALID_PRODUCER_ID_MAPPING
RETRIABLE = {14, 15, 16, 51}  # loading, not available, not coordinator, concurrent transactions


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("txn-batched"), FAST)
    b.start()
    try:
        yield b
    finally:
        b.close()


def init_producer(broker: BrokerProcess, tid: str) -> tuple[int, int]:
    """What a transactional client does first: find the coordinator (creating __transaction_state) and
    InitProducerId, retrying while the coordinator loads."""
    deadline = time.monotonic() + 60
    while True:
        call(broker, FindCoordinatorRequest(key=tid, key_type=1), 1)
        resp = call(broker, InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000,
                                                  producer_id=-1, producer_epoch=-1), 3)
        if resp.error_code not in RETRIABLE or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert resp.error_code == 0
    return resp.producer_id, resp.producer_epoch


def client_add(broker: BrokerProcess, tid: str, pid: int, epoch: int, topic: str, partitions: list[int]) -> None:
    resp = call(broker, A(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                          v3_and_below_producer_epoch=epoch,
                          v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=partitions)]), 3)
    assert {r.partition_error_code for t in resp.results_by_topic_v3_and_below for r in t.results_by_partition} == {0}


def txn(tid: str, pid: int, epoch: int, topics: dict[str, list[int]], verify_only: bool) -> object:
    return Txn(transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=verify_only,
               topics=[A.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()])


def broker_request(broker: BrokerProcess, version: int, *transactions: object) -> dict[str, dict[tuple[str, int], int]]:
    """Send the v4+ form; answer: transactional id -> {(topic, partition): error}."""
    resp = call(broker, A(transactions=list(transactions)), version)
    assert resp.error_code == 0
    return {r.transactional_id: {(t.name, p.partition_index): p.partition_error_code
                                 for t in r.topic_results for p in t.results_by_partition}
            for r in resp.results_by_transaction}


@pytest.mark.parametrize("version", [4, 5])
def test_verify_only_reports_which_partitions_are_in_the_transaction(txn_broker: BrokerProcess,
                                                                     version: int) -> None:
    topic = new_topic(txn_broker, partitions=2)
    tid = f"verify-{version}-{uuid.uuid4().hex[:6]}"
    pid, epoch = init_producer(txn_broker, tid)
    client_add(txn_broker, tid, pid, epoch, topic, [0])
    outside = TRANSACTION_ABORTABLE if version >= 5 else KafkaError.INVALID_TXN_STATE
    assert broker_request(txn_broker, version, txn(tid, pid, epoch, {topic: [0, 1]}, verify_only=True)) == \
        {tid: {(topic, 0): 0, (topic, 1): outside}}
    # Verifying adds nothing: partition 1 is still outside.
    assert broker_request(txn_broker, version, txn(tid, pid, epoch, {topic: [1]}, verify_only=True)) == \
        {tid: {(topic, 1): outside}}
    # The error paths, one transaction each, in one batched request.
    unknown_tid = f"never-initialized-{uuid.uuid4().hex[:6]}"
    assert broker_request(txn_broker, version,
                          txn(tid, pid, epoch - 1 if epoch else epoch + 1, {topic: [0]}, verify_only=True),
                          txn(tid + "-other-pid", pid, epoch, {topic: [0]}, verify_only=True),
                          txn(unknown_tid, 1, 0, {topic: [0]}, verify_only=True)) == {
        tid: {(topic, 0): KafkaError.PRODUCER_FENCED},
        tid + "-other-pid": {(topic, 0): UNKNOWN_PRODUCER_ID_MAPPING},
        unknown_tid: {(topic, 0): UNKNOWN_PRODUCER_ID_MAPPING}}


@pytest.mark.parametrize("version", [4, 5])
def test_batched_add_and_verify_in_one_request(txn_broker: BrokerProcess, version: int) -> None:
    topic = new_topic(txn_broker, partitions=2)
    first, second = (f"batch-{version}-{n}-{uuid.uuid4().hex[:6]}" for n in "ab")
    pid1, epoch1 = init_producer(txn_broker, first)
    pid2, epoch2 = init_producer(txn_broker, second)
    assert broker_request(txn_broker, version,
                          txn(first, pid1, epoch1, {topic: [0, 1]}, verify_only=False),
                          txn(second, pid2, epoch2, {topic: [1], "no-such-topic": [0]}, verify_only=False)) == {
        first: {(topic, 0): 0, (topic, 1): 0},
        second: {(topic, 1): KafkaError.OPERATION_NOT_ATTEMPTED, ("no-such-topic", 0): KafkaError.UNKNOWN_TOPIC_OR_PART}}
    # What was added is now verified; what failed was not added.
    outside = TRANSACTION_ABORTABLE if version >= 5 else KafkaError.INVALID_TXN_STATE
    assert broker_request(txn_broker, version,
                          txn(first, pid1, epoch1, {topic: [0, 1]}, verify_only=True),
                          txn(second, pid2, epoch2, {topic: [1]}, verify_only=True)) == {
        first: {(topic, 0): 0, (topic, 1): 0}, second: {(topic, 1): outside}}


def test_broker_versions_need_cluster_action(tmp_path_factory: pytest.TempPathFactory) -> None:
    """v4+ comes from brokers only: without CLUSTER_ACTION the whole request gets CLUSTER_AUTHORIZATION_FAILED;
    a client's v3 without rights gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED per partition, as in Kafka."""
    b = BrokerProcess(tmp_path_factory.mktemp("txn-acl"),
                      {**FAST, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    b.start()
    try:
        resp = call(b, A(transactions=[txn("t", 1, 0, {"any": [0]}, verify_only=True)]), 4)
        assert resp.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED and resp.results_by_transaction == []
        old = call(b, A(v3_and_below_transactional_id="t", v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
                        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name="any", partitions=[0])]), 3)
        assert [r.partition_error_code for t in old.results_by_topic_v3_and_below for r in t.results_by_partition] \
            == [KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
    finally:
        b.close()
