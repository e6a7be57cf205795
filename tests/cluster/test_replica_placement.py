"""Replica placement on a real rack-aware cluster, and CreateTopics answering only once leaders exist.

Three brokers on racks a, a, b: a replication factor of 2 or 3 must put every partition on both
racks. Placement is read from ZooKeeper by the harness; leaders as clients see them come from the
broker that answered the admin request (the controller), right after the request returned.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.support.cluster import ClusterProcess

pytestmark = pytest.mark.cluster

RACKS = {1: "a", 2: "a", 3: "b"}


@pytest.fixture(scope="module")
def rack_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    cluster = ClusterProcess(tmp_path_factory.mktemp("racks"), 3,
                             broker_overrides={b: {"broker.rack": r} for b, r in RACKS.items()})
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.close()


def controller_admin(cluster: ClusterProcess) -> AdminClient:
    """An admin client that knows only the controller, so its metadata is the broker that created."""
    controller = cluster.wait_controller(timeout=60)
    return AdminClient({"bootstrap.servers": cluster.broker(controller).bootstrap, "log_level": 0})


def leaders_right_now(admin: AdminClient, topic: str) -> dict[int, int]:
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    assert meta.error is None, meta.error
    return {p: m.leader for p, m in meta.partitions.items()}


@pytest.mark.parametrize(("partitions", "rf"), [(6, 2), (3, 3)])
def test_every_partition_spans_both_racks_and_has_a_leader_when_create_returns(
        rack_cluster: ClusterProcess, partitions: int, rf: int) -> None:
    admin = controller_admin(rack_cluster)
    topic = f"rack-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, partitions, rf)], operation_timeout=30)[topic].result(timeout=60)
    leaders = leaders_right_now(admin, topic)
    assert sorted(leaders) == list(range(partitions))
    assert all(leader in RACKS for leader in leaders.values()), leaders
    assignment = rack_cluster.topic_assignment(topic)
    assert sorted(assignment) == list(range(partitions))
    for p, replicas in assignment.items():
        assert len(set(replicas)) == rf, (p, replicas)
        assert {RACKS[b] for b in replicas} == {"a", "b"}, (p, replicas)
    preferred = Counter(replicas[0] for replicas in assignment.values())
    assert max(preferred.values()) - min(preferred.get(b, 0) for b in RACKS) <= 1, assignment


def test_produce_right_after_create_topics_succeeds(rack_cluster: ClusterProcess) -> None:
    admin = controller_admin(rack_cluster)
    topic = f"now-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 3, 3)], operation_timeout=30)[topic].result(timeout=60)
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": rack_cluster.bootstrap, "acks": "all", "log_level": 0,
                         "message.send.max.retries": 0, "enable.idempotence": False})
    for i in range(30):
        producer.produce(topic, value=b"v%d" % i, partition=i % 3,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(60) == 0
    assert errors == []


def test_create_partitions_keeps_the_rack_spread_and_waits_for_leaders(rack_cluster: ClusterProcess) -> None:
    admin = controller_admin(rack_cluster)
    topic = f"grow-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 2, 2)], operation_timeout=30)[topic].result(timeout=60)
    admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=30)[topic].result(timeout=60)
    leaders = leaders_right_now(admin, topic)
    assert sorted(leaders) == list(range(5))
    assert all(leader in RACKS for leader in leaders.values()), leaders
    assignment = rack_cluster.topic_assignment(topic)
    assert all({RACKS[b] for b in assignment[p]} == {"a", "b"} for p in range(5)), assignment


def test_replication_factor_above_the_brokers_is_refused(rack_cluster: ClusterProcess) -> None:
    admin = controller_admin(rack_cluster)
    topic = f"big-{uuid.uuid4().hex[:8]}"
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(topic, 1, 4)], operation_timeout=30)[topic].result(timeout=60)
    assert "larger than available brokers" in str(info.value)
