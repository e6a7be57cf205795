"""The Spark sink's own idempotent producer against a real broker, read back with confluent-kafka.

These drive the at-least-once delivery directly (no Spark session): Arrow batches in, records
out, with the broker killed mid-write and oversized rows.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("cramjam")

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from strom.spark.batch_encode import BatchEncoder, key_partition  # noqa: E402
from strom.spark.client import task_client  # noqa: E402
from strom.spark.errors import StromTopicNotFoundError  # noqa: E402
from strom.spark.options import parse_sink_options  # noqa: E402
from strom.spark.producer import DeliveryError, IdempotentProducer  # noqa: E402
from strom.spark.sink import AtLeastOnceDelivery  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def create_topic(bootstrap: str, partitions: int, config: dict[str, str] | None = None) -> str:
    name = f"sink-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], request_timeout=30).values():
        f.result(timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        t = admin.list_topics(topic=name, timeout=10).topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            break
        time.sleep(0.1)
    return name


def read_all(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every record of the topic, by confluent-kafka."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sink-check", "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Any] = []
        deadline = time.monotonic() + 60
        while len(out) < sum(ends.values()) and time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=1.0):
                if m.error() is None:
                    out.append(m)
        return out
    finally:
        c.close()


def write(bootstrap: str, topic: str, batches: Iterator[Any] | list[Any], **options: str) -> int:
    opts = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic, **options})
    return AtLeastOnceDelivery(opts).write(iter(batches)).rows


def test_keyed_rows_land_in_murmur2_partitions_with_headers_and_nulls(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 5)
    keys = [None if i % 7 == 0 else f"key-{i}" for i in range(2000)]
    values = [None if i % 11 == 0 else f"value-{i}".encode() for i in range(2000)]
    headers = [[{"key": "i", "value": str(i).encode()}, {"key": "n", "value": None}] if i % 3 == 0 else None
               for i in range(2000)]
    batches = [pa.record_batch({"key": pa.array(keys[s:s + 500]), "value": pa.array(values[s:s + 500], pa.binary()),
                                "headers": pa.array(headers[s:s + 500], HEADERS)}) for s in range(0, 2000, 500)]
    assert write(broker.bootstrap, topic, batches) == 2000
    got = read_all(broker.bootstrap, topic, 5)
    assert len(got) == 2000
    null_key_partitions = set()
    for m in got:
        i = int(m.headers()[0][1]) if m.headers() else None
        if m.key() is None:
            null_key_partitions.add(m.partition())
        else:
            k = m.key()
            assert m.partition() == key_partition(k, 5)
            i = int(k.decode().split("-")[1])
        if i is not None:
            assert m.value() == values[i]
            assert (m.headers() or None) == ([("i", str(i).encode()), ("n", None)] if i % 3 == 0 else None)
    # four Arrow batches: their null-key rows went to four consecutive partitions (sticky per batch)
    assert len(null_key_partitions) == 4
    assert sorted(m.key() for m in got if m.key() is not None) == sorted(k.encode() for k in keys if k)


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_writes_round_trip(broker: BrokerProcess, compression: str) -> None:
    topic = create_topic(broker.bootstrap, 2)
    values = [f"value {i} ".encode() * 20 for i in range(3000)]
    batch = pa.record_batch({"key": pa.array([str(i) for i in range(3000)]), "value": pa.array(values)})
    write(broker.bootstrap, topic, [batch], **{"kafka.compression.type": compression})
    got = read_all(broker.bootstrap, topic, 2)
    assert sorted((int(m.key()), m.value()) for m in got) == list(enumerate(values))


def test_row_larger_than_max_message_bytes_fails_the_task_clearly(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)  # max.message.bytes 1 MiB, like batch.size's 1,000,000
    batch = pa.record_batch({"value": pa.array([b"small", b"x" * 1_200_000, b"small"])})
    with pytest.raises(DeliveryError, match=rf"{topic}-0.*MESSAGE_TOO_LARGE.*1 row"):
        write(broker.bootstrap, topic, [batch])


def test_unknown_topic_is_created_by_a_broker_that_allows_it(broker: BrokerProcess,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    topic = f"auto-created-{uuid.uuid4().hex[:6]}"
    with caplog.at_level("WARNING", logger="strom.spark"):
        assert write(broker.bootstrap, topic, [pa.record_batch({"value": pa.array([b"v"] * 10)})]) == 10
    assert len(read_all(broker.bootstrap, topic, 1)) == 10
    assert f"topic '{topic}' did not exist; the broker created it with 1 partition(s)" in caplog.text


def test_unknown_topic_fails_clearly_without_auto_creation(broker_factory: Any) -> None:
    broker = broker_factory({"auto.create.topics.enable": "false"})
    with pytest.raises(StromTopicNotFoundError,
                       match="Topic 'no-such-topic-.*' .* does not exist and the broker did not create it"):
        write(broker.bootstrap, f"no-such-topic-{uuid.uuid4().hex[:6]}", [pa.record_batch({"value": pa.array([b"v"])})])


def test_explicit_partition_outside_the_topic_fails(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    batch = pa.record_batch({"value": pa.array([b"v"]), "partition": pa.array([2], pa.int32())})
    with pytest.raises(ValueError, match=rf"{topic}-2.*UNKNOWN_TOPIC_OR_PARTITION"):
        write(broker.bootstrap, topic, [batch])


@pytest.mark.slow
def test_broker_killed_mid_write_neither_loses_nor_duplicates(broker_factory: Any) -> None:
    """kill -9 and restart while requests are in flight: retried batches keep their sequences, so
    a batch the broker wrote before dying is answered DUPLICATE_SEQUENCE_NUMBER, not written twice."""
    broker = broker_factory()
    topic = create_topic(broker.bootstrap, 3)
    rows, per_batch = 60_000, 2_000
    value = b"v" * 512
    producer = IdempotentProducer(task_client({"bootstrap.servers": broker.bootstrap}), {})
    encoder = BatchEncoder(200_000)  # several requests in flight per partition
    for start in range(0, rows, per_batch):
        keys = pa.array([str(i) for i in range(start, start + per_batch)])
        batch = pa.record_batch({"key": keys, "value": pa.array([value] * per_batch)})
        for t, p, encoded in encoder.encode(batch, topic, producer.partition_count):
            producer.send(t, p, encoded)
        if start == rows // 2:  # requests are in flight now
            broker.kill9()
            broker.start()
    assert producer.flush() == rows
    assert producer.retries > 0
    got = read_all(broker.bootstrap, topic, 3)
    keys = [int(m.key()) for m in got]
    assert len(keys) == rows
    assert sorted(keys) == list(range(rows))
