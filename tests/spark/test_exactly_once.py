"""Exactly-once sink and read_committed source against a real broker with transactions.

Failures are injected with the sink's ``failAfterWriteForTesting`` option: a task fails
right after its rows are durable (committed, or flushed at least once) and before Spark
hears of it, which is the window where at-least-once delivery duplicates. Every scenario
also runs without ``delivery=exactly-once`` to show the duplicate detector does see them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import admin, build_session, create_topic, produce_values, strom_reader, unique

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 400
COMMITTED = {"kafka.isolation.level": "read_committed"}


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """local[2,3]: up to 3 attempts per task, so an injected task failure is retried as on a cluster."""
    session = build_session("local[2,3]", tmp_path_factory.mktemp("spark-eo"))
    try:
        yield session
    finally:
        for q in session.streams.active:
            q.stop()
        session.stop()


def committed_values(spark: Any, bootstrap: str, topic: str) -> Counter[str]:
    rows = strom_reader(spark, bootstrap, subscribe=topic, **COMMITTED).selectExpr("cast(value as string) v").collect()
    return Counter(r.v for r in rows)


def duplicates(got: Counter[str]) -> int:
    return sum(n - 1 for n in got.values() if n > 1)


def expected() -> Counter[str]:
    return Counter(f"v{i}" for i in range(ROWS))


def copy_query(
    spark: Any, bootstrap: str, src: str, dst: str, ckpt: Path, exactly_once: bool, fault: dict[str, int] | None
) -> Any:
    """src -> dst in micro-batches of 100 rows (two source partitions, so two write tasks each)."""
    w = (
        strom_reader(spark, bootstrap, stream=True, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger="100")
        .selectExpr("key", "value")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("checkpointLocation", str(ckpt))
        .option("delivery", "exactly-once" if exactly_once else "at-least-once")
    )
    if fault is not None:
        w = w.option("failAfterWriteForTesting", json.dumps(fault))
    return w.trigger(availableNow=True).start()


def assert_delivered(spark: Any, bootstrap: str, dst: str, exactly_once: bool, at_least_once_duplicates: int,
                     exact_count: bool = False) -> None:
    """Nothing lost either way; no duplicate with exactly-once, and the duplicates the detector must see
    without it (``exact_count``: exactly that many, else at least)."""
    got = committed_values(spark, bootstrap, dst)
    assert set(got) == set(expected())
    if exactly_once:
        assert got == expected()
    elif exact_count:
        assert duplicates(got) == at_least_once_duplicates
    else:
        assert duplicates(got) >= at_least_once_duplicates


def run_to_end(q: Any) -> BaseException | None:
    try:
        q.awaitTermination(180)
    except Exception:  # noqa: BLE001 - kept in q.exception() too
        pass
    return q.exception()


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_task_retried_after_commit(spark: Any, bootstrap: str, workdir: Path, exactly_once: bool) -> None:
    """Every task of batch 1 fails once after its rows are durable; Spark retries it."""
    src = create_topic(bootstrap, unique("eo-src"), 2)
    dst = create_topic(bootstrap, unique("eo-dst"), 2)
    produce_values(bootstrap, src, 2, ROWS)
    q = copy_query(spark, bootstrap, src, dst, workdir / "ckpt", exactly_once, {"batch": 1, "attempts": 1})
    assert run_to_end(q) is None
    got = committed_values(spark, bootstrap, dst)
    assert set(got) == set(expected())  # nothing lost either way
    if exactly_once:
        assert got == expected()
    else:
        assert duplicates(got) == 100  # batch 1 written twice: the detector sees it


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_query_dies_mid_batch_and_restarts(spark: Any, bootstrap: str, workdir: Path, exactly_once: bool) -> None:
    """Partition 0 of batch 2 fails on every attempt after committing: the query dies mid-batch
    (partition 1 of that batch may or may not have written). The restart from the checkpoint
    replays batch 2 with the same batch id."""
    src = create_topic(bootstrap, unique("eo-src"), 2)
    dst = create_topic(bootstrap, unique("eo-dst"), 1)
    produce_values(bootstrap, src, 2, ROWS)
    ckpt = workdir / "ckpt"
    q = copy_query(spark, bootstrap, src, dst, ckpt, exactly_once, {"batch": 2, "partition": 0, "attempts": 99})
    assert run_to_end(q) is not None  # died in batch 2
    first = committed_values(spark, bootstrap, dst)
    assert 200 < sum(first.values()) < ROWS + 200
    q = copy_query(spark, bootstrap, src, dst, ckpt, exactly_once, None)
    assert run_to_end(q) is None
    assert_delivered(spark, bootstrap, dst, exactly_once, 50)  # partition 0 of batch 2, three attempts, replay


def foreach_batch_copy(spark: Any, bootstrap: str, src: str, dst: str, ckpt: Path, exactly_once: bool,
                       die_after_batch: int | None) -> Any:
    """src -> dst through foreachBatch and a batch ``df.write`` (what the demo pipeline does). With
    ``die_after_batch`` the function raises after that batch's write: the query dies after the rows
    are in Kafka but before Spark records the batch as done, so a restart replays it."""
    def write(df: Any, batch_id: int) -> None:
        (
            df.write.format("strom")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", dst)
            .option("delivery", "exactly-once" if exactly_once else "at-least-once")
            .mode("append")
            .save()
        )
        if batch_id == die_after_batch:
            raise RuntimeError(f"injected: the driver dies after writing batch {batch_id}")

    return (
        strom_reader(spark, bootstrap, stream=True, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger="100")
        .selectExpr("key", "value")
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_foreach_batch_replayed_after_restart(spark: Any, bootstrap: str, workdir: Path, exactly_once: bool) -> None:
    """A batch write inside foreachBatch takes the streaming query's id and batch id, so a batch
    replayed after a restart finds its committed markers and writes nothing twice."""
    src = create_topic(bootstrap, unique("eo-src"), 2)
    dst = create_topic(bootstrap, unique("eo-dst"), 2)
    produce_values(bootstrap, src, 2, ROWS)
    ckpt = workdir / "ckpt-foreach"
    q = foreach_batch_copy(spark, bootstrap, src, dst, ckpt, exactly_once, die_after_batch=1)
    assert run_to_end(q) is not None  # died after writing batch 1
    assert sum(committed_values(spark, bootstrap, dst).values()) == 200  # batches 0 and 1
    q = foreach_batch_copy(spark, bootstrap, src, dst, ckpt, exactly_once, die_after_batch=None)
    assert run_to_end(q) is None
    assert_delivered(spark, bootstrap, dst, exactly_once, 100, exact_count=True)  # batch 1 again by the replay


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_batch_write_task_retry(spark: Any, bootstrap: str, exactly_once: bool) -> None:
    """df.write: one transaction per task; a retried task does not write twice."""
    dst = create_topic(bootstrap, unique("eo-batch"), 2)
    df = spark.createDataFrame([(f"v{i}",) for i in range(ROWS)], "value string").repartition(2)
    (
        df.write.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("delivery", "exactly-once" if exactly_once else "at-least-once")
        .option("failAfterWriteForTesting", json.dumps({"partition": 0, "attempts": 1}))
        .mode("append")
        .save()
    )
    got = committed_values(spark, bootstrap, dst)
    assert set(got) == set(expected())
    if exactly_once:
        assert got == expected()
    else:
        assert duplicates(got) > 0


def _transactional_input(bootstrap: str, topic: str) -> Any:
    """committed c0..c9, aborted a0..a9, committed c10..c19, then an open transaction o0..o4."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("eo-in"), "linger.ms": 5})
    p.init_transactions(60)
    for values, commit in (
        ([f"c{i}" for i in range(10)], True),
        ([f"a{i}" for i in range(10)], False),
        ([f"c{i}" for i in range(10, 20)], True),
    ):
        p.begin_transaction()
        for v in values:
            p.produce(topic, v.encode(), partition=0)
        assert p.flush(60) == 0  # in the log before the abort (an abort purges unsent records)
        if commit:
            p.commit_transaction(60)
        else:
            p.abort_transaction(60)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, f"o{i}".encode(), partition=0)
    assert p.flush(60) == 0
    return p


def test_source_read_committed(spark: Any, bootstrap: str, workdir: Path) -> None:
    topic = create_topic(bootstrap, unique("rc-src"), 1)
    open_txn = _transactional_input(bootstrap, topic)
    want = {f"c{i}" for i in range(20)}

    def values(df: Any) -> list[str]:
        return [r.v for r in df.selectExpr("cast(value as string) v").collect()]

    # Batch reads: read_committed ends at the LSO (the open transaction's first offset).
    got = values(strom_reader(spark, bootstrap, subscribe=topic, **COMMITTED))
    assert sorted(got) == sorted(want)
    dirty = values(strom_reader(spark, bootstrap, subscribe=topic))
    assert {v for v in dirty if v.startswith("a")} == {f"a{i}" for i in range(10)}

    # Streaming: offsets advance past markers and aborted records; the open transaction is
    # not read until it commits, then the next run picks it up.
    out = str(workdir / "out")

    def stream() -> Any:
        return (
            strom_reader(spark, bootstrap, stream=True, subscribe=topic, startingOffsets="earliest", **COMMITTED)
            .selectExpr("cast(value as string) v", "offset")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", str(workdir / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )

    q = stream()
    assert run_to_end(q) is None
    rows = spark.read.parquet(out).collect()
    assert sorted(r.v for r in rows) == sorted(want)
    end_offset = q.lastProgress["sources"][0]["endOffset"]
    end = (json.loads(end_offset) if isinstance(end_offset, str) else end_offset)[topic]["0"]
    # 20 committed + 10 aborted records + 3 markers come before the open transaction.
    assert end == 33

    open_txn.commit_transaction(60)
    q = stream()
    assert run_to_end(q) is None
    rows = spark.read.parquet(out).collect()
    assert sorted(r.v for r in rows) == sorted(want | {f"o{i}" for i in range(5)})
    assert sorted(r.offset for r in rows if r.v.startswith("o")) == list(range(33, 38))


DRIVER = """
import sys, time
from pathlib import Path
from strom.spark.environment import prepare_spark_environment

bootstrap, src, dst, ckpt, conf = sys.argv[1:6]
prepare_spark_environment(Path(conf), force=True)
from pyspark.sql import SparkSession
import strom.spark

spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
strom.spark.register(spark)
q = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap).option("subscribe", src)
     .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40").load()
     .selectExpr("key", "value").writeStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", dst).option("delivery", "exactly-once").option("checkpointLocation", ckpt)
     .option("failAfterWriteForTesting", '{"batch": 2, "partition": 0, "hold_ms": 120000}')
     .trigger(processingTime="0 seconds").start())
seen = -1
while True:
    p = q.lastProgress
    if p and p["batchId"] != seen:
        seen = p["batchId"]
        print("BATCH", seen, flush=True)
    time.sleep(0.02)
"""


def end_offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    """(high watermark, last stable offset) of partition 0."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    client = admin(bootstrap)
    out = []
    for iso in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        fs = client.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()}, isolation_level=iso)
        out.append(next(iter(fs.values())).result().offset)
    return out[0], out[1]


def test_driver_killed_mid_stream_and_restarted(spark: Any, bootstrap: str, workdir: Path) -> None:
    """kill -9 of the whole Spark application (driver and its local tasks) while a task of
    batch 2 has its transaction open, then a restart from the checkpoint in another
    application: the restarted task's init_transactions aborts the dead one's transaction,
    and the replayed batch skips partitions that had committed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    src = create_topic(bootstrap, unique("eo-src"), 2)
    dst = create_topic(bootstrap, unique("eo-dst"), 1)
    produce_values(bootstrap, src, 2, ROWS)
    script = workdir / "driver.py"
    script.write_text(DRIVER)
    ckpt = workdir / "ckpt"
    proc = subprocess.Popen(
        [sys.executable, str(script), bootstrap, src, dst, str(ckpt), str(workdir / "conf")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )
    open_seen = False
    try:
        deadline = time.monotonic() + 180
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("BATCH") and int(line.split()[1]) >= 1:
                break
            assert time.monotonic() < deadline, "the driver made no progress"
        # Partition 0 of batch 2 holds its transaction open (rows written, not committed): kill
        # once the output's LSO trails its high watermark.
        while time.monotonic() < deadline and proc.poll() is None:
            hw, lso = end_offsets(bootstrap, dst)
            if hw > lso:
                open_seen = True
                break
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, by process group id
        proc.wait(30)
    assert open_seen, "the driver died before batch 2 opened its transaction"
    assert end_offsets(bootstrap, dst)[1] < end_offsets(bootstrap, dst)[0]  # still open after the kill
    q = copy_query(spark, bootstrap, src, dst, ckpt, True, None)
    assert run_to_end(q) is None
    assert committed_values(spark, bootstrap, dst) == expected()
