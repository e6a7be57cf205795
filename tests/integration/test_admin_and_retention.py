"""Topic administration, configs, DeleteRecords and retention through AdminClient."""

from __future__ import annotations

import glob
import os
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from tests.integration.test_produce_consume import consume_all, new_topic, produce


def admin(b) -> AdminClient:  # noqa: ANN001
    return AdminClient({"bootstrap.servers": b.bootstrap})


def watermarks(b, topic: str, p: int = 0) -> tuple[int, int]:  # noqa: ANN001
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "x"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
    finally:
        c.close()


def test_create_describe_list_delete_recreate(broker) -> None:  # noqa: ANN001
    a = admin(broker)
    topic = new_topic(broker, partitions=3, config={"retention.ms": "3600000"})
    md = a.list_topics(timeout=10)
    assert topic in md.topics and len(md.topics[topic].partitions) == 3
    dup = a.create_topics([NewTopic(topic, 1, 1)])[topic]
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        dup.result(10)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    cfg = a.describe_configs([res])[res].result(10)
    assert cfg["retention.ms"].value == "3600000"
    assert cfg["segment.bytes"].value == "1073741824"
    produce(broker, topic, [{"value": b"old", "partition": 0}])
    a.delete_topics([topic])[topic].result(10)
    deadline = time.monotonic() + 10
    while topic in a.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in a.list_topics(timeout=10).topics
    a.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    assert watermarks(broker, topic) == (0, 0)  # the old data is gone


def test_invalid_requests_get_clear_errors(broker) -> None:  # noqa: ANN001
    a = admin(broker)
    rf_name = f"rf-{uuid.uuid4().hex[:6]}"
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR|Replication factor"):
        a.create_topics([NewTopic(rf_name, 1, 3)])[rf_name].result(10)
    name = f"cfg-{uuid.uuid4().hex[:6]}"
    with pytest.raises(Exception, match="INVALID_CONFIG|segment.bytes|Unknown"):
        a.create_topics([NewTopic(name, 1, 1, config={"no.such.config": "1"})])[name].result(10)


def test_alter_configs_and_partitions(broker) -> None:  # noqa: ANN001
    a = admin(broker)
    topic = new_topic(broker, partitions=1)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", "123456", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(10)
    desc = ConfigResource(ConfigResource.Type.TOPIC, topic)
    assert a.describe_configs([desc])[desc].result(10)["retention.bytes"].value == "123456"
    a.create_partitions([NewPartitions(topic, 4)])[topic].result(10)
    assert len(a.list_topics(topic, timeout=10).topics[topic].partitions) == 4
    produce(broker, topic, [{"value": b"p3", "partition": 3}])
    assert [m.value() for m in consume_all(broker, topic, 1, partitions=4)] == [b"p3"]
    with pytest.raises(Exception, match="INVALID_PARTITIONS|increase"):
        a.create_partitions([NewPartitions(topic, 2)])[topic].result(10)


def test_broker_configs_and_cluster(broker) -> None:  # noqa: ANN001
    a = admin(broker)
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    cfg = a.describe_configs([res])[res].result(10)
    assert cfg["log.segment.bytes"].value == "1073741824"
    cluster = a.describe_cluster().result(10)
    assert cluster.controller.id == 0 and len(cluster.nodes) == 1


def test_delete_records_advances_log_start(broker) -> None:  # noqa: ANN001
    a = admin(broker)
    topic = new_topic(broker)
    produce(broker, topic, [{"value": str(i).encode()} for i in range(10)])
    result = a.delete_records([TopicPartition(topic, 0, 6)])
    low = list(result.values())[0].result(10)
    assert low.low_watermark == 6
    assert watermarks(broker, topic) == (6, 10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 2)])  # below the log start: reset to earliest
    msgs = []
    deadline = time.monotonic() + 15
    while len(msgs) < 4 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            msgs.append(m)
    c.close()
    assert [m.offset() for m in msgs] == [6, 7, 8, 9]


def test_roll_by_size_and_retention_by_size(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory({"log.retention.check.interval.ms": 200})
    topic = new_topic(b, config={"segment.bytes": "10000", "retention.bytes": "30000"})
    for _ in range(20):  # separate requests, so the broker sees many batches it can roll between
        produce(b, topic, [{"value": b"x" * 500} for _ in range(10)], **{"linger.ms": 0})
    part_dir = os.path.join(b.data_dir, f"{topic}-0")
    def log_bytes() -> int:
        return sum(os.path.getsize(f) for f in glob.glob(os.path.join(part_dir, "*.log")))

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and log_bytes() > 30000 + 10000:
        time.sleep(0.3)
    start, end = watermarks(b, topic)
    assert start > 0 and end == 200
    assert len(glob.glob(os.path.join(part_dir, "*.log"))) >= 2  # rolled by size
    assert log_bytes() <= 30000 + 10000  # retention.bytes plus at most the active segment


def test_retention_by_time_and_roll_by_time(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory({"log.retention.check.interval.ms": 200})
    topic = new_topic(b, config={"segment.ms": "300", "retention.ms": "1000"})
    now = int(time.time() * 1000)
    produce(b, topic, [{"value": b"old", "timestamp": now - 10_000}], **{"linger.ms": 0})
    time.sleep(0.5)
    produce(b, topic, [{"value": b"new"}], **{"linger.ms": 0})  # rolls: the first segment is older than 300 ms
    deadline = time.monotonic() + 15
    while watermarks(b, topic)[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert watermarks(b, topic) == (1, 2)
