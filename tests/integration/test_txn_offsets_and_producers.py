"""TxnOffsetCommit, OffsetFetch require_stable and DescribeProducers against a real broker,
and `strom transactions describe-producers` on what an idempotent confluent-kafka producer left.

Until the transaction coordinator writes the marker, offsets committed in a transaction are
pending: invisible to OffsetFetch, and UNSTABLE_OFFSET_COMMIT for a read_committed consumer's
require_stable fetch.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse
from kafka.protocol.consumer.group import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
from kafka.protocol.producer.transaction import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from strom.protocol import codec
from tests.integration.test_cli import ok, strom
from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode

UNSTABLE_OFFSET_COMMIT = 88


def call(broker: BrokerProcess, request, response_cls, version: int):  # noqa: ANN001, ANN201
    c = RawClient(broker)
    try:
        frame = c.request(request, version)
    finally:
        c.close()
    return decode(response_cls, frame, version, codec.is_flexible(request.API_KEY, version))


def producer_id(broker: BrokerProcess) -> tuple[int, int]:
    resp = call(broker, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                              producer_id=-1, producer_epoch=-1), InitProducerIdResponse, 2)
    assert resp.error_code == 0
    return resp.producer_id, resp.producer_epoch


def txn_offset_commit(broker: BrokerProcess, group: str, topic: str, pid: int, epoch: int, offset: int,
                      version: int, partition: int = 0) -> int:
    P = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition
    req = TxnOffsetCommitRequest(
        transactional_id="txn-it", group_id=group, producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=topic, partitions=[
            P(partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
              committed_metadata="m")])])
    resp = call(broker, req, TxnOffsetCommitResponse, version)
    return resp.topics[0].partitions[0].error_code


def find_group_coordinator(broker: BrokerProcess, group: str) -> None:
    """What a client does first; it also creates __consumer_offsets. Retries while it loads."""
    for _ in range(100):
        resp = call(broker, FindCoordinatorRequest(key=group, key_type=0), FindCoordinatorResponse, 3)
        if resp.error_code == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"no coordinator for {group}: error {resp.error_code}")


def commit_when_ready(broker: BrokerProcess, group: str, topic: str, pid: int, epoch: int, offset: int,
                      version: int) -> int:
    find_group_coordinator(broker, group)
    for _ in range(100):
        code = txn_offset_commit(broker, group, topic, pid, epoch, offset, version)
        if code not in (14, 15, 16):  # still loading / not yet available / not yet coordinator
            return code
        time.sleep(0.1)
    return code


def offset_fetch(broker: BrokerProcess, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    req = OffsetFetchRequest(group_id=group, topics=[T(name=topic, partition_indexes=[0])],
                             require_stable=require_stable)
    resp = call(broker, req, OffsetFetchResponse, 7)
    part = resp.topics[0].partitions[0]
    return part.error_code, part.committed_offset


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_txn_offsets_stay_pending_without_a_marker(broker: BrokerProcess, version: int) -> None:
    topic = new_topic(broker)
    group = f"txn-group-v{version}"
    pid, epoch = producer_id(broker)
    assert commit_when_ready(broker, group, topic, pid, epoch, 42, version) == 0
    assert txn_offset_commit(broker, group, "no-such-topic", pid, epoch, 1, version) == 3
    assert offset_fetch(broker, group, topic, require_stable=False) == (0, -1)
    assert offset_fetch(broker, group, topic, require_stable=True) == (UNSTABLE_OFFSET_COMMIT, -1)


def test_describe_producers_of_an_idempotent_producer(broker: BrokerProcess) -> None:
    topic = new_topic(broker, partitions=2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(5):
        p.produce(topic, value=f"v{i}".encode(), partition=0)
    assert p.flush(20) == 0

    req = DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0, 1,
                                                                                                               7])])
    resp = call(broker, req, DescribeProducersResponse, 0)
    parts = {pt.partition_index: pt for pt in resp.topics[0].partitions}
    assert parts[7].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert parts[1].error_code == 0 and parts[1].active_producers == []
    (state,) = parts[0].active_producers
    assert state.producer_id >= 0 and state.producer_epoch == 0 and state.last_sequence == 4
    assert state.current_txn_start_offset == -1 and state.last_timestamp > 0

    out = ok(strom("transactions", "--bootstrap-server", broker.bootstrap, "describe-producers", "--topic", topic,
                   "--partition", "0")).stdout.splitlines()
    assert out[0].split() == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                              "LastTimestamp", "CurrentTransactionStartOffset"]
    assert out[1].split()[:4] == [str(state.producer_id), "0", str(state.coordinator_epoch), "4"]
    assert out[1].split()[-1] == "None"

    missing = strom("transactions", "--bootstrap-server", broker.bootstrap, "describe-producers", "--topic", topic,
                    "--partition", "9")
    assert missing.returncode == 1 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


def test_send_offsets_to_transaction_and_transactions_tool(broker: BrokerProcess) -> None:
    """confluent-kafka's consume-transform-produce commit: the offsets show only after commit;
    `strom transactions list/describe` see the transactional id at its coordinator."""
    from confluent_kafka import Consumer, TopicPartition

    topic = new_topic(broker)
    group = "eos-group"
    txn_id = "eos-txn-1"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, value=b"x", partition=0)
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 17)], consumer.consumer_group_metadata(), 30)
        assert offset_fetch(broker, group, topic, require_stable=True) == (UNSTABLE_OFFSET_COMMIT, -1)
        assert offset_fetch(broker, group, topic, require_stable=False) == (0, -1)
        p.commit_transaction(30)
        assert offset_fetch(broker, group, topic, require_stable=True) == (0, 17)

        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 99)], consumer.consumer_group_metadata(), 30)
        p.abort_transaction(30)
        assert offset_fetch(broker, group, topic, require_stable=True) == (0, 17)

        listed = ok(strom("transactions", "--bootstrap-server", broker.bootstrap, "list")).stdout.splitlines()
        assert listed[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        assert any(line.split()[0] == txn_id for line in listed[1:])
        described = ok(strom("transactions", "--bootstrap-server", broker.bootstrap, "describe",
                             "--transactional-id", txn_id)).stdout.splitlines()
        assert described[0].split()[:5] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                                            "TransactionState"]
        assert described[1].split()[1] == txn_id and described[1].split()[4] == "CompleteAbort"
    finally:
        consumer.close()


def test_find_hanging_and_abort_by_start_offset(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    b = broker.bootstrap
    p = Producer({"bootstrap.servers": b, "transactional.id": "open-txn", "transaction.timeout.ms": 60000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    assert p.flush(20) == 0
    rows = ok(strom("transactions", "--bootstrap-server", b, "describe-producers", "--topic", topic,
                    "--partition", "0")).stdout.splitlines()
    assert rows[1].split()[-1] == "0"  # the open transaction starts at offset 0
    # The coordinator knows this transaction as ongoing with the partition: not hanging.
    hanging = ok(strom("transactions", "--bootstrap-server", b, "find-hanging", "--topic", topic,
                       "--max-transaction-timeout", "0")).stdout.splitlines()
    assert hanging[0].split()[:2] == ["Topic", "Partition"] and hanging[1:] == []

    ok(strom("transactions", "--bootstrap-server", b, "abort", "--topic", topic, "--partition", "0",
             "--start-offset", "0"))
    rows = ok(strom("transactions", "--bootstrap-server", b, "describe-producers", "--topic", topic,
                    "--partition", "0")).stdout.splitlines()
    assert rows[1].split()[-1] == "None"
    none = strom("transactions", "--bootstrap-server", b, "abort", "--topic", topic, "--partition", "0",
                 "--start-offset", "0")
    assert none.returncode == 1 and "No open transaction starts at offset 0" in none.stderr
