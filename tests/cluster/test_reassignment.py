"""Partition reassignment (KIP-455) on real 3-broker clusters, driven by real clients.

kafka-python's admin client sends AlterPartitionReassignments / ListPartitionReassignments to the
controller; confluent-kafka produces with acks=all while partitions move, and the checker reads back
every acknowledged record from the new replicas. ZooKeeper is read directly for what the controller
recorded (``/brokers/topics/<t>`` with adding/removing replicas, the partition state).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    CreatePartitionsRequest,
    ListPartitionReassignmentsRequest,
)

from strom.protocol import codec
from tests.support.checker import SequenceProducer, check_topic
from tests.support.cluster import ClusterProcess
from tests.support.raw_client import RawClient
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


def raw_call(cluster: ClusterProcess, broker_id: int, request: Any) -> Any:
    client = RawClient(cluster.broker(broker_id))
    try:
        frame = client.request(request, 0)
    finally:
        client.close()
    return codec.response_class(request.API_KEY).decode(frame[5:], version=0)  # flexible: response header v1


def alter_request(partitions: dict[tuple[str, int], list[int] | None]) -> AlterPartitionReassignmentsRequest:
    topic = AlterPartitionReassignmentsRequest.ReassignableTopic
    by_topic: dict[str, list[Any]] = {}
    for (t, p), replicas in partitions.items():
        by_topic.setdefault(t, []).append(topic.ReassignablePartition(partition_index=p, replicas=replicas))
    return AlterPartitionReassignmentsRequest(timeout_ms=30_000, topics=[
        topic(name=t, partitions=ps) for t, ps in by_topic.items()])


def test_only_the_controller_answers_and_refuses_bad_requests_as_kafka(cluster3: ClusterProcess) -> None:
    cluster = cluster3  # the module's cluster: this test moves nothing
    topic = create_topic(cluster, replicas=[[1, 2]])
    controller = cluster.wait_controller()
    other = next(b for b in (1, 2, 3) if b != controller)
    refused = raw_call(cluster, other, alter_request({(topic, 0): [2, 3]}))
    assert (refused.error_code, refused.responses) == (41, [])  # NOT_CONTROLLER
    listed = raw_call(cluster, other, ListPartitionReassignmentsRequest(timeout_ms=30_000, topics=None))
    assert listed.error_code == 41

    answer = raw_call(cluster, controller, alter_request({
        (topic, 0): [2, 9], (topic, 1): [1, 2], ("nope", 0): [1], }))
    codes = {(t.name, p.partition_index): p.error_code for t in answer.responses for p in t.partitions}
    assert answer.error_code == 0
    assert codes == {(topic, 0): 39, (topic, 1): 3, ("nope", 0): 3}
    for bad in ([], [2, 2], [-1, 2]):
        answer = raw_call(cluster, controller, alter_request({(topic, 0): bad}))
        assert [p.error_code for t in answer.responses for p in t.partitions] == [39]
    answer = raw_call(cluster, controller, alter_request({(topic, 0): None}))
    assert [p.error_code for t in answer.responses for p in t.partitions] == [85]  # NO_REASSIGNMENT_IN_PROGRESS
    assert cluster.topic_assignment(topic) == {0: [1, 2]}


def reassign(cluster: ClusterProcess, partitions: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], int]:
    """AlterPartitionReassignments straight to the controller (while a broker is frozen a client library
    may pick it for its metadata requests)."""
    answer = raw_call(cluster, cluster.wait_controller(), alter_request(partitions))
    assert answer.error_code == 0, answer
    return {(t.name, p.partition_index): p.error_code for t in answer.responses for p in t.partitions}


def listed(cluster: ClusterProcess) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    answer = raw_call(cluster, cluster.wait_controller(),
                      ListPartitionReassignmentsRequest(timeout_ms=30_000, topics=None))
    assert answer.error_code == 0, answer
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in answer.topics for p in t.partitions}


def test_a_cancelled_move_goes_back_and_deletes_the_added_replica(cluster_factory) -> None:  # noqa: ANN001
    """Broker 3 is frozen, so the move to it cannot complete; cancelling reverts to [1, 2], and broker 3 (once
    it runs again) deletes the replica it had started."""
    cluster: ClusterProcess = cluster_factory(3, session_timeout_ms=60_000)
    topic = create_topic(cluster, replicas=[[1, 2]])
    SequenceProducer(cluster.bootstrap, topic, config={"acks": "all"}).produce_some(500)
    cluster.sigstop(3)
    try:
        assert reassign(cluster, {(topic, 0): [2, 3]}) == {(topic, 0): 0}
        a = full_assignment(cluster, topic)
        assert (a["partitions"]["0"], a["adding_replicas"], a["removing_replicas"]) == ([2, 3, 1], {"0": [3]},
                                                                                         {"0": [1]})
        assert listed(cluster) == {(topic, 0): ([2, 3, 1], [3], [1])}
        grow = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
            name=topic, count=2, assignments=None)], timeout_ms=30_000, validate_only=False)
        client = RawClient(cluster.broker(1))
        try:
            frame = client.request(grow, 1)
        finally:
            client.close()
        [grown] = codec.response_class(grow.API_KEY).decode(frame[4:], version=1).results
        assert grown.error_code == 60  # REASSIGNMENT_IN_PROGRESS, as Kafka: the move's state is kept
        assert reassign(cluster, {(topic, 0): None}) == {(topic, 0): 0}
    finally:
        cluster.sigcont(3)
    a = full_assignment(cluster, topic)
    assert (a["partitions"]["0"], a["adding_replicas"], a["removing_replicas"]) == ([2, 1], {}, {})
    assert listed(cluster) == {}
    state = cluster.partition_state(topic, 0)
    assert state is not None and set(state.isr) == {1, 2}
    # Broker 3 handles what it was sent while frozen: LeaderAndIsr (its log is created), then the deletion.
    cluster.wait_for(lambda: not partition_dir(cluster, 3, topic).exists(), BOUND,
                     f"broker 3 deleted the replica of {topic}-0 it had started")


def test_the_new_controller_resumes_a_move_after_the_old_one_is_killed(cluster_factory) -> None:  # noqa: ANN001
    """The controller dies (kill -9) while the new replica cannot catch up (frozen); the next controller reads the
    move from ZooKeeper and completes it once the replica is in sync; every acknowledged record is there."""
    cluster: ClusterProcess = cluster_factory(3, session_timeout_ms=15_000,
                                              overrides={"auto.leader.rebalance.enable": "false"})
    controller = cluster.wait_controller()
    keeper, newcomer = (b for b in (1, 2, 3) if b != controller)
    topic = create_topic(cluster, replicas=[[keeper, controller]])
    producer = SequenceProducer(cluster.bootstrap, topic, config={"acks": "all", "enable.idempotence": True,
                                                                  "message.timeout.ms": 180_000})
    producer.produce_some(1000)
    producer.start()
    try:
        cluster.sigstop(newcomer)
        try:
            assert reassign(cluster, {(topic, 0): [keeper, newcomer]}) == {(topic, 0): 0}
            cluster.kill9(controller)
        finally:
            cluster.sigcont(newcomer)
        assert full_assignment(cluster, topic)["adding_replicas"] == {"0": [newcomer]}
        cluster.wait_controller(not_in=(controller,), timeout=BOUND)
        wait_moved(cluster, topic, [keeper, newcomer])
        acked = producer.acked_count()
        assert producer.wait_acked(acked + 300, BOUND)
    finally:
        producer.stop()
    assert producer.errors == [], producer.errors[:5]
    report = check_topic(cluster.broker(newcomer).bootstrap, topic, producer.acked, timeout=BOUND)
    assert report.ok and report.acked >= 1300, report


def test_the_old_tools_znode_moves_partitions_and_is_deleted_when_done(cluster3: ClusterProcess) -> None:
    cluster = cluster3  # the module's cluster: only this test's own topic moves, and every broker keeps running
    topic = create_topic(cluster, partitions=2, replicas=[[1, 2], [2, 3]])
    SequenceProducer(cluster.bootstrap, topic, config={"acks": "all"}).produce_some(300)
    cluster.zk.create("/admin/reassign_partitions", json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [3, 2]},
        {"topic": topic, "partition": 1, "replicas": [3, 1]}]}).encode())
    cluster.wait_for(lambda: cluster.zk.exists("/admin/reassign_partitions") is None, BOUND,
                     "/admin/reassign_partitions deleted once both moves completed")
    a = full_assignment(cluster, topic)
    assert (a["partitions"], a["adding_replicas"], a["removing_replicas"]) == ({"0": [3, 2], "1": [3, 1]}, {}, {})
    cluster.wait_for(lambda: not partition_dir(cluster, 1, topic, 0).exists()
                     and not partition_dir(cluster, 2, topic, 1).exists(), BOUND, "removed replicas deleted")


def test_a_move_waits_for_a_dead_new_replica_and_topics_describe_shows_it(cluster_factory) -> None:  # noqa: ANN001
    """The new replica's broker dies before it caught up: the move waits (ISR and leader untouched),
    `strom topics --describe` shows it as kafka-topics.sh does, and it completes once the broker is back."""
    cluster: ClusterProcess = cluster_factory(3)
    topic = create_topic(cluster, replicas=[[1, 2]])
    SequenceProducer(cluster.bootstrap, topic, config={"acks": "all"}).produce_some(500)
    cluster.sigstop(3)
    try:
        assert reassign(cluster, {(topic, 0): [2, 3]}) == {(topic, 0): 0}
    finally:
        cluster.kill9(3)
    cluster.wait_for(lambda: 3 not in cluster.registered_brokers(), BOUND, "broker 3's session ended")
    out = subprocess.run([sys.executable, "-m", "strom.cli.main", "topics", "--bootstrap-server",
                          cluster.broker(1).bootstrap, "--describe", "--topic", topic],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (f"\tTopic: {topic}\tPartition: 0\tLeader: 1\tReplicas: 2,3,1\tIsr: 1,2\t"
            "Adding Replicas: 3\tRemoving Replicas: 1\n") in out.stdout, out.stdout
    assert listed(cluster) == {(topic, 0): ([2, 3, 1], [3], [1])}
    cluster.start_broker(3)
    wait_moved(cluster, topic, [2, 3])
    cluster.wait_for(lambda: not partition_dir(cluster, 1, topic).exists(), BOUND, "broker 1 deleted its replica")


def test_a_topic_deleted_while_moving_goes_once_the_move_ends(cluster_factory, tmp_path) -> None:  # noqa: ANN001
    """DeleteTopics while a throttled move of the topic runs is accepted, but the topic is ineligible for
    deletion until the move ends (Kafka's TopicDeletionManager): it keeps serving, no new move of it may
    start, and once the throttle is raised and the move completes it is deleted from every broker."""
    from confluent_kafka.admin import AdminClient

    from tests.cluster.test_reassign_partitions_cli import strom, write_json
    from tests.cluster.test_replication_throttle import produce

    cluster: ClusterProcess = cluster_factory(3, overrides={"auto.leader.rebalance.enable": "false"})
    topic = create_topic(cluster, replicas=[[1, 2]])
    produce(cluster, topic, 1000)  # 10 MB: over a minute at the throttled rate
    plan = write_json(tmp_path / "plan.json",
                      {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 3]}]})
    out = strom("--bootstrap-server", cluster.bootstrap, "--execute", "--reassignment-json-file", str(plan),
                "--throttle", "100000")
    assert out.returncode == 0, out.stdout + out.stderr
    assert listed(cluster) == {(topic, 0): ([1, 3, 2], [3], [2])}

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    admin.delete_topics([topic], operation_timeout=0)[topic].result(60)  # accepted, as Kafka answers
    controller = cluster.broker(cluster.wait_controller())
    cluster.wait_for(lambda: not cluster.zk.exists(f"/brokers/topics/{topic}")
                     or "ineligible for deletion" in controller.log_path.read_text(errors="replace"),
                     BOUND, "the controller to handle the deletion")
    # Still there while it moves: in ZooKeeper, queued for deletion, moving, and no new move may start.
    assert cluster.zk.exists(f"/brokers/topics/{topic}") and cluster.zk.exists(f"/admin/delete_topics/{topic}")
    assert listed(cluster) == {(topic, 0): ([1, 3, 2], [3], [2])}
    assert reassign(cluster, {(topic, 0): [2, 3]}) == {(topic, 0): 3}  # UNKNOWN_TOPIC_OR_PARTITION, as Kafka

    # The tool raises the throttle; re-submitting the move itself is refused as any new move of the topic.
    out = strom("--bootstrap-server", cluster.bootstrap, "--execute", "--additional", "--reassignment-json-file",
                str(plan), "--throttle", "1000000000")
    assert "The inter-broker throttle limit was set to 1000000000 B/s" in out.stdout, out.stdout + out.stderr
    assert "UNKNOWN_TOPIC_OR_PARTITION" in out.stdout, out.stdout + out.stderr
    cluster.wait_for(lambda: not cluster.zk.exists(f"/brokers/topics/{topic}")
                     and not cluster.zk.exists(f"/admin/delete_topics/{topic}"), BOUND,
                     "the topic deleted once its move completed")
    def left_on(broker_id: int) -> list[str]:
        """The topic's replica dirs and files on a broker (an emptied ``-delete`` tombstone dir holds none)."""
        return [str(f) for p in cluster.log_dir(broker_id).iterdir() if p.name.startswith(f"{topic}-")
                for f in (p, *p.iterdir()) if f is not p or not p.name.endswith("-delete")]

    for broker_id in (1, 2, 3):
        cluster.wait_for(lambda b=broker_id: not left_on(b), BOUND,
                         f"no replica of {topic} left on broker {broker_id}: {left_on(broker_id)}")
    assert topic not in admin.list_topics(timeout=30).topics
