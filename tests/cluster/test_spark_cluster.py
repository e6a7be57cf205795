"""A PySpark streaming query (format `strom` in and out) on an RF 3 cluster survives a leader kill.

Three brokers under ZooKeeper; the input and output topics are RF 3 with min.insync.replicas 2.
An idempotent acks=all producer writes sequence-numbered records before and while the query
runs; a broker leading some input partitions is killed with SIGKILL mid-run and restarted later.
The query reads with failOnDataLoss=true, so a leader change that looked like lost offsets
would fail it. Spark runs `local[2]`, where a failed task fails the query (no task retries): the
source and sink themselves must ride out the leader change.

The sink promises at-least-once delivery (src/strom/spark/sink.py): every input value must be
in the output, duplicates are allowed, and nothing else may appear there.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import build_session
from tests.support.checker import SequenceProducer, consume_topic, parse_value
from tests.support.cluster import ClusterProcess
from tests.support.replicas import IDEMPOTENT, create_topic

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(240)]

PARTITIONS = 3
ALL = {1, 2, 3}
BEFORE_QUERY = 1500  # records already in the input topic when the query starts


@pytest.fixture
def spark(tmp_path: Path) -> Iterator[Any]:
    session = build_session("local[2]", tmp_path / "spark")
    try:
        yield session
    finally:
        for query in session.streams.active:
            with contextlib.suppress(Exception):
                query.stop()
        session.stop()


def wait_until(cond: Any, timeout: float, what: str, query: Any = None) -> None:
    """Poll `cond`; stop early with the query's exception if the query died."""
    deadline = time.monotonic() + timeout
    while not cond():
        if query is not None and not query.isActive:
            raise AssertionError(f"the query stopped while waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.3)


def output_values(bootstrap: str, topic: str) -> Counter[tuple[str, int]]:
    """How many times each (producer, seq) appears in the output topic; foreign values count as ('?', -1)."""
    found: Counter[tuple[str, int]] = Counter()
    for msg in consume_topic(bootstrap, topic, timeout=60):
        found[parse_value(msg.value()) or ("?", -1)] += 1
    return found


def victim_broker(cluster: ClusterProcess, topic: str) -> int:
    """A broker leading at least one input partition, preferably not the controller (faster fail-over)."""
    leaders = {cluster.partition_state(topic, p).leader for p in range(PARTITIONS)}  # type: ignore[union-attr]
    controller = cluster.controller_id()
    return min(leaders - {controller}) if leaders - {controller} else min(leaders)


def test_streaming_query_survives_a_leader_kill_and_loses_nothing(cluster_factory, spark: Any,  # noqa: ANN001
                                                                  tmp_path: Path) -> None:
    cluster: ClusterProcess = cluster_factory(3)
    bootstrap = cluster.bootstrap  # every broker: the query must not depend on the one that dies
    src = create_topic(cluster, partitions=PARTITIONS, config={"min.insync.replicas": "2"})
    dst = create_topic(cluster, partitions=PARTITIONS, config={"min.insync.replicas": "2"})

    writer = SequenceProducer(bootstrap, src, "s", IDEMPOTENT, rate_sleep=0.004)
    writer.produce_some(BEFORE_QUERY, flush_timeout=60)
    assert writer.unflushed == 0 and not writer.errors, writer.errors[:5]

    query = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )

    def rows_in() -> int:
        """Input offsets the query has read so far (from its last progress; recentProgress is capped)."""
        progress = query.lastProgress
        if not progress or not progress["sources"]:
            return 0
        end = progress["sources"][0]["endOffset"]
        end = json.loads(end) if isinstance(end, str) else end
        return sum(int(off) for parts in (end or {}).values() for off in parts.values())

    victim = None
    try:
        wait_until(lambda: rows_in() >= BEFORE_QUERY, 90, "the query to copy the first records", query)
        writer.start()  # keeps writing through the kill and the restart
        assert writer.wait_acked(BEFORE_QUERY + 300, 60), f"only {writer.acked_count()} acked"

        victim = victim_broker(cluster, src)
        led = [p for p in range(PARTITIONS) if cluster.partition_state(src, p).leader == victim]  # type: ignore[union-attr]
        epochs = {p: cluster.partition_state(src, p).leader_epoch for p in led}  # type: ignore[union-attr]
        cluster.kill9(victim)
        for p in led:
            moved = cluster.wait_leader(src, p, not_in={victim}, timeout=60)
            assert moved.leader_epoch > epochs[p]

        # The query keeps copying new records with the victim down...
        acked_at_kill, copied_at_kill = writer.acked_count(), rows_in()
        assert writer.wait_acked(acked_at_kill + 300, 90), (
            f"the producer stalled at {writer.acked_count()} acks\n" + cluster.describe_failure("producer", 0))
        wait_until(lambda: rows_in() >= copied_at_kill + 300, 90, "progress with the victim down", query)

        # ...and after it comes back and rejoins the ISR.
        cluster.start_broker(victim)
        for p in range(PARTITIONS):
            cluster.wait_isr(src, p, ALL, timeout=60)
        copied_at_restart = rows_in()
        wait_until(lambda: rows_in() >= copied_at_restart + 300, 90, "progress after the restart", query)
    finally:
        writer.stop()
    assert writer.unflushed == 0 and not writer.errors, writer.errors[:5]
    wanted = {(a.producer, a.seq) for a in writer.acked}
    assert len(wanted) == writer.sent  # every record written was acknowledged

    try:
        wait_until(lambda: rows_in() >= len(wanted), 90, f"the query to read all {len(wanted)} records", query)
        found = output_values(bootstrap, dst)
        deadline = time.monotonic() + 60
        while not wanted <= found.keys() and time.monotonic() < deadline and query.isActive:
            time.sleep(1)
            found = output_values(bootstrap, dst)
        assert query.isActive and query.exception() is None, query.exception()
    finally:
        query.stop()
    assert query.exception() is None

    missing = sorted(wanted - found.keys())
    assert not missing, f"{len(missing)} input records never reached the output, e.g. {missing[:10]}"
    foreign = sorted(set(found) - wanted)
    assert not foreign, f"the output holds values that were never written: {foreign[:10]}"
    assert sum(found.values()) >= len(wanted)  # at least once; duplicates are allowed by the sink
