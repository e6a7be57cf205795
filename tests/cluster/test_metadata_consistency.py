"""Metadata consistency in a cluster: what brokers answer about topics that are being created or grown.

Each broker's metadata cache lags the controller by an UpdateMetadata round trip. Clients poll every broker
right after creating a topic; they must see it as "being created" (LEADER_NOT_AVAILABLE, retried), never as
unknown, and a broker that has shown a topic must never forget it again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from tests.support.cluster import ClusterProcess
from tests.support.raw_client import RawClient, decode

pytestmark = pytest.mark.cluster

METADATA_VERSION = 9  # flexible: allow_auto_topic_creation, the response header has tagged fields
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
PARTITIONS = 4


def metadata(client: RawClient, topic: str, allow_auto: bool) -> tuple[int, int]:
    """(topic error code, partitions with a leader) in one broker's answer."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=allow_auto)
    answer = decode(MetadataResponse, client.request(request, METADATA_VERSION), METADATA_VERSION, True)
    (t,) = answer.topics
    return t.error_code, sum(1 for p in t.partitions if p.leader_id >= 0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    """Three brokers whose auto-created topics have 4 partitions on all three, as in the reported runs."""
    cluster = ClusterProcess(tmp_path_factory.mktemp("metadata"), 3,
                             overrides={"num.partitions": PARTITIONS, "default.replication.factor": 3})
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.close()


def test_an_auto_created_topic_never_looks_unknown_on_any_broker(cluster: ClusterProcess) -> None:
    clients = {b: RawClient(cluster.broker(b)) for b in cluster.broker_ids}
    try:
        for creator in cluster.broker_ids:  # whichever broker creates it, the controller or not
            topic = f"auto-{uuid.uuid4().hex[:8]}"
            code, _ = metadata(clients[creator], topic, allow_auto=True)
            assert code in (0, LEADER_NOT_AVAILABLE)
            shown = {creator} if code == 0 else set()
            seen: list[tuple[int, bool, int, int]] = []
            deadline = time.monotonic() + 60  # hang guard only: leaders come within a second normally
            while len(shown) < len(clients) and time.monotonic() < deadline:
                for b, client in clients.items():
                    # A client that may create (a producer) asks every broker; one that may not asks the
                    # creating broker, which has already answered for the topic.
                    for allow in (True, False) if b == creator else (True,):
                        code, leaders = metadata(client, topic, allow)
                        seen.append((b, allow, code, leaders))
                        assert code != UNKNOWN_TOPIC_OR_PARTITION, seen[-20:]
                        assert code in (0, LEADER_NOT_AVAILABLE), seen[-20:]
                        if b in shown:  # monotonic: once shown with its leaders, always so
                            assert (code, leaders) == (0, PARTITIONS), seen[-20:]
                        elif code == 0 and leaders == PARTITIONS:
                            shown.add(b)
            assert shown == set(clients), seen[-20:]
    finally:
        for client in clients.values():
            client.close()


def test_a_producer_to_a_new_topic_succeeds_at_once(cluster: ClusterProcess) -> None:
    topic = f"produce-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "allow.auto.create.topics": True,
                         "acks": "all", "message.timeout.ms": 60000, "log_level": 0})
    results: list = []
    for i in range(20):
        producer.produce(topic, value=b"v%d" % i, partition=i % PARTITIONS,
                         on_delivery=lambda err, msg: results.append(err))
    assert producer.flush(90) == 0
    assert results == [None] * 20


def test_create_partitions_right_after_create_topics_without_waiting(cluster: ClusterProcess) -> None:
    """CreateTopics with operation timeout 0 answers before any broker's cache has the topic; CreatePartitions
    right after must find it (the controller reads the assignment from ZooKeeper), and a second growth right
    after the first must count the partitions the first added."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    names = [f"grow-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for f in admin.create_topics([NewTopic(n, 2, 3) for n in names], operation_timeout=0).values():
        f.result(30)
    for f in admin.create_partitions([NewPartitions(n, 4) for n in names], operation_timeout=0).values():
        f.result(30)
    first = {n: cluster.topic_assignment(n) for n in names}
    for f in admin.create_partitions([NewPartitions(n, 6) for n in names], operation_timeout=30).values():
        f.result(60)
    for n in names:
        assignment = cluster.topic_assignment(n)
        assert sorted(assignment) == list(range(6))
        assert {p: assignment[p] for p in range(4)} == first[n]  # the first growth is kept, not overwritten
        for p in range(6):
            assert cluster.wait_leader(n, p, timeout=60).leader in cluster.broker_ids


def test_delete_topics_answers_once_deleted_so_the_name_can_be_reused(cluster: ClusterProcess) -> None:
    """As Kafka's DelayedDeleteTopics: with an operation timeout, OK means the topic is gone, so creating it
    again right away works (test suites do this all the time). Also for a topic created a moment ago."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    names = [f"reuse-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for f in admin.create_topics([NewTopic(n, 2, 3) for n in names], operation_timeout=30).values():
        f.result(60)
    fresh = f"fresh-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(fresh, 2, 3)], operation_timeout=0)[fresh].result(30)
    for f in admin.delete_topics([*names, fresh], operation_timeout=30).values():
        f.result(60)
    assert all(not cluster.topic_assignment(n) for n in names)
    for f in admin.create_topics([NewTopic(n, 3, 3) for n in names], operation_timeout=30).values():
        f.result(60)
    for n in names:
        assert sorted(cluster.topic_assignment(n)) == [0, 1, 2]


def test_kafka_python_producer_to_a_new_topic_succeeds_at_once(cluster: ClusterProcess) -> None:
    from kafka import KafkaProducer

    topic = f"kp-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=0, max_block_ms=60000)
    try:
        futures = [producer.send(topic, value=b"v%d" % i, partition=i % PARTITIONS) for i in range(20)]
        offsets = [f.get(timeout=60).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert sorted(offsets) == sorted(i // PARTITIONS for i in range(20))
