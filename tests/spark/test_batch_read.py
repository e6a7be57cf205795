"""Batch reads: exact offset ranges, metadata, headers, minPartitions and option errors."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.spark.conftest import create_topic, produce, strom_reader, unique

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def topic(bootstrap: str) -> str:
    name = create_topic(bootstrap, unique("batch"), 3)
    records = []
    for i in range(90):
        headers = [("idx", str(i).encode()), ("kind", b"even" if i % 2 == 0 else b"odd")]
        records.append((f"k{i}".encode(), f"v{i}".encode(), i % 3, headers))
    records.append((None, b"no-key", 0, None))
    produce(bootstrap, name, records)
    return name


def test_offset_range_exact_rows_metadata_and_headers(spark: Any, bootstrap: str, topic: str) -> None:
    before_ms = int(time.time() * 1000) - 600_000
    df = strom_reader(
        spark,
        bootstrap,
        subscribe=topic,
        includeHeaders="true",
        startingOffsets=json.dumps({topic: {"0": 5, "1": -2, "2": 29}}),
        endingOffsets=json.dumps({topic: {"0": 12, "1": 3, "2": -1}}),
    )
    rows = df.orderBy("partition", "offset").collect()
    got = [(r.partition, r.offset) for r in rows]
    want = [(0, o) for o in range(5, 12)] + [(1, o) for o in range(0, 3)] + [(2, 29)]
    assert got == want
    for r in rows:
        i = int(r.value.decode()[1:])
        assert r.topic == topic
        assert r.partition == i % 3 and r.offset == i // 3
        assert bytes(r.key) == f"k{i}".encode()
        assert r.timestampType == 0
        assert r.timestamp.timestamp() * 1000 > before_ms
        assert [(h.key, bytes(h.value)) for h in r.headers] == [
            ("idx", str(i).encode()),
            ("kind", b"even" if i % 2 == 0 else b"odd"),
        ]


def test_full_read_schema_and_null_key(spark: Any, bootstrap: str, topic: str) -> None:
    df = strom_reader(spark, bootstrap, subscribe=topic)
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
    ]
    assert df.count() == 91
    nokey = df.where("key is null").collect()
    assert len(nokey) == 1 and bytes(nokey[0].value) == b"no-key"
    assert df.selectExpr("count(distinct partition, offset)").first()[0] == 91


def test_assign_and_min_partitions(spark: Any, bootstrap: str, topic: str) -> None:
    df = strom_reader(spark, bootstrap, assign=json.dumps({topic: [1]}), minPartitions="4")
    assert df.rdd.getNumPartitions() >= 4
    offsets = sorted(r.offset for r in df.select("offset").collect())
    assert offsets == list(range(30))


def test_subscribe_pattern_and_timestamp(spark: Any, bootstrap: str, topic: str) -> None:
    prefix = topic.split("-")[0]
    df = strom_reader(spark, bootstrap, subscribePattern=f"{prefix}-{topic.split('-')[1]}")
    assert df.count() == 91
    future = int(time.time() * 1000) + 3_600_000
    late = strom_reader(spark, bootstrap, subscribe=topic, startingTimestamp=str(future),
                        startingOffsetsByTimestampStrategy="latest")
    assert late.count() == 0
    past = strom_reader(spark, bootstrap, subscribe=topic, startingTimestamp="0")
    assert past.count() == 91


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "Exactly one of the options 'subscribe', 'subscribePattern' or 'assign'"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "Exactly one of the options"),
        ({"subscribe": "a", "kafka.interceptor.classes": "x"}, "'interceptor.classes' is not supported"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "'auto.offset.reset' is not supported"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "'enable.auto.commit' is not supported"),
        ({"subscribe": "a", "kafka.value.deserializer": "x"}, "'value.deserializer' is not supported"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "can't be 'latest' for batch queries"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, "can't be 'earliest' for batch queries"),
        ({"subscribe": "a", "startingOffsets": "{bad"}, "Option 'startingOffsets' must be"),
        ({"assign": "[1,2]"}, "Option 'assign' must be JSON"),
        ({"subscribe": "a", "minPartitions": "0"}, "Option 'minPartitions' must be >= 1"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "Option 'failOnDataLoss' must be true or false"),
    ],
)
def test_invalid_options(spark: Any, bootstrap: str, options: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)")):
        strom_reader(spark, bootstrap, **options).collect()


def test_missing_bootstrap_and_stream_only_errors(spark: Any, bootstrap: str) -> None:
    with pytest.raises(Exception, match="'kafka.bootstrap.servers' must be specified"):
        spark.read.format("strom").option("subscribe", "a").load().collect()
    with pytest.raises(Exception, match="'endingoffsets' is not supported for streaming"):
        q = (
            strom_reader(spark, bootstrap, stream=True, subscribe="a", endingOffsets="latest")
            .writeStream.format("noop").start()
        )
        try:
            q.awaitTermination(60)
        finally:
            q.stop()


def test_overwrite_refused_and_sink_schema_checked(spark: Any, bootstrap: str, topic: str) -> None:
    df = spark.createDataFrame([("a", "b")], "key string, value string")
    with pytest.raises(Exception, match="Save mode 'overwrite' is not supported"):
        df.write.format("strom").option("kafka.bootstrap.servers", bootstrap).option("topic", topic) \
            .mode("overwrite").save()
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        df.selectExpr("key").write.format("strom").option("kafka.bootstrap.servers", bootstrap) \
            .option("topic", topic).mode("append").save()
    with pytest.raises(Exception, match="Topic option required"):
        df.write.format("strom").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
