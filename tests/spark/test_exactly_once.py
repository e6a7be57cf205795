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

from tests.spark.conftest import build_session, create_topic, produce_values, strom_reader, unique

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
    got = committed_values(spark, bootstrap, dst)
    assert set(got) == set(expected())
    if exactly_once:
        assert got == expected()
    else:
        assert duplicates(got) >= 50  # partition 0 of batch 2, three attempts and the replay


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
