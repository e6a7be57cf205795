"""Restarts say what happened, once: silence after a clean shutdown, one line after a crash, a WARNING for damage."""

from __future__ import annotations

import glob
import os

from confluent_kafka import Consumer, TopicPartition
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from strom.protocol.record_batch import build_batch
from tests.integration.test_api_version_matrix import call
from tests.integration.test_produce_consume import consume_all, new_topic, produce
from tests.support.broker import BrokerProcess

RECOVERY_WORDS = ("index", "recover", "torn", "truncat", "corrupt")


def log_since(broker: BrokerProcess, offset: int) -> list[str]:
    """Broker log lines written after byte ``offset`` (the log file is appended to across starts)."""
    with open(broker.log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()


def recovery_warnings(lines: list[str]) -> list[str]:
    return [ln for ln in lines if (" WARNING " in ln or " ERROR " in ln)
            and any(w in ln.lower() for w in RECOVERY_WORDS)]


def commit_group_offset(broker: BrokerProcess, topic: str) -> None:
    """A consumer group commit: creates __consumer_offsets (all of its partitions) and writes to one."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "quiet-restart", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        c.close()


def test_clean_restart_warns_about_nothing(broker_factory) -> None:  # noqa: ANN001
    """Empty internal and user partitions after SIGTERM: the next start finds nothing to recover."""
    b = broker_factory()
    full = new_topic(b, partitions=2)
    empty = new_topic(b, partitions=3)
    produce(b, full, [{"value": f"v{i}".encode(), "partition": i % 2} for i in range(20)])
    commit_group_offset(b, full)
    assert os.path.isdir(os.path.join(b.data_dir, "__consumer_offsets-0"))
    assert b.stop() == 0
    mark = os.path.getsize(b.log_path)
    b.start()
    assert len(consume_all(b, full, 20, partitions=2)) == 20
    assert len(consume_all(b, empty, 1, partitions=3, timeout=2)) == 0
    lines = log_since(b, mark)
    assert not recovery_warnings(lines), recovery_warnings(lines)
    assert not [ln for ln in lines if "not shut down cleanly" in ln]


def test_restart_after_kill9_reports_recovery_once(broker_factory) -> None:  # noqa: ANN001
    """Unflushed segments after a crash are rebuilt: one INFO line with the count, no per-partition WARNING."""
    b = broker_factory()
    topic = new_topic(b, partitions=6)
    empty = new_topic(b, partitions=4)
    values = {f"r{i:04d}".encode() for i in range(300)}
    produce(b, topic, [{"value": v, "partition": i % 6} for i, v in enumerate(sorted(values))])
    commit_group_offset(b, topic)
    mark = os.path.getsize(b.log_path)
    b.kill9()
    b.start()
    got = consume_all(b, topic, 300, partitions=6)
    assert {m.value() for m in got} == values
    assert len(consume_all(b, empty, 1, partitions=4, timeout=2)) == 0
    lines = log_since(b, mark)
    assert not recovery_warnings(lines), recovery_warnings(lines)
    summary = [ln for ln in lines if "not shut down cleanly" in ln]
    assert len(summary) == 1, summary
    assert " INFO " in summary[0]
    # Each partition holding data has one unflushed segment, rebuilt; empty segments have nothing to rebuild.
    with_data = [p for p in glob.glob(os.path.join(b.data_dir, "*-*", "*.log")) if os.path.getsize(p)]
    assert len(with_data) == 7  # the six partitions written, and the group's __consumer_offsets partition
    assert "recovered 7 segments of 7 partitions" in summary[0], summary[0]


def test_torn_batch_after_a_crash_is_a_warning_naming_the_segment(broker_factory) -> None:  # noqa: ANN001
    """Real damage stays loud: a .log cut in the middle of its last batch is truncated with a WARNING."""
    b = broker_factory()
    topic = new_topic(b)
    produce(b, topic, [{"value": b"x" * 100} for _ in range(50)], **{"batch.num.messages": 10})
    b.kill9()
    (segment,) = glob.glob(os.path.join(b.data_dir, f"{topic}-0", "*.log"))
    size = os.path.getsize(segment)
    os.truncate(segment, size - 40)  # mid-batch: the last batch is longer than 40 bytes
    mark = os.path.getsize(b.log_path)
    b.start()
    # One WARNING naming the segment, saying what was cut (not also a misleading "index missing" one).
    warnings = [ln for ln in log_since(b, mark) if " WARNING " in ln and segment in ln]
    assert len(warnings) == 1 and "recovery truncated" in warnings[0], warnings
    got = consume_all(b, topic, 40)
    assert len(got) == 40 and [m.offset() for m in got] == list(range(40))


def idempotent_produce(broker: BrokerProcess, topic: str, producer: tuple[int, int], seq: int) -> tuple[int, int]:
    """One idempotent batch of two records (sequences ``seq``, ``seq + 1``) to partition 0, as a client
    retrying it would send it again: (error code, base offset)."""
    pid, epoch = producer
    batch = build_batch([(b"k", b"idem-%d" % (seq + i), [], 1_700_000_000_000 + seq + i) for i in range(2)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    part = call(broker, req, 8).responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def test_clean_restart_rebuilds_what_the_shutdown_left_unwritten(broker_factory) -> None:  # noqa: ANN001
    """Partitions holding a little data: the SIGTERM writes no index file and no producer snapshot; the
    next start rebuilds both from the batches, quietly, and answers as before: reads, offsets by
    timestamp, and an idempotent producer's retried batch recognised as a duplicate."""
    b = broker_factory()
    topic = new_topic(b, partitions=3)
    t0 = 1_600_000_000_000
    produce(b, topic, [{"value": b"v" * 300, "partition": 1 + i % 2, "timestamp": t0 + 1_000 * i}
                       for i in range(40)], **{"batch.num.messages": 1})
    init = call(b, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1,
                                         producer_epoch=-1), 4)
    assert init.error_code == 0
    producer = (init.producer_id, init.producer_epoch)
    assert [idempotent_produce(b, topic, producer, seq) for seq in (0, 2, 4)] == [(0, 0), (0, 2), (0, 4)]
    assert b.stop() == 0
    left = [n for p in range(3) for n in os.listdir(os.path.join(b.data_dir, f"{topic}-{p}"))]
    assert not [n for n in left if n.endswith((".index", ".timeindex", ".snapshot"))], left

    mark = os.path.getsize(b.log_path)
    b.start()
    assert idempotent_produce(b, topic, producer, 4) == (0, 4)  # the retry: its original offset, no copy
    assert idempotent_produce(b, topic, producer, 8)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER: 6 is missing
    assert idempotent_produce(b, topic, producer, 6) == (0, 6)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "quiet-restart-times"})
    try:
        for i in range(40):
            wanted = TopicPartition(topic, 1 + i % 2, t0 + 1_000 * i - 500)
            (found,) = consumer.offsets_for_times([wanted], timeout=10)
            assert found.offset == i // 2, (i, found)
    finally:
        consumer.close()
    assert len(consume_all(b, topic, 48, partitions=3)) == 48
    lines = log_since(b, mark)
    assert not recovery_warnings(lines), recovery_warnings(lines)
    assert [ln for ln in lines if "small active segments from their batches" in ln]
