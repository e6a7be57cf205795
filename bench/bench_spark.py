"""Throughput of the strom Spark source and sink next to a plain confluent-kafka loop.

Prints one JSON object. Every figure comes from the same run on the same data:
``plain_producer`` / ``plain_consumer`` are single-process confluent-kafka loops; the
``spark_*`` figures go through the data source on a local[N] SparkSession.

    python bench/bench_spark.py                     # 1,000,000 x 1 KiB, own broker
    python bench/bench_spark.py --records 100000 --bootstrap-server 127.0.0.1:9092
    python bench/bench_spark.py --sink-only         # the sink: exactly-once next to at-least-once

The sink is measured both ways in every run: ``delivery=at-least-once`` (idempotent
producer) and ``delivery=exactly-once`` (one transaction per task), as a batch write and
as a streaming copy src -> dst in ``--micro-batches`` micro-batches.

This machine is noisy, so each plain-client figure alternates with the Spark figures it is
compared with, round after round (``--source-rounds``, ``--rounds``), and the headline figures
are medians; every round's figure is printed too. ``STROM_NATIVE=0`` measures the pure-Python
record paths instead of the C kernels.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=30).values():
        f.result(timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        t = admin.list_topics(topic=name, timeout=10).topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        time.sleep(0.1)


def plain_produce(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "enable.idempotence": True, "queue.buffering.max.kbytes": 256 * 1024})
    value = b"x" * size
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(300) == 0
    return records / (time.perf_counter() - t0)


def plain_consume(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-plain", "enable.auto.commit": False,
                  "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                  "queued.max.messages.kbytes": 256 * 1024,
                  # the source uses the same setting: without it librdkafka idles in 1 s back-offs
                  "fetch.queue.backoff.ms": 10})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    t0 = time.perf_counter()
    seen = 0
    total_bytes = 0
    while seen < records:
        for m in c.consume(10_000, timeout=1.0):
            if m.error() is None:
                seen += 1
                total_bytes += len(m.value())  # touch the payload, as a real consumer would
    elapsed = time.perf_counter() - t0
    c.close()
    return records / elapsed


def spark_session(cores: int, tmp: Path) -> Any:
    from pyspark.sql import SparkSession

    from strom.spark.environment import prepare_spark_environment

    prepare_spark_environment(tmp / "conf")

    import strom.spark

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "3g")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.local.dir", str(tmp / "local"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    strom.spark.register(spark)
    return spark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024, help="value bytes")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--cores", type=int, default=2, help="local[N] Spark cores")
    ap.add_argument("--bootstrap-server", default=None, help="use this broker instead of starting one")
    ap.add_argument("--sink-only", action="store_true", help="skip the source figures")
    ap.add_argument("--source-only", action="store_true", help="skip the sink figures")
    ap.add_argument("--source-rounds", type=int, default=3,
                    help="alternating rounds of plain consumer / batch read / AvailableNow (medians reported)")
    ap.add_argument("--micro-batches", type=int, default=10, help="micro-batches of the streaming sink copy")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of the sink batch writes")
    args = ap.parse_args()

    broker = None
    tmp = Path(tempfile.mkdtemp(prefix="strom-bench-spark-"))
    if args.bootstrap_server is None:
        sys.path.insert(0, str(ROOT))
        from tests.support.broker import BrokerProcess

        (tmp / "broker").mkdir()
        broker = BrokerProcess(tmp / "broker").start()
        bootstrap = broker.bootstrap
    else:
        bootstrap = args.bootstrap_server
    try:
        n, parts = args.records, args.partitions
        src = f"bench-spark-src-{uuid.uuid4().hex[:6]}"
        dst = f"bench-spark-dst-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, src, parts)
        create_topic(bootstrap, dst, parts)
        result: dict[str, Any] = {"records": n, "value_bytes": args.size, "partitions": parts,
                                  "spark_cores": args.cores, "broker": "external" if broker is None else "strom"}
        result["plain_producer_rows_per_s"] = round(plain_produce(bootstrap, src, n, args.size, parts))  # loads src
        spark = spark_session(args.cores, tmp)
        opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": src}
        # Warm-up: Python workers and the JVM's first job cost seconds that are not throughput.
        spark.read.format("strom").options(**opts).load().limit(10).collect()

        if not args.sink_only:
            # The plain consumer and the two Spark reads alternate, round after round, on the same
            # data; medians are the figures (this machine is noisy), every round is kept too.
            rounds: dict[str, list[int]] = {"plain_consumer": [], "spark_batch_read": [],
                                            "spark_stream_available_now": [],
                                            "spark_stream_available_now_addbatch": []}
            for r in range(args.source_rounds):
                rounds["plain_consumer"].append(round(plain_consume(bootstrap, src, n, parts)))
                t0 = time.perf_counter()
                spark.read.format("strom").options(**opts).load().write.format("noop").mode("overwrite").save()
                rounds["spark_batch_read"].append(round(n / (time.perf_counter() - t0)))
                t0 = time.perf_counter()
                q = (
                    spark.readStream.format("strom").options(**opts).option("startingOffsets", "earliest").load()
                    .writeStream.format("noop").option("checkpointLocation", str(tmp / f"ckpt-read-{r}"))
                    .trigger(availableNow=True).start()
                )
                q.awaitTermination()
                wall = time.perf_counter() - t0
                add_batch = sum(p["durationMs"].get("addBatch", 0) for p in q.recentProgress) / 1000
                rounds["spark_stream_available_now"].append(round(n / wall))
                if add_batch:
                    rounds["spark_stream_available_now_addbatch"].append(round(n / add_batch))
            for name, values in rounds.items():
                result[f"{name}_rows_per_s"] = round(statistics.median(values)) if values else None
                result[f"{name}_rounds_rows_per_s"] = values
            plain = result["plain_consumer_rows_per_s"]
            result["batch_read_share_of_plain_consumer"] = round(result["spark_batch_read_rows_per_s"] / plain, 2)
            result["available_now_share_of_plain_consumer"] = round(
                result["spark_stream_available_now_rows_per_s"] / plain, 2)
            result["source_vs_plain_consumer"] = round(plain / result["spark_batch_read_rows_per_s"], 2)
        if args.source_only:
            spark.stop()
            print(json.dumps(result, indent=2))
            return

        data = spark.range(n).selectExpr("cast(id as string) as key", f"repeat('x', {args.size}) as value")
        data = data.repartition(args.cores).cache()
        data.count()
        # Warm-up: the first write job of a session pays for Python write workers; without it the
        # mode measured first looks slower.
        for delivery in ("at-least-once", "exactly-once"):
            data.limit(1000).write.format("strom").option("kafka.bootstrap.servers", bootstrap) \
                .option("topic", dst).option("delivery", delivery).mode("append").save()
        # The plain producer and both sink modes alternate over --rounds rounds, each into a fresh
        # topic; medians are the figures: run order and the broker's state (segment rolls, page
        # cache) otherwise decide which one "wins".
        sink_rounds: dict[str, list[int]] = {"plain_producer": [], "spark_sink_at_least_once": [],
                                             "spark_sink_exactly_once": []}
        for _ in range(args.rounds):
            topic = f"bench-spark-plain-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic, parts)
            sink_rounds["plain_producer"].append(round(plain_produce(bootstrap, topic, n, args.size, parts)))
            for delivery in ("at-least-once", "exactly-once"):
                name = delivery.replace("-", "_")
                topic = f"bench-spark-{name}-{uuid.uuid4().hex[:6]}"
                create_topic(bootstrap, topic, parts)
                t0 = time.perf_counter()
                data.write.format("strom").option("kafka.bootstrap.servers", bootstrap).option("topic", topic) \
                    .option("delivery", delivery).mode("append").save()
                sink_rounds[f"spark_sink_{name}"].append(round(n / (time.perf_counter() - t0)))
                written = spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap) \
                    .option("subscribe", topic).option("kafka.isolation.level", "read_committed").load().count()
                assert written == n, (delivery, written, n)
        for name, values in sink_rounds.items():
            result[f"{name}_rows_per_s"] = round(statistics.median(values))
            result[f"{name}_rounds_rows_per_s"] = values
        result["sink_share_of_plain_producer"] = round(
            result["spark_sink_at_least_once_rows_per_s"] / result["plain_producer_rows_per_s"], 2)
        result["sink_exactly_once_share_of_plain_producer"] = round(
            result["spark_sink_exactly_once_rows_per_s"] / result["plain_producer_rows_per_s"], 2)
        result["spark_sink_rows_per_s"] = result["spark_sink_at_least_once_rows_per_s"]  # earlier runs' name
        for delivery in ("at-least-once", "exactly-once"):
            name = delivery.replace("-", "_")
            topic = f"bench-spark-stream-{name}-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic, parts)
            t0 = time.perf_counter()
            q = (
                spark.readStream.format("strom").options(**opts).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(max(1, n // args.micro_batches))).load()
                .selectExpr("key", "value")
                .writeStream.format("strom").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
                .option("delivery", delivery).option("checkpointLocation", str(tmp / f"ckpt-{name}"))
                .trigger(availableNow=True).start()
            )
            q.awaitTermination()
            result[f"spark_stream_copy_{name}_rows_per_s"] = round(n / (time.perf_counter() - t0))
        result["sink_exactly_once_vs_at_least_once"] = round(
            result["spark_sink_exactly_once_rows_per_s"] / result["spark_sink_at_least_once_rows_per_s"], 2)
        result["stream_copy_exactly_once_vs_at_least_once"] = round(
            result["spark_stream_copy_exactly_once_rows_per_s"]
            / result["spark_stream_copy_at_least_once_rows_per_s"], 2)
        spark.stop()
        print(json.dumps(result, indent=2))
    finally:
        if broker is not None:
            broker.close()


if __name__ == "__main__":
    main()
