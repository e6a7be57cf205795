"""A broker's full log dir goes offline (KIP-112) without stalling the rest of the cluster.

Broker 3's log dir is a small tmpfs, filled with a filler file while the cluster runs. The
controller must learn of the offline dir through ZooKeeper and move leadership off broker 3 and
drop it from every ISR at once: ``replica.lag.time.max.ms`` is set far beyond the test, so a
shrink by the leaders' lag rule cannot be what unblocks the acks=all writes. Broker 3 must then
exit on SIGTERM and, restarted once space is back, rejoin every ISR without losing a record.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as TP

from tests.integration.test_full_disk import _mount_tmpfs, _unmount, fill
from tests.support.replicas import create_topic, high_watermark, wait_identical_replicas

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FULL = 3
VALUE = b"v" * 10_000  # bigger than a page: every append needs fresh blocks
ASSIGNMENT = [[3, 1, 2], [1, 2, 3], [2, 3, 1]]  # broker 3 leads partition 0 and follows 1 and 2


def produce_acks_all(bootstrap: str, topic: str, per_partition: int, tag: str) -> list[str]:
    """acks=all writes to every partition (the client retries); returns the delivery errors."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60_000, "linger.ms": 5, "log_level": 0})
    for i in range(per_partition):
        for p in range(len(ASSIGNMENT)):
            producer.produce(topic, VALUE, key=f"{tag}-{p}-{i}".encode(), partition=p,
                             on_delivery=lambda err, _msg: err is not None and errors.append(str(err)))
        producer.poll(0)
    assert producer.flush(90) == 0
    return errors


def consume_keys(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "log_level": 0})
    consumer.assign([TP(topic, p, 0) for p in range(len(ASSIGNMENT))])
    keys: list[bytes] = []
    try:
        for _ in range(600):
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is None:
                    keys.append(msg.key())
            if len(keys) >= expected:
                break
    finally:
        consumer.close()
    return keys


def test_full_log_dir_moves_leadership_and_isr_at_once_and_comes_back(cluster_factory) -> None:  # noqa: ANN001
    cluster = cluster_factory(3, start=False, overrides={
        "replica.lag.time.max.ms": 600_000,  # only the controller may take broker 3 out of the ISRs
        "controlled.shutdown.max.retries": 2, "controlled.shutdown.retry.backoff.ms": 500})
    mount = cluster.log_dir(FULL)
    _mount_tmpfs(mount, 16)
    try:
        cluster.start()
        topic = create_topic(cluster, replicas=ASSIGNMENT, config={"min.insync.replicas": "2"})
        assert produce_acks_all(cluster.bootstrap, topic, 5, "before") == []
        filler = fill(str(mount))

        # Every partition keeps taking acks=all writes: the ones broker 3 led and the ones it followed.
        assert produce_acks_all(cluster.bootstrap, topic, 40, "full") == []
        for p in range(len(ASSIGNMENT)):
            state = cluster.partition_state(topic, p)
            assert state is not None and state.leader != FULL and FULL not in state.isr, (p, state)
        log_text = cluster.broker(FULL).log_path.read_text(errors="replace")
        assert "is offline" in log_text
        assert log_text.count("cannot append to follower") <= len(ASSIGNMENT), "the fetcher kept retrying"
        assert "Traceback" not in log_text, log_text[-3000:]

        # SIGTERM on the full disk: controlled shutdown completes and the process exits.
        assert cluster.stop(FULL, timeout=60) == 0
        assert "shut down" in cluster.broker(FULL).log_tail(5)

        # Space is back: a restart brings the dir online with everything it had.
        os.unlink(filler)
        cluster.start_broker(FULL)
        for p, replicas in enumerate(ASSIGNMENT):
            cluster.wait_isr(topic, p, replicas, timeout=90)
            wait_identical_replicas(cluster, topic, p, high_watermark(cluster, topic, p), set(replicas))
        keys = consume_keys(cluster.bootstrap, topic, 45 * len(ASSIGNMENT))
        assert sorted(set(keys)) == sorted(
            f"{tag}-{p}-{i}".encode() for tag, n in (("before", 5), ("full", 40))
            for p in range(len(ASSIGNMENT)) for i in range(n))
    finally:
        cluster.close()
        _unmount(Path(mount))


def test_a_full_dir_on_the_new_leader_moves_leadership_on_at_its_first_failed_write(cluster_factory) -> None:  # noqa: ANN001
    """Broker 3's dir fills while it is an idle follower, then it becomes leader. Becoming leader needs no
    new space (the one-sector leader-epoch checkpoint is rewritten in place, ADR 0047), so it leads until
    an append needs a page the disk cannot give: that write takes the dir offline, the controller hands
    the partition to the next in-sync replica, and no acknowledged record is lost."""
    cluster = cluster_factory(3, start=False, overrides={"replica.lag.time.max.ms": 600_000})
    mount = cluster.log_dir(FULL)
    _mount_tmpfs(mount, 16)
    try:
        cluster.start()
        topic = create_topic(cluster, replicas=[[1, 3, 2]], config={"min.insync.replicas": "1"})
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "message.timeout.ms": 60_000, "log_level": 0})
        producer.produce(topic, b"first", partition=0)
        assert producer.flush(60) == 0
        cluster.wait_isr(topic, 0, [1, 2, 3])
        fill(str(mount))
        assert cluster.stop(1, timeout=60) == 0  # the controller picks broker 3, next in assignment order
        errors: list[str] = []
        sent = [b"after-%02d-" % i + b"x" * 2048 for i in range(40)]  # 80 KiB: more than the last page holds
        for value in sent:
            producer.produce(topic, value, partition=0,
                             on_delivery=lambda err, _msg: err is not None and errors.append(str(err)))
        assert producer.flush(90) == 0 and errors == []
        state = cluster.partition_state(topic, 0)
        assert state is not None and state.leader == 2 and FULL not in state.isr, state
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{topic}",
                             "enable.auto.commit": False, "log_level": 0})
        consumer.assign([TP(topic, 0, 0)])
        values: list[bytes] = []
        try:
            for _ in range(240):
                values += [m.value() for m in consumer.consume(500, timeout=0.5) if m.error() is None]
                if len(values) >= 1 + len(sent):
                    break
        finally:
            consumer.close()
        assert values == [b"first", *sent]
        log_text = cluster.broker(FULL).log_path.read_text(errors="replace")
        assert "is offline" in log_text
        assert "Traceback" not in log_text, log_text[-3000:]
    finally:
        cluster.close()
        _unmount(Path(mount))


def test_sighup_brings_the_dir_back_once_space_returns(cluster_factory) -> None:  # noqa: ANN001
    """Better than Kafka (which needs a restart): the operator frees space and sends SIGHUP; the dir comes
    back with everything it held, its replicas catch up and rejoin the ISRs, the process never stopped."""
    cluster = cluster_factory(3, start=False, overrides={"replica.lag.time.max.ms": 600_000})
    mount = cluster.log_dir(FULL)
    _mount_tmpfs(mount, 16)
    try:
        cluster.start()
        topic = create_topic(cluster, replicas=ASSIGNMENT, config={"min.insync.replicas": "2"})
        assert produce_acks_all(cluster.bootstrap, topic, 5, "before") == []
        filler = fill(str(mount))
        assert produce_acks_all(cluster.bootstrap, topic, 20, "full") == []
        for p in range(len(ASSIGNMENT)):
            cluster.wait_isr(topic, p, [b for b in ASSIGNMENT[p] if b != FULL])
        broker = cluster.broker(FULL)
        pid = broker.pid
        assert pid is not None

        os.kill(pid, signal.SIGHUP)  # still full: the dir stays offline
        cluster.wait_for(lambda: "stays offline" in broker.log_path.read_text(errors="replace"), 30,
                         "the broker refusing to bring a full dir back")
        os.unlink(filler)
        os.kill(pid, signal.SIGHUP)
        for p, replicas in enumerate(ASSIGNMENT):
            cluster.wait_isr(topic, p, replicas, timeout=90)
        assert cluster.running(FULL) and broker.pid == pid
        assert produce_acks_all(cluster.bootstrap, topic, 5, "after") == []
        for p, replicas in enumerate(ASSIGNMENT):
            wait_identical_replicas(cluster, topic, p, high_watermark(cluster, topic, p), set(replicas))
        keys = consume_keys(cluster.bootstrap, topic, 30 * len(ASSIGNMENT))
        assert sorted(set(keys)) == sorted(
            f"{tag}-{p}-{i}".encode() for tag, n in (("before", 5), ("full", 20), ("after", 5))
            for p in range(len(ASSIGNMENT)) for i in range(n))
    finally:
        cluster.close()
        _unmount(Path(mount))
