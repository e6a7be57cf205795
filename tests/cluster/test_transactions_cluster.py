"""Transactions on a ZooKeeper cluster: markers reach partitions led by other brokers through
WriteTxnMarkers, and a killed coordinator's successor finishes what it left prepared."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka.protocol.admin.transactions import DescribeTransactionsRequest, DescribeTransactionsResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from tests.support.cluster import ClusterProcess
from tests.support.raw_client import RawClient, decode
from tests.support.replicas import create_topic

pytestmark = pytest.mark.cluster

FAST = {"transaction.state.log.num.partitions": 5,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}


def read_committed(cluster: ClusterProcess, topic: str, partitions: int, idle_s: float = 3.0) -> list[bytes]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": "read_committed", "log_level": 0})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    idle_since = time.monotonic()
    deadline = time.monotonic() + 90
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


def coordinator_of(cluster: ClusterProcess, tid: str, exclude: frozenset[int] = frozenset()) -> int:
    def ask() -> int | None:
        for broker_id, b in cluster.brokers.items():
            if broker_id in exclude or not cluster.running(broker_id):
                continue
            c = RawClient(b)
            try:
                resp = decode(FindCoordinatorResponse, c.request(FindCoordinatorRequest(key=tid, key_type=1), 3),
                              3, flexible_header=True)
            finally:
                c.close()
            if resp.error_code == 0 and resp.node_id not in exclude:
                return resp.node_id
        return None

    return cluster.wait_for(ask, 60, f"a transaction coordinator for {tid}")


def state_on(cluster: ClusterProcess, broker_id: int, tid: str) -> str | None:
    c = RawClient(cluster.broker(broker_id))
    try:
        frame = c.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0)
    finally:
        c.close()
    (state,) = decode(DescribeTransactionsResponse, frame, 0, flexible_header=True).transaction_states
    return state.transaction_state if state.error_code == 0 else None


def commit_everywhere(cluster: ClusterProcess, topic: str, partitions: int, tid: str, rounds: int) -> list[bytes]:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "linger.ms": 5, "log_level": 0})
    p.init_transactions(60)
    sent = []
    for r in range(rounds):
        p.begin_transaction()
        for part in range(partitions):
            value = f"{tid}-{r}-{part}".encode()
            p.produce(topic, value, partition=part)
            sent.append(value)
        p.commit_transaction(60)
    return sent


def test_markers_reach_partitions_led_by_other_brokers(cluster_factory: Callable[..., ClusterProcess]) -> None:
    cluster = cluster_factory(3, overrides=FAST)
    topic = create_topic(cluster, partitions=6, replication_factor=2)
    leaders = {cluster.partition_state(topic, p).leader for p in range(6)}
    assert len(leaders) > 1  # so some markers must travel as WriteTxnMarkers
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    sent = commit_everywhere(cluster, topic, 6, tid, rounds=3)
    coordinator = coordinator_of(cluster, tid)
    cluster.wait_for(lambda: state_on(cluster, coordinator, tid) == "CompleteCommit", 60, "CompleteCommit")
    assert sorted(read_committed(cluster, topic, 6)) == sorted(sent)


def test_killed_coordinator_successor_completes_the_transaction(cluster_factory: Callable[..., ClusterProcess]
                                                                 ) -> None:
    cluster = cluster_factory(3, overrides=FAST)
    topic = create_topic(cluster, partitions=3, replication_factor=3)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    coordinator = coordinator_of(cluster, tid)
    sent = commit_everywhere(cluster, topic, 3, tid, rounds=2)
    cluster.kill9(coordinator)  # right after EndTxn: markers may or may not all be written
    successor = coordinator_of(cluster, tid, exclude=frozenset({coordinator}))
    cluster.wait_for(lambda: state_on(cluster, successor, tid) == "CompleteCommit", 90, "CompleteCommit on the successor")
    assert sorted(read_committed(cluster, topic, 3)) == sorted(sent)
    more = commit_everywhere(cluster, topic, 3, tid, rounds=1)  # the id works under the new coordinator
    assert sorted(read_committed(cluster, topic, 3)) == sorted(sent + more)
