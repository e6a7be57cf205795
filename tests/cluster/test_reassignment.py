"""Partition reassignment (KIP-455) on real 3-broker clusters, driven by real clients.

kafka-python's admin client sends AlterPartitionReassignments / ListPartitionReassignments to the
controller; confluent-kafka produces with acks=all while partitions move, and the checker reads back
every acknowledged record from the new replicas. ZooKeeper is read directly for what the controller
recorded (``/brokers/topics/<t>`` with adding/removing replicas, the partition state).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition

from tests.support.checker import SequenceProducer, check_topic
from tests.support.cluster import ClusterProcess
from tests.support.replicas import create_topic

pytestmark = pytest.mark.cluster

BOUND = 120.0  # seconds: generous on a loaded 2-core machine; never an assertion on time


@pytest.fixture
def admin_of() -> Iterator[Any]:
    admins: list[KafkaAdminClient] = []

    def make(cluster: ClusterProcess) -> KafkaAdminClient:
        admins.append(KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=60_000))
        return admins[-1]

    yield make
    for admin in admins:
        admin.close()


def full_assignment(cluster: ClusterProcess, topic: str) -> dict[str, Any]:
    data, _ = cluster.zk.get(f"/brokers/topics/{topic}")
    return json.loads(data)


def partition_dir(cluster: ClusterProcess, broker_id: int, topic: str, partition: int = 0) -> Path:
    return cluster.log_dir(broker_id) / f"{topic}-{partition}"


def metadata_replicas(cluster: ClusterProcess, topic: str, broker_id: int) -> list[int] | None:
    """The partition's replicas as broker ``broker_id`` answers Metadata (confluent-kafka's view)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.broker(broker_id).bootstrap, "log_level": 0})
    info = admin.list_topics(topic, timeout=30).topics.get(topic)
    if info is None or info.error is not None or 0 not in info.partitions:
        return None
    return list(info.partitions[0].replicas)


def wait_moved(cluster: ClusterProcess, topic: str, target: list[int]) -> dict[str, Any]:
    """Until ZooKeeper records the move as done: replicas = target, no adding/removing, ISR within target."""
    def done() -> dict[str, Any] | None:
        a = full_assignment(cluster, topic)
        state = cluster.partition_state(topic, 0)
        if (a["partitions"].get("0") == target and not a.get("adding_replicas") and not a.get("removing_replicas")
                and state is not None and set(state.isr) == set(target)):
            return a
        return None

    return cluster.wait_for(done, BOUND, f"{topic}-0 moved to {target} with a full ISR")


def test_a_moved_partition_keeps_every_acknowledged_record(cluster_factory, admin_of) -> None:  # noqa: ANN001
    """RF 2 from [1, 2] to [2, 3] while an acks=all producer writes: nothing acknowledged is lost, the
    replica on broker 1 is deleted from its log dir, and every broker's Metadata shows [2, 3]."""
    cluster: ClusterProcess = cluster_factory(3, overrides={"auto.leader.rebalance.enable": "false"})
    topic = create_topic(cluster, replicas=[[1, 2]], config={"min.insync.replicas": "2"})
    producer = SequenceProducer(cluster.bootstrap, topic, config={"acks": "all", "enable.idempotence": True,
                                                                  "message.timeout.ms": 120_000})
    producer.produce_some(2000)
    producer.start()
    try:
        assert producer.wait_acked(2500, BOUND)
        admin = admin_of(cluster)
        result = admin.alter_partition_reassignments({KafkaTopicPartition(topic, 0): [2, 3]})
        assert result == {KafkaTopicPartition(topic, 0): None}
        wait_moved(cluster, topic, [2, 3])
        acked_at_move = producer.acked_count()
        assert producer.wait_acked(acked_at_move + 500, BOUND)  # still writing after the move
    finally:
        producer.stop()
    assert producer.errors == [], producer.errors[:5]
    assert admin.list_partition_reassignments() == {}
    cluster.wait_for(lambda: not partition_dir(cluster, 1, topic).exists(), BOUND,
                     f"broker 1 deleted its replica of {topic}-0")
    assert partition_dir(cluster, 3, topic).exists()
    for b in (1, 2, 3):
        cluster.wait_for(lambda b=b: metadata_replicas(cluster, topic, b) == [2, 3], BOUND,
                         f"broker {b} answers Metadata with replicas [2, 3]")
    cluster.stop(2)  # only broker 3's copy serves the reads now: it has everything acknowledged
    cluster.wait_leader(topic, 0, not_in=(2,), timeout=BOUND)
    report = check_topic(cluster.broker(3).bootstrap, topic, producer.acked, timeout=BOUND)
    assert report.ok and report.acked > 2500, report
