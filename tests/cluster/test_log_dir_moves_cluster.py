"""A follower moves a replica between its log dirs while it replicates (AlterReplicaLogDirs, KIP-113).

Broker 2 has two log dirs and follows partition 0, which broker 1 leads, while an acks=all producer
writes with min.insync.replicas=2: every write waits for broker 2's copy, so the follower keeps
appending (to the old log, then to the moved one) throughout the move. Afterwards its copy is
byte-for-byte the leader's, in the new dir only, and broker 2 never left the ISR.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import kafka.errors as Errors
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from strom.cli.log_dirs import alter_replica_log_dirs, describe_log_dirs
from tests.support.cluster import ClusterProcess
from tests.support.replicas import IDEMPOTENT, WHOLE_LOG, batches_below, create_topic, high_watermark

pytestmark = [pytest.mark.cluster]

FOLLOWER = 2


def replicas_on(cluster: ClusterProcess, broker: int, topic: str) -> dict[str, list[dict[str, Any]]]:
    """log dir -> the replicas of ``topic`` DescribeLogDirs lists there, on ``broker``."""
    described = describe_log_dirs(cluster.broker(broker).bootstrap, [broker], [topic])
    return {d["logDir"]: d["partitions"] for d in described["brokers"][0]["logDirs"]}


def test_a_follower_moves_its_replica_while_replicating(cluster_factory) -> None:  # noqa: ANN001
    cluster: ClusterProcess = cluster_factory(2, start=False, offsets_replication_factor=1)
    base = cluster.log_dir(FOLLOWER)
    second = Path(f"{base}2")
    cluster.broker_overrides[FOLLOWER] = {"log.dirs": f"{base},{second}",
                                          "replica.alter.log.dirs.io.max.bytes.per.second": 1_000_000}
    cluster.broker(FOLLOWER).overrides = cluster._broker_config(FOLLOWER)
    cluster.start()
    topic = create_topic(cluster, replicas=[[1, FOLLOWER]], config={
        "min.insync.replicas": "2", "segment.bytes": str(256 * 1024), "file.delete.delay.ms": "0"})
    src = base if (base / f"{topic}-0").is_dir() else second
    dst = second if src == base else base

    acked: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, **IDEMPOTENT, "log_level": 0})
        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic, b"r-%08d" % i + b"x" * 1000, partition=0,
                                 on_delivery=lambda err, msg: errors.append(str(err)) if err else acked.append(
                                     msg.value()))
                i += 1
            except BufferError:
                pass
            producer.poll(0.001)
        assert producer.flush(90) == 0

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        cluster.wait_for(lambda: len(acked) > 2000, 60, "2,000 acknowledged records before the move")
        codes = alter_replica_log_dirs(cluster.bootstrap, {(topic, 0, FOLLOWER): str(dst)})
        assert codes == {(topic, 0, FOLLOWER): 0}
        cluster.wait_for(lambda: any(p["isFuture"] for p in replicas_on(cluster, FOLLOWER, topic).get(str(dst), [])),
                         60, "the future replica on the follower")
        cluster.wait_for(lambda: (dst / f"{topic}-0").is_dir() and not (src / f"{topic}-0").exists(), 120,
                         "the move to finish")
        count = len(acked)
        cluster.wait_for(lambda: len(acked) > count + 200, 60, "writes after the move")
    finally:
        stop.set()
        thread.join(120)
    assert not errors, errors[:5]
    state = cluster.wait_isr(topic, 0, [1, FOLLOWER])
    assert state.leader == 1
    # The follower's copy, now in the new dir, is the leader's byte for byte.
    hw = high_watermark(cluster, topic, 0)
    assert hw == len(acked)
    leader_log, end = batches_below(cluster.log_dir(1), topic, 0, WHOLE_LOG)
    assert end == hw

    def follower_caught_up() -> bytes | None:
        data, follower_end = batches_below(dst, topic, 0, WHOLE_LOG)
        return data if follower_end == hw else None

    assert cluster.wait_for(follower_caught_up, 60, "the follower holding every record") == leader_log
    listed = replicas_on(cluster, FOLLOWER, topic)
    assert [p["partition"] for p in listed[str(dst)]] == [f"{topic}-0"] and listed[str(src)] == []


def test_a_replica_not_created_yet_is_created_in_the_requested_dir(cluster_factory) -> None:  # noqa: ANN001
    cluster: ClusterProcess = cluster_factory(2, start=False, offsets_replication_factor=1)
    base = cluster.log_dir(FOLLOWER)
    second = Path(f"{base}2")
    cluster.broker_overrides[FOLLOWER] = {"log.dirs": f"{base},{second}"}
    cluster.broker(FOLLOWER).overrides = cluster._broker_config(FOLLOWER)
    cluster.start()
    topic = create_topic(cluster, replicas=[[1]])
    # The follower has no replica of partition 0, and partition 1 does not exist yet.
    described = describe_log_dirs(cluster.broker(FOLLOWER).bootstrap, [FOLLOWER])["brokers"][0]["logDirs"]
    counts = {d["logDir"]: len(d["partitions"]) for d in described}
    preferred = max(counts, key=lambda d: (counts[d], d == str(second)))  # not where placement would go
    expected = {(topic, 0, FOLLOWER): Errors.ReplicaNotAvailableError.errno,
                (topic, 1, FOLLOWER): Errors.UnknownTopicOrPartitionError.errno}

    def alter() -> dict[tuple[str, int, int], int] | None:
        """None while the follower's metadata does not show the new topic yet (UNKNOWN_TOPIC_OR_PARTITION)."""
        codes = alter_replica_log_dirs(cluster.bootstrap, {(topic, 0, FOLLOWER): preferred,
                                                           (topic, 1, FOLLOWER): preferred})
        return None if codes[(topic, 0, FOLLOWER)] == Errors.UnknownTopicOrPartitionError.errno else codes

    codes = cluster.wait_for(alter, 60, "the follower to know the topic")
    assert codes == expected
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    admin.create_partitions([NewPartitions(topic, 2, replica_assignment=[[FOLLOWER]])])[topic].result(timeout=60)
    cluster.wait_isr(topic, 1, [FOLLOWER])  # the controller's state: the broker may create the log a moment later
    cluster.wait_for(lambda: (Path(preferred) / f"{topic}-1").is_dir(), 60, "the new replica in the requested dir")
