"""Replication on a real cluster: ZooKeeper plus three broker processes, real clients, real faults.

Cluster state (leader, leader epoch, ISR, controller) is read from ZooKeeper by the harness;
what clients see is checked with confluent-kafka. Tests that kill or stop brokers build their
own cluster; the module-wide `cluster3` is only used by tests that leave it as they found it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from tests.support.checker import SequenceProducer, check_topic, record_value
from tests.support.cluster import ClusterProcess, PartitionState
from tests.support.replicas import (
    IDEMPOTENT,
    create_topic,
    high_watermark,
    metadata_partition,
    wait_identical_replicas,
)

pytestmark = pytest.mark.cluster

ALL = {1, 2, 3}
COORDINATOR_MOVING = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                      KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._WAIT_COORD, KafkaError._TRANSPORT,
                      KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT}


def test_rf3_topic_replicas_are_byte_identical_below_the_high_watermark(cluster3: ClusterProcess) -> None:
    topic = create_topic(cluster3, partitions=2)

    def full_metadata() -> bool:
        parts = [metadata_partition(cluster3, topic, p) for p in (0, 1)]
        return all(set(m.replicas) == ALL and set(m.isrs) == ALL and m.leader in ALL for m in parts)

    cluster3.wait_for(full_metadata, 60, f"Metadata of {topic} showing 3 replicas and an ISR of 3")
    writer = SequenceProducer(cluster3.bootstrap, topic, "w", {"acks": "all", "linger.ms": 5}).produce_some(2000)
    assert writer.unflushed == 0 and not writer.errors, writer.errors[:5]
    assert writer.acked_count() == 2000
    total = 0
    for p in (0, 1):
        hw = high_watermark(cluster3, topic, p)
        total += hw
        data = wait_identical_replicas(cluster3, topic, p, hw, ALL)
        assert (len(data) > 0) == (hw > 0)
    assert total == 2000
    report = check_topic(cluster3.bootstrap, topic, writer.acked)
    assert report.ok and report.consumed == 2000, str(report)


@pytest.mark.parametrize("victim", ["leader", "controller"])
def test_kill9_keeps_every_acknowledged_idempotent_record_exactly_once(cluster_factory, victim: str) -> None:  # noqa: ANN001
    cluster = cluster_factory(3)
    topic = create_topic(cluster, config={"min.insync.replicas": "2"})
    before = cluster.partition_state(topic, 0)
    assert before is not None
    controller = cluster.controller_id()
    assert controller is not None
    target = before.leader if victim == "leader" else controller
    writer = SequenceProducer(cluster.bootstrap, topic, "k", IDEMPOTENT, partition=0, rate_sleep=0.001).start()
    try:
        assert writer.wait_acked(300, 60), f"only {writer.acked_count()} acked before the kill"
        cluster.kill9(target)
        if victim == "controller":
            assert cluster.wait_controller(not_in={target}, timeout=60) != target
        if target == before.leader:
            after = cluster.wait_leader(topic, 0, not_in={target}, timeout=60)
            assert after.leader_epoch > before.leader_epoch
            assert target not in cluster.wait_isr(topic, 0, ALL - {target}, timeout=60).isr
        acked_at_kill = writer.acked_count()
        assert writer.wait_acked(acked_at_kill + 300, 90), (
            f"the producer stalled at {writer.acked_count()} acks after broker {target} was killed\n"
            + cluster.describe_failure("producer progress", 90))
    finally:
        writer.stop()
    assert writer.unflushed == 0 and not writer.errors, writer.errors[:5]
    report = check_topic(cluster.bootstrap, topic, writer.acked)
    assert report.ok, str(report)
    assert report.lost == report.duplicated == report.reordered == 0
    offsets = [a.offset for a in writer.acked]
    shared = sorted(o for o, n in Counter(offsets).items() if n > 1)
    assert len(set(offsets)) == len(offsets), (
        f"acknowledged records share offsets {shared[:10]}: "
        f"{[a for a in writer.acked if a.offset in shared[:10]][:10]}")


def test_min_insync_replicas_refuses_acks_all_but_takes_acks_1(cluster_factory) -> None:  # noqa: ANN001
    cluster = cluster_factory(3)
    topic = create_topic(cluster, config={"min.insync.replicas": "2"})
    leader = cluster.partition_state(topic, 0).leader
    followers = sorted(ALL - {leader})
    for broker_id in followers:
        cluster.stop(broker_id)
    cluster.wait_isr(topic, 0, {leader}, timeout=60)

    def send(acks: str) -> tuple[KafkaError | None, int]:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "retries": 0,
                             "enable.idempotence": False, "message.timeout.ms": 30_000, "log_level": 0})
        result: list[tuple[KafkaError | None, int]] = []
        producer.produce(topic, b"payload", partition=0, on_delivery=lambda err, msg: result.append(
            (err, msg.offset())))
        assert producer.flush(45) == 0
        return result[0]

    err, _ = send("all")
    assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS, err
    err, offset = send("1")
    assert err is None and offset >= 0


def test_controlled_shutdown_moves_leadership_first_and_keeps_group_offsets(cluster_factory) -> None:  # noqa: ANN001
    cluster = cluster_factory(3)
    topic = create_topic(cluster, partitions=3, config={"min.insync.replicas": "2"})
    seed = SequenceProducer(cluster.bootstrap, topic, "s", IDEMPOTENT).produce_some(600)
    assert seed.unflushed == 0 and not seed.errors
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "log_level": 0,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 10_000})
    consumer.subscribe([topic])
    seen: set[bytes] = set()

    def consume_until(count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(seen) < count:
            assert time.monotonic() < deadline, f"group consumed {len(seen)} of {count}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().retriable() or msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            seen.add(msg.value())
            commit(msg)

    def commit(msg) -> None:  # noqa: ANN001
        """Synchronous commit, retried while the group coordinator moves (a retriable error)."""
        for _ in range(60):
            try:
                consumer.commit(message=msg, asynchronous=False)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() and exc.args[0].code() not in COORDINATOR_MOVING:
                    raise
                time.sleep(0.5)
        raise AssertionError(f"could not commit offset {msg.offset() + 1} of partition {msg.partition()}")

    consume_until(300, 90)
    partitions = [TopicPartition(topic, p) for p in range(3)]
    committed_before = {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=30)}
    assert sum(max(o, 0) for o in committed_before.values()) >= 300 - 3

    leader = cluster.partition_state(topic, 0).leader
    observed: list[tuple[int, int]] = []  # (leader, zxid of that version of the state znode)

    def on_state(data: bytes | None, stat: ZnodeStat | None) -> None:
        if data and stat is not None:
            observed.append((int(json.loads(data)["leader"]), stat.mzxid))

    DataWatch(cluster.zk, f"/brokers/topics/{topic}/partitions/0/state", on_state)
    writer = SequenceProducer(cluster.bootstrap, topic, "w", IDEMPOTENT, rate_sleep=0.002).start()
    try:
        assert writer.wait_acked(200, 60)
        assert cluster.stop(leader, timeout=120) == 0, cluster.broker(leader).log_tail()
        moved: PartitionState = cluster.wait_leader(topic, 0, not_in={leader}, timeout=30)
        assert moved.leader != leader
        cluster.wait_for(lambda: leader not in cluster.registered_brokers(), 30, f"broker {leader} deregistered")
        # pzxid: the zxid of the last change to /brokers/ids' children, i.e. the broker's deregistration.
        deregistered_at = cluster.zk.exists("/brokers/ids").pzxid
        assert writer.wait_acked(writer.acked_count() + 200, 90)
    finally:
        writer.stop()
    moves = [zxid for new_leader, zxid in list(observed) if new_leader != leader]
    assert moves and min(moves) < deregistered_at, (
        f"leadership of {topic}-0 moved only after broker {leader} left ZooKeeper (zxid {deregistered_at}): "
        f"{observed}")
    assert writer.unflushed == 0 and not writer.errors, writer.errors[:5]

    total = 600 + writer.acked_count()
    consume_until(total, 120)
    final = {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=30)}
    consumer.close()
    for p, offset in committed_before.items():
        assert final[p] >= offset
    fresh = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "log_level": 0})
    try:
        survived = {tp.partition: tp.offset for tp in fresh.committed(partitions, timeout=30)}
    finally:
        fresh.close()
    assert survived == final
    ends = {p: high_watermark(cluster, topic, p) for p in range(3)}
    assert survived == ends  # everything was consumed and committed
    report = check_topic(cluster.bootstrap, topic, seed.acked + writer.acked)
    assert report.ok, str(report)


def test_restarted_broker_catches_up_and_rejoins_the_isr(cluster_factory) -> None:  # noqa: ANN001
    cluster = cluster_factory(3)
    topic = create_topic(cluster, config={"min.insync.replicas": "2"})
    leader = cluster.partition_state(topic, 0).leader
    follower = min(ALL - {leader})
    first = SequenceProducer(cluster.bootstrap, topic, "a", IDEMPOTENT, partition=0).produce_some(500)
    assert first.unflushed == 0 and not first.errors
    cluster.kill9(follower)
    cluster.wait_isr(topic, 0, ALL - {follower}, timeout=60)
    second = SequenceProducer(cluster.bootstrap, topic, "b", IDEMPOTENT, partition=0).produce_some(500)
    assert second.unflushed == 0 and not second.errors, second.errors[:5]
    cluster.start_broker(follower)
    state = cluster.wait_isr(topic, 0, ALL, timeout=90)
    assert state.leader == leader
    hw = high_watermark(cluster, topic, 0)
    assert hw == 1000
    wait_identical_replicas(cluster, topic, 0, hw, ALL)
    report = check_topic(cluster.bootstrap, topic, first.acked + second.acked)
    assert report.ok and report.consumed == 1000, str(report)


@pytest.mark.slow
def test_rolling_restart_of_every_broker_under_load_keeps_records_and_the_group(cluster_factory) -> None:  # noqa: ANN001
    """Each broker in turn: SIGTERM (controlled shutdown), start, back in every ISR; writers and a group go on."""
    import threading

    cluster = cluster_factory(3)
    topic = create_topic(cluster, partitions=3, config={"min.insync.replicas": "2"})
    group = f"g-{uuid.uuid4().hex[:8]}"
    seen: set[bytes] = set()
    errors: list[str] = []
    stop = threading.Event()

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "log_level": 0,
                             "auto.offset.reset": "earliest", "enable.auto.commit": True,
                             "auto.commit.interval.ms": 200, "session.timeout.ms": 10_000})
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    if not (msg.error().retriable() or msg.error().code() in COORDINATOR_MOVING
                            or msg.error().code() == KafkaError._PARTITION_EOF):
                        errors.append(str(msg.error()))
                    continue
                seen.add(msg.value())
        finally:
            consumer.close()  # commits what was consumed

    reader = threading.Thread(target=consume, name="group-member", daemon=True)
    reader.start()
    writer = SequenceProducer(cluster.bootstrap, topic, "w", IDEMPOTENT, rate_sleep=0.002).start()
    try:
        assert writer.wait_acked(200, 60)
        for broker in sorted(ALL):
            assert cluster.stop(broker, timeout=120) == 0, cluster.broker(broker).log_tail()
            assert writer.wait_acked(writer.acked_count() + 100, 90), f"no progress with broker {broker} down"
            cluster.start_broker(broker)
            for p in range(3):
                cluster.wait_isr(topic, p, ALL, timeout=90)
            assert writer.wait_acked(writer.acked_count() + 100, 90), f"no progress after broker {broker} came back"
    finally:
        writer.stop()
    assert writer.unflushed == 0 and not writer.errors, writer.errors[:5]
    acked = {record_value(a.producer, a.seq) for a in writer.acked}
    deadline = time.monotonic() + 120
    while not acked <= seen and time.monotonic() < deadline:
        time.sleep(0.5)
    stop.set()
    reader.join(60)
    assert not errors, errors[:5]
    assert acked <= seen, f"the group never saw {len(acked - seen)} acknowledged records"
    partitions = [TopicPartition(topic, p) for p in range(3)]
    fresh = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "log_level": 0})
    try:
        committed = {tp.partition: tp.offset for tp in fresh.committed(partitions, timeout=30)}
    finally:
        fresh.close()
    assert committed == {p: high_watermark(cluster, topic, p) for p in range(3)}
    report = check_topic(cluster.bootstrap, topic, writer.acked)
    assert report.ok, str(report)
