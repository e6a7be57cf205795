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
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from strom.cli.log_dirs import alter_replica_log_dirs, describe_log_dirs
from tests.integration.test_full_disk import _mount_tmpfs, _unmount, fill
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


def test_a_leader_ahead_of_its_high_watermark_reports_no_offset_lag(cluster_factory) -> None:  # noqa: ANN001
    """DescribeLogDirs' offsetLag of a current replica is how far its end is behind the high watermark
    (Kafka's max(HW - LEO, 0)): a leader holding records its follower has not fetched yet lags nothing."""
    cluster: ClusterProcess = cluster_factory(2, offsets_replication_factor=1, session_timeout_ms=60_000,
                                              overrides={"replica.lag.time.max.ms": 120_000})
    topic = create_topic(cluster, replicas=[[1, FOLLOWER]], config={"min.insync.replicas": "1"})
    cluster.sigstop(FOLLOWER)
    try:
        producer = Producer({"bootstrap.servers": cluster.broker(1).bootstrap, "acks": 1, "log_level": 0})
        for i in range(10):
            producer.produce(topic, b"v%d" % i, partition=0)
        assert producer.flush(60) == 0
        # The follower is still in the ISR, so the leader's high watermark stays behind its log end.
        assert list(cluster.partition_state(topic, 0).isr) == [1, FOLLOWER]
        assert high_watermark(cluster, topic, 0, cluster.broker(1).bootstrap) == 0
        [leader_copy] = [p for ps in replicas_on(cluster, 1, topic).values() for p in ps]
        assert leader_copy["offsetLag"] == 0 and not leader_copy["isFuture"]
    finally:
        cluster.sigcont(FOLLOWER)
    cluster.wait_for(lambda: high_watermark(cluster, topic, 0, cluster.broker(1).bootstrap) == 10, 60,
                     "the follower to catch up")
    [follower_copy] = [p for ps in replicas_on(cluster, FOLLOWER, topic).values() for p in ps]
    assert follower_copy["offsetLag"] == 0


def dirs_of(cluster: ClusterProcess, broker: int) -> dict[str, dict[str, Any]]:
    """log dir -> kafka-log-dirs.sh's entry for it (error, partitions), on ``broker``."""
    described = describe_log_dirs(cluster.broker(broker).bootstrap, [broker])
    return {d["logDir"]: d for d in described["brokers"][0]["logDirs"]}


def test_a_target_dir_failing_mid_move_goes_offline_and_the_source_keeps_serving(cluster_factory) -> None:  # noqa: ANN001
    """Broker 2's second log dir is a small tmpfs that fills up while a replica is being copied into it:
    the dir goes offline as a failed append would take it (DescribeLogDirs: KAFKA_STORAGE_ERROR, the
    controller moves leadership of what it held), and the replica being moved keeps serving from its dir."""
    mover = 2
    cluster: ClusterProcess = cluster_factory(2, start=False, offsets_replication_factor=1,
                                              overrides={"replica.lag.time.max.ms": 600_000})
    base = cluster.log_dir(mover)
    second = Path(f"{base}2")
    _mount_tmpfs(second, 16)
    try:
        cluster.broker_overrides[mover] = {"log.dirs": f"{base},{second}",
                                           "replica.alter.log.dirs.io.max.bytes.per.second": 500_000}
        cluster.broker(mover).overrides = cluster._broker_config(mover)
        cluster.start()
        topic = create_topic(cluster, replicas=[[mover, 1], [mover, 1]], config={"min.insync.replicas": "1"})
        [moved] = [p for p in (0, 1) if (base / f"{topic}-{p}").is_dir()]
        [other] = [p for p in (0, 1) if (second / f"{topic}-{p}").is_dir()]
        producer = Producer({"bootstrap.servers": cluster.bootstrap, **IDEMPOTENT, "log_level": 0})
        for i in range(2000):  # ~2 MB: seconds of copying at the throttle
            producer.produce(topic, b"r-%08d" % i + b"x" * 1000, partition=moved)
            producer.poll(0)
        assert producer.flush(60) == 0

        assert alter_replica_log_dirs(cluster.bootstrap, {(topic, moved, mover): str(second)}) == {
            (topic, moved, mover): 0}
        cluster.wait_for(lambda: any(p["isFuture"] for p in dirs_of(cluster, mover)[str(second)]["partitions"]),
                         60, "the future replica in the second dir")
        fill(str(second))  # the next copy step finds no space

        cluster.wait_for(lambda: dirs_of(cluster, mover)[str(second)]["error"] == "KafkaStorageError", 60,
                         "the second dir reported offline")
        # The dir is offline: no new move into it, and what it held is led by broker 1 now.
        assert alter_replica_log_dirs(cluster.bootstrap, {(topic, moved, mover): str(second)}) == {
            (topic, moved, mover): Errors.KafkaStorageError.errno}
        assert cluster.wait_leader(topic, other, not_in=[mover]).leader == 1
        # The replica that was moving stays where it was, current, led by broker 2, and takes writes.
        [current] = dirs_of(cluster, mover)[str(base)]["partitions"]
        assert current["partition"] == f"{topic}-{moved}" and not current["isFuture"]
        assert not any(n.endswith("-future") for n in (p.name for p in base.iterdir()))
        assert cluster.partition_state(topic, moved).leader == mover
        for i in range(2000, 2100):
            producer.produce(topic, b"r-%08d" % i + b"x" * 1000, partition=moved)
        assert producer.flush(60) == 0
        consumer = Consumer({"bootstrap.servers": cluster.broker(mover).bootstrap, "group.id": "unused",
                             "enable.auto.commit": False, "log_level": 0})
        consumer.assign([TopicPartition(topic, moved, 0)])
        values: list[bytes] = []
        try:
            for _ in range(240):
                values += [m.value()[:10] for m in consumer.consume(500, timeout=0.5) if m.error() is None]
                if len(values) >= 2100:
                    break
        finally:
            consumer.close()
        assert values == [b"r-%08d" % i for i in range(2100)]
        log_text = cluster.broker(mover).log_path.read_text(errors="replace")
        assert "is offline" in log_text and "Traceback" not in log_text, log_text[-3000:]
    finally:
        cluster.close()
        _unmount(second)
