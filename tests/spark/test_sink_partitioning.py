"""Spark writes through both deliveries put a key in Kafka's default (murmur2) partition."""

from __future__ import annotations

from typing import Any

import pytest

from strom.spark.batch_encode import key_partition
from tests.spark.conftest import create_topic, unique

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def partitions_by_key(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[bytes, int]:
    """key -> partition of every record, read back with confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "partition-check", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: dict[bytes, int] = {}
    empty = 0
    while len(found) < expected and empty < 10:
        msgs = [m for m in c.consume(10_000, timeout=1.0) if m.error() is None]
        empty = 0 if msgs else empty + 1
        found.update((m.key(), m.partition()) for m in msgs)
    c.close()
    return found


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_keyed_rows_land_in_murmur2_partitions(spark: Any, bootstrap: str, delivery: str) -> None:
    topic = create_topic(bootstrap, unique("sink-murmur2"), 6)
    df = spark.range(3000).selectExpr("concat('user-', cast(id as string)) as key", "cast(id as string) as value")
    (df.write.format("strom").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
       .option("delivery", delivery).mode("append").save())
    found = partitions_by_key(bootstrap, topic, 6, 3000)
    assert len(found) == 3000
    assert all(p == key_partition(k, 6) for k, p in found.items())


def test_a_row_over_max_message_bytes_fails_the_write_clearly(spark: Any, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("sink-too-large"), 1)
    df = spark.range(1).selectExpr("repeat('x', 1200000) as value")
    with pytest.raises(Exception, match=rf"{topic}-0.*MESSAGE_TOO_LARGE"):
        df.write.format("strom").option("kafka.bootstrap.servers", bootstrap).option("topic", topic) \
            .mode("append").save()
