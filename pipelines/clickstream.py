"""The demo Structured Streaming pipeline: click events from Strom to windows and sessions.

Three queries share one SparkSession, each with its own checkpoint:

* ``dead-letters``: records that are not valid click JSON go, untouched, to the
  ``clicks-dlq`` topic with headers saying why and where they came from (streaming sink).
* ``page-views``: views per page per 1-minute event-time window, with a watermark; each
  closed window goes to the ``page-views`` topic and to Parquet.
* ``user-sessions``: sessions per user (session windows with a gap); each closed session
  goes to the ``user-sessions`` topic and to Parquet.

Every topic is written with ``delivery=exactly-once``: each micro-batch goes out in Kafka
transactions, so a consumer reading with ``isolation.level=read_committed`` sees every
dead letter, closed window and session once, even across crashes and restarts.

Run it with ``python pipelines/clickstream.py --bootstrap-server HOST:PORT`` or through
``spark-submit --master spark://HOST:7077 pipelines/clickstream.py ...``. Ctrl-C stops the
queries cleanly; running it again resumes from the checkpoints under ``--output-dir``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from strom.spark.environment import prepare_spark_environment

INPUT_TOPIC = "clicks"
DLQ_TOPIC = "clicks-dlq"
PAGE_VIEWS_TOPIC = "page-views"
SESSIONS_TOPIC = "user-sessions"

def quiet_spark_env(output_dir: Path) -> None:
    """Spark reads these before the JVM starts; keep the console for our progress lines."""
    prepare_spark_environment(output_dir / "spark-conf")


def click_schema() -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("event_id", StringType()),
            StructField("user", StringType()),
            StructField("page", StringType()),
            StructField("action", StringType()),
            StructField("referrer", StringType()),
            StructField("ts", LongType()),
        ]
    )


def plural(count: int, noun: str) -> str:
    """`1 click`, `2 clicks`: progress lines read as sentences."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


class Reporter:
    """Collects what the queries emit and prints one progress line at a time."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.lock = threading.Lock()
        # page-views rows are one per (window, page): the windows are counted by their bounds,
        # in a set so that a replayed batch does not count a window twice.
        self.windows: set[tuple[Any, Any]] = set()
        self.emitted: dict[str, int] = {"page-views": 0, "user-sessions": 0}

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)

    def windows_closed(self, rows: list[Any]) -> None:
        by_window: dict[Any, list[Any]] = {}
        for r in rows:
            by_window.setdefault((r.window_start, r.window_end), []).append(r)
        with self.lock:
            self.emitted["page-views"] += len(rows)
            self.windows.update(by_window)
        for (start, end), items in sorted(by_window.items()):
            top = sorted(items, key=lambda r: (-r.views, r.page))[:5]
            pages = ", ".join(f"{r.page} {r.views}" for r in top)
            total = sum(r.views for r in items)
            self.say(f"  window {start:%H:%M}-{end:%H:%M} closed: {plural(total, 'view')} on "
                     f"{plural(len(items), 'page')}; top: {pages}")

    def sessions_closed(self, rows: list[Any]) -> None:
        with self.lock:
            self.emitted["user-sessions"] += len(rows)
        if rows:
            longest = max(rows, key=lambda r: r.clicks)
            self.say(
                f"  {plural(len(rows), 'session')} closed; longest: {longest.user} {plural(longest.clicks, 'click')} "
                f"over {longest.duration_s:.0f}s"
            )

    def progress(self, queries: list[Any]) -> None:
        parts = []
        for q in queries:
            p = q.lastProgress
            if not p:
                parts.append(f"{q.name}: starting")
                continue
            rate = p.get("processedRowsPerSecond") or 0.0
            item = f"{q.name}: batch {p['batchId']} {plural(p['numInputRows'], 'row')} {rate:.0f}/s"
            wm = (p.get("eventTime") or {}).get("watermark")
            if wm and not wm.startswith("1970"):
                item += f" wm {wm[11:19]}"
            dl = (p.get("observedMetrics") or {}).get("dead_letters")
            if dl:
                item += f" dlq+{dl['rows']}"
            parts.append(item)
        with self.lock:
            emitted = (f"closed windows {len(self.windows)} ({plural(self.emitted['page-views'], 'page-view row')}), "
                       f"sessions {self.emitted['user-sessions']}")
        self.say(f"[{datetime.now():%H:%M:%S}] " + " | ".join(parts) + f" | {emitted}")


def build_queries(
    spark: Any,
    bootstrap: str,
    output_dir: Path,
    *,
    available_now: bool = False,
    trigger_interval: str = "2 seconds",
    watermark: str = "30 seconds",
    window: str = "1 minute",
    session_gap: str = "30 seconds",
    reporter: Reporter | None = None,
    max_offsets_per_trigger: int | None = None,
) -> list[Any]:
    """Start the three queries; returns them (already running)."""
    from pyspark.sql import functions as F

    import strom.spark

    strom.spark.register(spark)
    reporter = reporter or Reporter(quiet=True)
    ckpt = output_dir / "checkpoints"
    parquet = output_dir / "parquet"

    reader = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", INPUT_TOPIC)
        .option("startingOffsets", "earliest")
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    raw = reader.load()
    parsed = raw.withColumn("click", F.from_json(F.col("value").cast("string"), click_schema()))
    problem = (
        F.when(F.col("click").isNull(), F.lit("unparseable JSON"))
        .when(F.col("click.user").isNull(), F.lit("missing or invalid field: user"))
        .when(F.col("click.page").isNull(), F.lit("missing or invalid field: page"))
        .when(F.col("click.ts").isNull(), F.lit("missing or invalid field: ts"))
    )
    checked = parsed.withColumn("problem", problem)

    def trig(w: Any) -> Any:
        return w.trigger(availableNow=True) if available_now else w.trigger(processingTime=trigger_interval)

    dead = (
        checked.where(F.col("problem").isNotNull())
        .select(
            "key",
            "value",
            F.array(
                F.struct(F.lit("error").alias("key"), F.col("problem").cast("binary").alias("value")),
                F.struct(F.lit("source.topic").alias("key"), F.col("topic").cast("binary").alias("value")),
                F.struct(F.lit("source.partition").alias("key"), F.col("partition").cast("string").cast("binary").alias("value")),
                F.struct(F.lit("source.offset").alias("key"), F.col("offset").cast("string").cast("binary").alias("value")),
            ).alias("headers"),
        )
        .observe("dead_letters", F.count(F.lit(1)).alias("rows"))
    )
    dlq_query = trig(
        dead.writeStream.queryName("dead-letters")
        .format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", DLQ_TOPIC)
        .option("delivery", "exactly-once")
        .option("checkpointLocation", str(ckpt / "dead-letters"))
    ).start()

    clicks = (
        checked.where(F.col("problem").isNull())
        .select("click.*")
        .withColumn("event_time", F.timestamp_millis(F.col("ts")))
        .withWatermark("event_time", watermark)
    )

    page_views = (
        clicks.groupBy(F.window("event_time", window).alias("w"), "page")
        .agg(F.count(F.lit(1)).alias("views"))
        .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "page", "views")
    )
    sessions = (
        clicks.groupBy(F.session_window("event_time", session_gap).alias("s"), "user")
        .agg(
            F.count(F.lit(1)).alias("clicks"),
            F.size(F.collect_set("page")).alias("distinct_pages"),
            F.min("event_time").alias("first_click"),
            F.max("event_time").alias("last_click"),
        )
        .select(
            "user",
            F.col("s.start").alias("session_start"),
            F.col("s.end").alias("session_end"),
            "clicks",
            "distinct_pages",
            (F.col("last_click").cast("double") - F.col("first_click").cast("double")).alias("duration_s"),
        )
    )

    def sink_both(name: str, topic: str, key_col: str, on_rows: Any) -> Any:
        def write(df: Any, batch_id: int) -> None:
            df = df.persist()
            try:
                rows = df.collect()  # closed windows/sessions only: small
                if not rows:
                    return
                # One directory per batch, overwritten on replay: the Parquet copy stays exact.
                df.write.mode("overwrite").parquet(str(parquet / name / f"batch={batch_id:06d}"))
                # Exactly once in the topic too: the write's tasks see this query's id and batch id,
                # so a replayed batch skips the partitions whose transaction already committed.
                (
                    df.select(
                        F.col(key_col).cast("string").alias("key"),
                        F.to_json(F.struct(*[F.col(c) for c in df.columns])).alias("value"),
                    )
                    .write.format("strom")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("topic", topic)
                    .option("delivery", "exactly-once")
                    .mode("append")
                    .save()
                )
                on_rows(rows)
            finally:
                df.unpersist()

        return write

    pv_query = trig(
        page_views.writeStream.queryName("page-views")
        .outputMode("append")
        .foreachBatch(sink_both("page-views", PAGE_VIEWS_TOPIC, "page", reporter.windows_closed))
        .option("checkpointLocation", str(ckpt / "page-views"))
    ).start()
    sess_query = trig(
        sessions.writeStream.queryName("user-sessions")
        .outputMode("append")
        .foreachBatch(sink_both("user-sessions", SESSIONS_TOPIC, "user", reporter.sessions_closed))
        .option("checkpointLocation", str(ckpt / "user-sessions"))
    ).start()
    return [dlq_query, pv_query, sess_query]


def ensure_output_topics(bootstrap: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from click_generator import ensure_topics

    ensure_topics(bootstrap, {INPUT_TOPIC: 3, DLQ_TOPIC: 1, PAGE_VIEWS_TOPIC: 1, SESSIONS_TOPIC: 1})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Strom click-stream demo pipeline (PySpark Structured Streaming).")
    ap.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    ap.add_argument("--output-dir", default="demo-output", help="checkpoints and Parquet go here")
    ap.add_argument("--master", default=None, help="Spark master; spark-submit's --master wins when set")
    ap.add_argument("--available-now", action="store_true", help="process what is there, then exit")
    ap.add_argument("--progress-interval", type=float, default=5.0)
    ap.add_argument("--watermark", default="30 seconds")
    ap.add_argument("--session-gap", default="30 seconds")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    output_dir = Path(args.output_dir).resolve()
    quiet_spark_env(output_dir)
    from pyspark.sql import SparkSession

    ensure_output_topics(args.bootstrap_server)
    builder = (
        SparkSession.builder.appName("strom-clickstream")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.streaming.stopTimeout", "60s")
    )
    if args.master:
        builder = builder.master(args.master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    reporter = Reporter(quiet=args.quiet)
    reporter.say(
        f"clickstream: reading '{INPUT_TOPIC}' from {args.bootstrap_server}; output under {output_dir} "
        f"(master {spark.sparkContext.master})"
    )
    stopping = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    queries = build_queries(
        spark,
        args.bootstrap_server,
        output_dir,
        available_now=args.available_now,
        watermark=args.watermark,
        session_gap=args.session_gap,
        reporter=reporter,
    )
    status = 0
    try:
        next_report = time.monotonic() + args.progress_interval
        while not stopping.is_set() and any(q.isActive for q in queries):
            time.sleep(0.2)
            failed = [q for q in queries if not q.isActive and q.exception() is not None]
            if failed:
                for q in failed:
                    print(f"query {q.name} failed: {q.exception()}", file=sys.stderr)
                status = 1
                break
            if time.monotonic() >= next_report:
                reporter.progress(queries)
                next_report = time.monotonic() + args.progress_interval
    finally:
        reporter.say("clickstream: stopping queries (progress is checkpointed; rerun to resume)")
        for q in queries:
            # Stop between triggers when possible: interrupting a running micro-batch is safe
            # (it is replayed from the checkpoint) but noisy.
            deadline = time.monotonic() + 30
            while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < deadline:
                time.sleep(0.05)
            try:
                q.stop()
            except Exception as exc:  # stopping mid-batch may report the interrupted batch
                print(f"query {q.name} stop: {exc}", file=sys.stderr)
        reporter.progress(queries)
        spark.stop()
    reporter.say(f"clickstream: stopped at {datetime.now(UTC):%H:%M:%S} UTC")
    return status


if __name__ == "__main__":
    sys.exit(main())
