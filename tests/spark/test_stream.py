"""Streaming reads: checkpoint restart, admission control, data loss, new topics/partitions."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import (
    admin,
    create_topic,
    produce_values,
    strom_reader,
    unique,
    wait_for_partitions,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def wait_until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def batch_sizes(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def test_restart_from_checkpoint_no_loss_no_duplicates(spark: Any, bootstrap: str, workdir: Path) -> None:
    topic = create_topic(bootstrap, unique("restart"), 3)
    produce_values(bootstrap, topic, 3, 600)
    out, ckpt = str(workdir / "out"), str(workdir / "ckpt")

    def start(trigger: dict[str, Any]) -> Any:
        df = strom_reader(
            spark, bootstrap, stream=True, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="150"
        )
        return (
            df.selectExpr("partition", "offset", "cast(value as string) as value")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ckpt)
            .trigger(**trigger)
            .start()
        )

    q = start({"processingTime": "200 milliseconds"})
    try:
        wait_until(lambda: sum(batch_sizes(q)) >= 300, 90, "two batches")
        produce_values(bootstrap, topic, 3, 300, start=600)  # arrives while the query runs
    finally:
        q.stop()  # mid-stream: some batches may be planned but not committed
    first_run = sum(batch_sizes(q))
    assert 300 <= first_run < 900
    produce_values(bootstrap, topic, 3, 300, start=900)  # arrives while the query is stopped

    q = start({"availableNow": True})
    assert q.awaitTermination(120)
    assert q.exception() is None
    got = spark.read.parquet(out)
    stats = got.selectExpr("count(*) as n", "count(distinct partition, offset) as d", "count(distinct value) as v").first()
    assert (stats.n, stats.d, stats.v) == (1200, 1200, 1200)


def test_max_offsets_per_trigger_splits_batches(spark: Any, bootstrap: str, workdir: Path) -> None:
    topic = create_topic(bootstrap, unique("rate"), 3)
    produce_values(bootstrap, topic, 3, 250)
    q = (
        strom_reader(spark, bootstrap, stream=True, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="100")
        .writeStream.format("noop")
        .option("checkpointLocation", str(workdir / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120)
    assert batch_sizes(q) == [100, 100, 50]
    # Each batch's end offsets advance every partition in proportion to its lag.
    ends = [json.loads(p["sources"][0]["endOffset"]) if isinstance(p["sources"][0]["endOffset"], str)
            else p["sources"][0]["endOffset"] for p in q.recentProgress if p["numInputRows"] > 0]
    firsts = ends[0][topic]
    assert sorted(firsts.values()) == [33, 33, 34]


def _delete_records(bootstrap: str, topic: str, partitions: int, before: int) -> None:
    from confluent_kafka import TopicPartition

    client = admin(bootstrap)
    fs = client.delete_records([TopicPartition(topic, p, before) for p in range(partitions)], request_timeout=30)
    for f in fs.values():
        f.result(timeout=30)


def test_fail_on_data_loss_both_ways(spark: Any, bootstrap: str, workdir: Path) -> None:
    topic = create_topic(bootstrap, unique("loss"), 2)
    produce_values(bootstrap, topic, 2, 40)  # offsets 0..19 in each partition
    ckpt, out = str(workdir / "ckpt"), str(workdir / "out")

    def run(fail: str) -> Any:
        q = (
            strom_reader(spark, bootstrap, stream=True, subscribe=topic, startingOffsets="earliest", failOnDataLoss=fail)
            .selectExpr("partition", "offset")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        try:
            q.awaitTermination(120)
        except Exception:  # the failure is also kept in q.exception()
            pass
        return q

    q = run("true")
    assert q.exception() is None and sum(batch_sizes(q)) == 40
    produce_values(bootstrap, topic, 2, 40, start=40)  # offsets 20..39
    _delete_records(bootstrap, topic, 2, 30)  # 20..29 vanish before the query sees them

    q = run("true")
    assert q.exception() is not None
    assert "failOnDataLoss" in str(q.exception())

    q = run("false")
    assert q.exception() is None
    rows = spark.read.parquet(out).where("offset >= 20").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in range(2) for o in range(30, 40)]

    # Batch reads apply the same rule.
    spec = json.dumps({topic: {"0": 0, "1": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        strom_reader(spark, bootstrap, subscribe=topic, startingOffsets=spec).collect()
    assert strom_reader(spark, bootstrap, subscribe=topic, startingOffsets=spec, failOnDataLoss="false").count() == 20


def test_subscribe_pattern_picks_up_new_topics_and_partitions(spark: Any, bootstrap: str, workdir: Path) -> None:
    from confluent_kafka.admin import NewPartitions

    prefix = unique("pat")
    first = create_topic(bootstrap, f"{prefix}-a", 1)
    produce_values(bootstrap, first, 1, 10)
    name = prefix.replace("-", "_")
    q = (
        strom_reader(spark, bootstrap, stream=True, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
        .selectExpr("topic", "partition", "offset")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(workdir / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def count(where: str) -> int:
        return spark.sql(f"select count(*) from {name} where {where}").first()[0]

    try:
        wait_until(lambda: count("true") == 10, 90, "first topic")
        second = create_topic(bootstrap, f"{prefix}-b", 2)
        produce_values(bootstrap, second, 2, 20)
        wait_until(lambda: count(f"topic = '{second}'") == 20, 90, "newly matching topic")
        client = admin(bootstrap)
        for f in client.create_partitions([NewPartitions(first, 2)]).values():
            f.result(timeout=30)
        wait_for_partitions(bootstrap, first, 2)
        from tests.spark.conftest import produce

        produce(bootstrap, first, ((None, b"x", 1, None) for _ in range(5)))
        wait_until(lambda: count(f"topic = '{first}' and partition = 1") == 5, 90, "new partition")
        assert q.exception() is None
    finally:
        q.stop()
    assert count("true") == 35
    assert spark.sql(f"select count(distinct topic, partition, offset) from {name}").first()[0] == 35
