"""The `strom` sink: Arrow-based batch and streaming writers.

How rows reach the broker is a ``Delivery`` strategy:

* at least once (default, like Spark's Kafka sink): a task retried after a failure, or a
  micro-batch replayed after a crash, writes its rows again. The rows go straight from Arrow
  into record batches (strom.spark.batch_encode) sent by the task's own idempotent producer
  (strom.spark.producer), which removes the duplicates its retries would create inside one task.
* exactly once (``delivery=exactly-once``): each task writes its rows in one Kafka
  transaction and commits, in the same transaction, a marker "batch B of partition P is
  written" as the offset of a sink-private consumer group. A retried or replayed task
  fences its predecessor (InitProducerId), reads the marker and skips a batch that
  already committed. The same encoder and producer send the rows, as transactional batches
  (strom.spark.transaction). The reasoning is in docs/decisions/0012-exactly-once-spark-sink.md.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from strom.spark.errors import user_facing
from strom.spark.options import SinkOptions, StromOptionError

log = logging.getLogger("strom.spark")


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one write task reports back to the driver."""

    rows: int
    # Exactly-once: the task found its batch already committed by an earlier attempt.
    skipped: bool = False


def validate_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    """Check the DataFrame columns the way Spark's Kafka sink does, before any task starts."""
    types: dict[str, DataType] = {f.name.lower(): f.dataType for f in schema.fields}

    def check(name: str, allowed: tuple[type, ...], what: str) -> None:
        if name in types and not isinstance(types[name], allowed):
            raise StromOptionError(f"{name} attribute type must be {what}, got {types[name].simpleString()}.")

    if "value" not in types:
        raise StromOptionError("Required attribute 'value' not found in the DataFrame written to strom.")
    check("value", (StringType, BinaryType), "a string or binary")
    check("key", (StringType, BinaryType), "a string or binary")
    check("topic", (StringType,), "a string")
    check("partition", (IntegerType,), "an int")
    if "headers" in types:
        h = types["headers"]
        ok = (
            isinstance(h, ArrayType)
            and isinstance(h.elementType, StructType)
            and [f.name for f in h.elementType.fields] == ["key", "value"]
            and isinstance(h.elementType.fields[0].dataType, StringType)
            and isinstance(h.elementType.fields[1].dataType, BinaryType)
        )
        if not ok:
            raise StromOptionError(
                "headers attribute type must be array<struct<key:string,value:binary>>, "
                f"got {h.simpleString()}."
            )
    if opts.topic is None and "topic" not in types:
        raise StromOptionError(
            "Topic option required when no 'topic' attribute is present. Use the 'topic' option for setting a topic."
        )


class Delivery(Protocol):
    """How rows reach the broker: at least once, or exactly once with transactions."""

    def write(self, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage: ...

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None: ...

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None: ...


@dataclass(frozen=True)
class TaskScope:
    """Where a write task runs: Spark partition, attempt, and the micro-batch if streaming."""

    partition: int
    attempt: int
    query_id: str | None
    batch_id: int | None

    @classmethod
    def current(cls) -> TaskScope:
        """Read from the task context; a streaming query (or its foreachBatch) sets the two properties."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:  # not inside a Spark task (direct calls in tests)
            return cls(0, 0, None, None)
        query = ctx.getLocalProperty("sql.streaming.queryId")
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        return cls(ctx.partitionId(), ctx.attemptNumber(), query, int(batch) if batch is not None else None)


def _fault_matches(fault: dict[str, int], scope: TaskScope) -> bool:
    return fault.get("batch", scope.batch_id) == scope.batch_id and fault.get(
        "partition", scope.partition) == scope.partition


def _maybe_fail_for_testing(opts: SinkOptions, scope: TaskScope) -> None:
    """Option failAfterWriteForTesting: fail a task after its rows are durable, before Spark hears of it."""
    fault = opts.fail_after_write
    if fault is None or not _fault_matches(fault, scope):
        return
    if scope.attempt < fault.get("attempts", 0 if "hold_ms" in fault else 1):
        raise RuntimeError(
            f"injected failure (failAfterWriteForTesting) after writing batch {scope.batch_id} "
            f"partition {scope.partition}, attempt {scope.attempt}"
        )


def _maybe_hold_for_testing(opts: SinkOptions, scope: TaskScope) -> None:
    """failAfterWriteForTesting's ``hold_ms``: keep the transaction open (rows written, no commit) a while."""
    fault = opts.fail_after_write
    if fault is not None and "hold_ms" in fault and _fault_matches(fault, scope):
        import time

        time.sleep(fault["hold_ms"] / 1000)


def _send_batches(producer: Any, opts: SinkOptions, conf: dict[str, Any],
                  batches: Iterator[pa.RecordBatch]) -> tuple[int, str | None]:
    """Encode every Arrow batch into record batches per partition and hand them to ``producer``;
    returns (rows, topic of the first record batch)."""
    from strom.spark.batch_encode import DEFAULT_BATCH_SIZE, BatchEncoder

    encoder = BatchEncoder(
        int(conf.get("batch.size", DEFAULT_BATCH_SIZE)),
        str(conf.get("compression.type", conf.get("compression.codec", "none"))).strip().lower(),
    )
    rows = 0
    first_topic: str | None = None
    for batch in batches:
        for topic, partition, encoded in encoder.encode(batch, opts.topic, producer.partition_count):
            producer.send(topic, partition, encoded)
            if first_topic is None:
                first_topic = topic
        rows += batch.num_rows
    return rows, first_topic


class AtLeastOnceDelivery:
    """Encode the rows into record batches and send them with an idempotent producer; flush
    before the task reports success (strom.spark.batch_encode, strom.spark.producer)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        from strom.spark.client import task_client
        from strom.spark.producer import IdempotentProducer

        conf = self.opts.producer_config()
        producer = IdempotentProducer(task_client(_task_client_conf(self.opts)), conf)
        rows, _ = _send_batches(producer, self.opts, conf, batches)
        producer.flush()
        if self.opts.fail_after_write is not None:
            _maybe_fail_for_testing(self.opts, TaskScope.current())
        return SinkCommitMessage(rows=rows)

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        """Rows are already visible once each task flushed; nothing to finalise."""

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        written = sum(m.rows for m in messages if isinstance(m, SinkCommitMessage))
        log.warning(
            "strom sink: batch %s aborted; %d rows from successful tasks stay in the topic "
            "(at-least-once delivery).",
            batch_id,
            written,
        )


# How long the transactional calls may take; they retry internally (coordinator moves, etc.).
TXN_TIMEOUT_S = 120.0
MARKER = "strom-spark-sink"


def _connection_conf(opts: SinkOptions) -> dict[str, str]:
    """The user's connection settings (brokers, security), without producer-only ones."""
    return {
        k: v
        for k, v in opts.client.items()
        if k in ("bootstrap.servers", "client.id") or k.startswith(("security.", "sasl.", "ssl.", "socket.", "broker."))
    }


def _task_client_conf(opts: SinkOptions) -> dict[str, str]:
    """What the task's protocol client needs: connection and security settings, request time-out."""
    conf = _connection_conf(opts)
    if "request.timeout.ms" in opts.client:
        conf["request.timeout.ms"] = opts.client["request.timeout.ms"]
    return conf


def last_committed_batch(opts: SinkOptions, group: str) -> int | None:
    """The highest batch id a task of this transactional.id committed, or None.

    Read with require_stable (KIP-447): an offset still pending in an unfinished transaction
    makes the broker answer UNSTABLE_OFFSET_COMMIT, which is retried, instead of hiding it.
    InitProducerId has already completed or aborted any such transaction.
    """
    from strom.spark.client import task_client
    from strom.spark.transaction import fetch_committed

    committed = fetch_committed(task_client(_task_client_conf(opts)), group, int(TXN_TIMEOUT_S * 1000))
    found = [offset for offset, metadata in committed.values() if metadata.startswith(MARKER)]
    return max(found) if found else None


def transactional_id(opts: SinkOptions, scope: TaskScope, write_id: str) -> str:
    """One transactional.id per (query or write, Spark partition), stable across restarts.

    A streaming query's id is kept in its checkpoint, so a restarted query fences and
    finds the markers of its previous run. Batch writes outside a streaming query get a
    fresh id per write: exactly once there means "despite task retries and speculation".
    Without kafka.transactional.id the fixed topic is part of the id, so two writes to
    different topics inside one foreachBatch do not share markers.
    """
    base = opts.transactional_id_prefix or (f"strom-spark-{opts.topic}" if opts.topic else "strom-spark")
    return f"{base}-{scope.query_id or write_id}-{scope.partition}"


class ExactlyOnceDelivery:
    """One transaction per task, committed with a (batch, partition) marker; see the module docstring."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        # Made on the driver and pickled to every task of this write: the scope of a batch write.
        self.write_id = uuid.uuid4().hex

    def write(self, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        from strom.spark.client import task_client
        from strom.spark.producer import IdempotentProducer
        from strom.spark.transaction import TransactionManager

        opts = self.opts
        scope = TaskScope.current()
        batch_id = scope.batch_id if scope.query_id is not None and scope.batch_id is not None else 0
        txn_id = transactional_id(opts, scope, self.write_id)
        conf = opts.producer_config()
        # A fresh producer id and epoch per task: InitProducerId is what fences an older attempt
        # (a zombie) of this partition and finishes its transaction.
        txn = TransactionManager(task_client(_task_client_conf(opts)), txn_id,
                                 int(conf.get("transaction.timeout.ms", TXN_TIMEOUT_S * 1000)))
        txn.init_producer_id()
        done = last_committed_batch(opts, txn_id)
        if done is not None and done >= batch_id:
            for _ in batches:  # drain the input: Spark expects the task to consume it
                pass
            log.info("strom sink: %s batch %d already committed by an earlier attempt; skipped", txn_id, batch_id)
            _maybe_fail_for_testing(opts, scope)
            return SinkCommitMessage(rows=0, skipped=True)
        try:
            producer = IdempotentProducer(txn.client, conf, transaction=txn)
            rows, first_topic = _send_batches(producer, opts, conf, batches)
            producer.flush()
            _maybe_hold_for_testing(opts, scope)
            if rows == 0 or first_topic is None:
                txn.end(commit=False)  # nothing to show, nothing to mark
                return SinkCommitMessage(rows=0)
            marker = json.dumps({"batch": batch_id, "partition": scope.partition, "rows": rows})
            txn.send_offsets(txn_id, {(first_topic, 0): (batch_id, f"{MARKER} {marker}")})
            txn.end(commit=True)
        except BaseException:
            try:
                txn.end(commit=False)
            except Exception:  # noqa: BLE001 - fenced or fatal: the next attempt aborts it anyway
                pass
            raise
        _maybe_fail_for_testing(opts, scope)
        return SinkCommitMessage(rows=rows)

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        """Every task already committed its own transaction; nothing to finalise."""

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        log.warning(
            "strom sink: batch %s aborted; %d partitions already committed their transactions "
            "(%d rows). A restart from the checkpoint replays the batch and skips them (exactly-once).",
            batch_id,
            len(done),
            sum(m.rows for m in done),
        )


def prepare_topic(opts: SinkOptions) -> None:
    """On the driver, before any task: the fixed ``topic`` exists, or the broker creates it now
    (following its auto.create.topics.enable, logged with the partition count), or the write
    stops with what to do. Topics named by a ``topic`` column are handled the same way per task."""
    if opts.topic is None:
        return
    from strom.spark.client import TaskClient
    from strom.spark.producer import DEFAULT_DELIVERY_TIMEOUT_MS, topic_partition_count

    client = TaskClient(_task_client_conf(opts))
    try:
        topic_partition_count(client, opts.topic, DEFAULT_DELIVERY_TIMEOUT_MS / 1000, option="option 'topic'")
    finally:
        client.close()


def delivery_for(opts: SinkOptions) -> Delivery:
    """Pick the delivery strategy."""
    if opts.exactly_once:
        return ExactlyOnceDelivery(opts)
    return AtLeastOnceDelivery(opts)


class StromBatchWriter(DataSourceArrowWriter):
    """``df.write.format("strom").mode("append")``."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        validate_sink_schema(schema, options)
        self.delivery = delivery_for(options)

    @user_facing
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return self.delivery.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.delivery.commit(messages, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.delivery.abort(messages, None)


class StromStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("strom")``; commit/abort run in a fresh instance on the driver."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        validate_sink_schema(schema, options)
        self.delivery = delivery_for(options)

    @user_facing
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return self.delivery.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.delivery.commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.delivery.abort(messages, batchId)
