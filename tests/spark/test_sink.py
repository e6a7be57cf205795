"""Sink round trips: stream -> topic -> read back, with keys, headers and explicit partitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import create_topic, produce, strom_reader, unique

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_stream_sink_round_trip_keys_headers_partitions(spark: Any, bootstrap: str, workdir: Path) -> None:
    src = create_topic(bootstrap, unique("sink-src"), 2)
    dst = create_topic(bootstrap, unique("sink-dst"), 3)
    produce(
        bootstrap,
        src,
        ((f"k{i}".encode(), f"{i}".encode(), i % 2, [("n", str(i).encode())]) for i in range(300)),
    )
    stream = strom_reader(spark, bootstrap, stream=True, subscribe=src, startingOffsets="earliest", includeHeaders="true")
    out = stream.selectExpr(
        "key",
        "concat(cast(value as string), '!') as value",
        "cast(cast(value as string) as int) % 3 as partition",
        "array_union(headers, array(named_struct('key', 'src', 'value', cast(topic as binary)))) as headers",
    )
    q = (
        out.writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("checkpointLocation", str(workdir / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120)
    assert q.exception() is None
    back = strom_reader(spark, bootstrap, subscribe=dst, includeHeaders="true").collect()
    assert len(back) == 300
    for r in back:
        i = int(bytes(r.value).decode().rstrip("!"))
        assert bytes(r.value) == f"{i}!".encode()
        assert bytes(r.key) == f"k{i}".encode()
        assert r.partition == i % 3
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("n", str(i).encode()), ("src", src.encode())]
    per_part = sorted(r.offset for r in back if r.partition == 0)
    assert per_part == list(range(100))


def test_batch_sink_topic_column_and_string_values(spark: Any, bootstrap: str) -> None:
    a = create_topic(bootstrap, unique("sink-a"), 1)
    b = create_topic(bootstrap, unique("sink-b"), 1)
    rows = [(a if i % 2 else b, f"key{i}", f"value{i}") for i in range(50)]
    df = spark.createDataFrame(rows, "topic string, key string, value string")
    df.write.format("strom").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    got_a = strom_reader(spark, bootstrap, subscribe=a).selectExpr("cast(key as string) k", "cast(value as string) v")
    got_b = strom_reader(spark, bootstrap, subscribe=b).selectExpr("cast(key as string) k", "cast(value as string) v")
    assert sorted(tuple(r) for r in got_a.collect()) == sorted((k, v) for t, k, v in rows if t == a)
    assert got_b.count() == 25
