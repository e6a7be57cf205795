"""Transactions end to end: a real broker, confluent-kafka's transactional producer, read_committed consumers.

Coordinator state is observed the way kafka-transactions.sh does, with ListTransactions and
DescribeTransactions sent as raw requests.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka.protocol.admin.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import InitProducerIdRequest
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    WriteTxnMarkersRequest,
)

from strom.coordinator.transaction.transaction_marker_channel_manager import HOLD_MARKERS_ENV
from strom.protocol import codec
from strom.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode

FAST = {"transaction.state.log.num.partitions": 5,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("txn"), FAST)
    b.start()
    try:
        yield b
    finally:
        b.close()


def txn_producer(broker: BrokerProcess, tid: str, **conf: object) -> Producer:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid, "linger.ms": 5, **conf})
    p.init_transactions(30)
    return p


def read(broker: BrokerProcess, topic: str, isolation: str, partitions: int = 1, idle_s: float = 3.0) -> list[bytes]:
    """Every value in the topic under the given isolation level, read until nothing new comes for idle_s."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    idle_since = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() - idle_since < idle_s and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
            continue
        if m.error():
            raise KafkaException(m.error())
        out.append(m.value())
        idle_since = time.monotonic()
    c.close()
    return out


def describe(broker: BrokerProcess, tid: str) -> DescribeTransactionsResponse.TransactionState:
    c = RawClient(broker)
    try:
        frame = c.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0)
    finally:
        c.close()
    (state,) = decode(DescribeTransactionsResponse, frame, 0, flexible_header=True).transaction_states
    return state


def list_transactions(broker: BrokerProcess, states: list[str] | None = None, version: int = 1
                      ) -> dict[str, tuple[int, str]]:
    c = RawClient(broker)
    try:
        frame = c.request(ListTransactionsRequest(state_filters=states or [], producer_id_filters=[],
                                                  duration_filter=-1), version)
    finally:
        c.close()
    resp = decode(ListTransactionsResponse, frame, version, flexible_header=True)
    assert resp.error_code == 0
    return {s.transactional_id: (s.producer_id, s.transaction_state) for s in resp.transaction_states}


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_commit_is_visible_and_abort_is_not(txn_broker: BrokerProcess) -> None:
    topic = new_topic(txn_broker, partitions=2)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    p = txn_producer(txn_broker, tid)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, f"a{i}".encode(), partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"last", partition=0)
    p.commit_transaction(30)
    committed = sorted(read(txn_broker, topic, "read_committed", partitions=2))
    assert committed == sorted([f"c{i}".encode() for i in range(10)] + [b"last"])
    uncommitted = sorted(read(txn_broker, topic, "read_uncommitted", partitions=2))
    assert uncommitted == sorted(committed + [f"a{i}".encode() for i in range(5)])
    state = describe(txn_broker, tid)
    assert (state.error_code, state.transaction_state, state.topics) == (0, "CompleteCommit", [])
    assert list_transactions(txn_broker, ["CompleteCommit"])[tid][1] == "CompleteCommit"
    assert tid not in list_transactions(txn_broker, ["Ongoing"], version=0)


def test_second_producer_fences_the_first(txn_broker: BrokerProcess) -> None:
    topic = new_topic(txn_broker)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    first = txn_producer(txn_broker, tid)
    first.begin_transaction()
    first.produce(topic, b"zombie")
    first.flush(30)
    second = txn_producer(txn_broker, tid)  # aborts the first one's transaction, bumps the epoch
    second.begin_transaction()
    second.produce(topic, b"winner")
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        first.produce(topic, b"too late")
        first.commit_transaction(30)
    err = info.value.args[0]
    assert err.fatal(), err
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), err
    assert read(txn_broker, topic, "read_committed") == [b"winner"]


def test_silent_producer_is_aborted_by_the_coordinator(txn_broker: BrokerProcess) -> None:
    topic = new_topic(txn_broker)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    p = txn_producer(txn_broker, tid, **{"transaction.timeout.ms": 2000, "message.timeout.ms": 2000})
    p.begin_transaction()
    p.produce(topic, b"never committed")
    p.flush(30)
    assert describe(txn_broker, tid).transaction_state in ("Ongoing", "PrepareAbort", "CompleteAbort")
    # The producer goes silent; the coordinator's timeout job aborts and fences it.
    assert wait_for(lambda: describe(txn_broker, tid).transaction_state == "CompleteAbort")
    assert list_transactions(txn_broker)[tid][1] == "CompleteAbort"
    state = describe(txn_broker, tid)
    assert state.producer_epoch == 1  # bumped: the silent producer is fenced
    assert read(txn_broker, topic, "read_committed") == []
    assert read(txn_broker, topic, "read_uncommitted") == [b"never committed"]


def test_restart_between_end_txn_and_markers_completes_the_commit(broker_factory: Callable[..., BrokerProcess]
                                                                   ) -> None:
    b = broker_factory(FAST, start=False)
    b.env[HOLD_MARKERS_ENV] = "1"
    b.start()
    topic = new_topic(b, partitions=2)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    p = txn_producer(b, tid)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, f"v{i}".encode(), partition=i % 2)
    p.commit_transaction(30)  # answered once PrepareCommit is durable; the markers are held
    state = describe(b, tid)
    assert state.transaction_state == "PrepareCommit"
    assert read(b, topic, "read_committed", partitions=2, idle_s=1.0) == []
    b.kill9()
    del b.env[HOLD_MARKERS_ENV]
    b.start()
    assert wait_for(lambda: describe(b, tid).transaction_state == "CompleteCommit")
    assert sorted(read(b, topic, "read_committed", partitions=2)) == [f"v{i}".encode() for i in range(6)]
    again = txn_producer(b, tid)  # the id still works after the restart, under a bumped epoch
    again.begin_transaction()
    again.produce(topic, b"after", partition=0)
    again.commit_transaction(30)
    assert b"after" in read(b, topic, "read_committed", partitions=2)


def call(broker: BrokerProcess, request, version: int):  # noqa: ANN001, ANN201
    c = RawClient(broker)
    try:
        frame = c.request(request, version)
    finally:
        c.close()
    flexible = codec.is_flexible(request.API_KEY, version)
    return codec.response_class(request.API_KEY).decode(frame[5:] if flexible else frame[4:], version=version)


def versions(key: ApiKey) -> list[int]:
    lo, hi = SUPPORTED_VERSIONS[key]
    return list(range(lo, hi + 1))


@pytest.mark.parametrize("version", versions(ApiKey.END_TXN))
def test_every_advertised_version_of_the_transaction_apis(txn_broker: BrokerProcess, version: int) -> None:
    """A whole transaction by raw requests at each version (AddOffsetsToTxn and EndTxn share 0-4; a client's
    AddPartitionsToTxn stops at v3, v4+ is the brokers' form), with FindCoordinator and InitProducerId at
    every version of theirs."""
    topic = new_topic(txn_broker, partitions=2)
    tid = f"raw-{version}-{uuid.uuid4().hex[:6]}"
    for v in range(1, SUPPORTED_VERSIONS[ApiKey.FIND_COORDINATOR][1] + 1):
        req = FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]) if v >= 4 else \
            FindCoordinatorRequest(key=tid, key_type=1)
        fc = call(txn_broker, req, v)
        assert (fc.coordinators[0].error_code if v >= 4 else fc.error_code) == 0
    init = None
    for v in versions(ApiKey.INIT_PRODUCER_ID):
        init = call(txn_broker, InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000,
                                                      producer_id=-1, producer_epoch=-1), v)
        assert init.error_code == 0, v
    assert init is not None and init.producer_epoch == len(versions(ApiKey.INIT_PRODUCER_ID)) - 1
    pid, epoch = init.producer_id, init.producer_epoch
    A = AddPartitionsToTxnRequest
    added = call(txn_broker, A(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                               v3_and_below_producer_epoch=epoch,
                               v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=[0, 1])]),
                 min(version, 3))
    assert [(r.partition_index, r.partition_error_code) for t in added.results_by_topic_v3_and_below
            for r in t.results_by_partition] == [(0, 0), (1, 0)]
    unknown = call(txn_broker, A(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                 v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                                     A.AddPartitionsToTxnTopic(name=topic, partitions=[0]),
                                     A.AddPartitionsToTxnTopic(name="no-such-topic", partitions=[0])]),
                   min(version, 3))
    assert {t.name: t.results_by_partition[0].partition_error_code for t in unknown.results_by_topic_v3_and_below} \
        == {topic: KafkaError.OPERATION_NOT_ATTEMPTED, "no-such-topic": KafkaError.UNKNOWN_TOPIC_OR_PART}
    offsets = call(txn_broker, AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                      group_id="g"), version)
    assert offsets.error_code == 0
    fenced = call(txn_broker, EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch - 1,
                                            committed=True), version)
    assert fenced.error_code == (KafkaError.PRODUCER_FENCED if version >= 2 else KafkaError.INVALID_PRODUCER_EPOCH)
    ended = call(txn_broker, EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                           committed=True), version)
    assert ended.error_code == 0
    assert wait_for(lambda: describe(txn_broker, tid).transaction_state == "CompleteCommit")


def test_write_txn_markers_v1(txn_broker: BrokerProcess) -> None:
    """What a coordinator on another broker sends: an abort marker for a producer id on our partitions."""
    topic = new_topic(txn_broker, partitions=2)
    M = WriteTxnMarkersRequest.WritableTxnMarker
    resp = call(txn_broker, WriteTxnMarkersRequest(markers=[M(
        producer_id=987654, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=[0, 1])])]), 1)
    assert [(p.partition_index, p.error_code) for m in resp.markers for t in m.topics for p in t.partitions] == \
        [(0, 0), (1, 0)]


def test_init_producer_id_rejects_a_timeout_above_the_maximum(txn_broker: BrokerProcess) -> None:
    resp = call(txn_broker, InitProducerIdRequest(transactional_id="too-long", transaction_timeout_ms=900001,
                                                  producer_id=-1, producer_epoch=-1), 4)
    assert resp.error_code == KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_find_coordinator_v6_share_key_type_is_invalid_request(txn_broker: BrokerProcess) -> None:
    """v6 (KIP-932) defines key type 2 for share groups, which Strom has not: INVALID_REQUEST for that key."""
    resp = call(txn_broker, FindCoordinatorRequest(key_type=2, coordinator_keys=["g:topic-id:0"]), 6)
    assert [(c.key, c.error_code) for c in resp.coordinators] == [("g:topic-id:0", KafkaError.INVALID_REQUEST)]
