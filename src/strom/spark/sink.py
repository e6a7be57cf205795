"""The `strom` sink: Arrow-based batch and streaming writers.

How rows reach the broker is a ``Delivery`` strategy:

* at least once (default, like Spark's Kafka sink): a task retried after a failure, or a
  micro-batch replayed after a crash, writes its rows again. The rows go straight from Arrow
  into record batches (strom.spark.batch_encode) sent by the task's own idempotent producer
  (strom.spark.producer), which removes the duplicates its retries would create inside one task.
* exactly once (``delivery=exactly-once``): each task writes its rows in one Kafka
  transaction and commits, in the same transaction, a marker "batch B of partition P is
  written" as the offset of a sink-private consumer group. A retried or replayed task
  fences its predecessor (``init_transactions``), reads the marker and skips a batch that
  already committed. The reasoning is in docs/decisions/0012-exactly-once-spark-sink.md.
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


_DELIVERY_ERRORS: list[str] = []


def _on_delivery(err: Any, msg: Any) -> None:
    if err is not None:
        _DELIVERY_ERRORS.append(f"{msg.topic()}[{msg.partition()}]: {err}")


def _col(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    for i, field in enumerate(batch.schema):
        if field.name.lower() == name:
            return batch.column(i).to_pylist()
    return None


def _produce_when_room(producer: Any, topic: str, value: Any, key: Any, kwargs: dict[str, Any]) -> None:
    """Retry a produce refused with BufferError (local queue full) while deliveries drain."""
    while True:
        producer.poll(0.05)
        try:
            producer.produce(topic, value, key, **kwargs)
            return
        except BufferError:
            continue


def _produce_plain(producer: Any, topic: str, values: list[Any], keys: list[Any]) -> None:
    """The common shape (fixed topic, key and value only): no per-row dict or index lookups."""
    produce = producer.produce
    for value, key in zip(values, keys, strict=True):
        try:
            produce(topic, value, key)
        except BufferError:
            _produce_when_room(producer, topic, value, key, {})


def _produce_general(
    producer: Any,
    topics: list[Any],
    values: list[Any],
    keys: list[Any],
    parts: list[Any] | None,
    headers: list[Any] | None,
) -> None:
    """Rows with a topic column, explicit partitions or headers."""
    produce = producer.produce
    for i, topic in enumerate(topics):
        if topic is None:
            raise StromOptionError(
                "Null topic present in the data. Use the 'topic' option for setting a topic."
            )
        kwargs: dict[str, Any] = {}
        if parts is not None and parts[i] is not None:
            kwargs["partition"] = parts[i]
        if headers is not None and headers[i]:
            kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
        try:
            produce(topic, values[i], keys[i], **kwargs)
        except BufferError:
            _produce_when_room(producer, topic, values[i], keys[i], kwargs)


def _produce_batches(producer: Any, opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> tuple[int, str | None]:
    """Produce every row of ``batches``; returns (rows, topic of the first row).

    Stops early once a delivery error was reported; the caller raises it after flushing.
    """
    rows = 0
    first_topic: str | None = None
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        values = _col(batch, "value")
        assert values is not None
        keys = _col(batch, "key") or [None] * n
        parts = _col(batch, "partition")
        headers = _col(batch, "headers")
        if opts.topic is not None and parts is None and headers is None:
            _produce_plain(producer, opts.topic, values, keys)
            topics: list[Any] = [opts.topic]
        else:
            topics = [opts.topic] * n if opts.topic is not None else (_col(batch, "topic") or [None] * n)
            _produce_general(producer, topics, values, keys, parts, headers)
        if first_topic is None:
            first_topic = topics[0]
        producer.poll(0)
        rows += n
        if _DELIVERY_ERRORS:
            break
    return rows, first_topic


def _raise_delivery_errors() -> None:
    if _DELIVERY_ERRORS:
        raise RuntimeError(
            f"{len(_DELIVERY_ERRORS)} records failed to reach Strom, first: {_DELIVERY_ERRORS[0]}"
        )


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


class AtLeastOnceDelivery:
    """Encode the rows into record batches and send them with an idempotent producer; flush
    before the task reports success (strom.spark.batch_encode, strom.spark.producer)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        from strom.spark.batch_encode import DEFAULT_BATCH_SIZE, BatchEncoder
        from strom.spark.client import task_client
        from strom.spark.producer import IdempotentProducer

        conf = self.opts.producer_config()
        client = task_client(_task_client_conf(self.opts))
        producer = IdempotentProducer(client, conf)
        encoder = BatchEncoder(
            int(conf.get("batch.size", DEFAULT_BATCH_SIZE)),
            str(conf.get("compression.type", conf.get("compression.codec", "none"))).strip().lower(),
        )
        rows = 0
        for batch in batches:
            for topic, partition, encoded in encoder.encode(batch, self.opts.topic, producer.partition_count):
                producer.send(topic, partition, encoded)
            rows += batch.num_rows
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
_ADMINS: dict[tuple[tuple[str, str], ...], Any] = {}


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


def _admin(opts: SinkOptions) -> Any:
    """One AdminClient per configuration per Python worker, for reading markers."""
    from confluent_kafka.admin import AdminClient

    conf = _connection_conf(opts)
    key = tuple(sorted(conf.items()))
    admin = _ADMINS.get(key)
    if admin is None:
        admin = AdminClient(conf)
        _ADMINS[key] = admin
    return admin


def last_committed_batch(opts: SinkOptions, group: str) -> int | None:
    """The highest batch id a task of this transactional.id committed, or None.

    Read with require_stable (KIP-447): an offset still pending in an unfinished transaction
    makes the broker answer UNSTABLE_OFFSET_COMMIT, which librdkafka retries, instead of
    hiding it. ``init_transactions`` has already completed or aborted any such transaction.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException

    from strom.spark.retry import attempts, is_leader_change

    last: BaseException | None = None
    for attempt in attempts(TXN_TIMEOUT_S):
        try:
            futures = _admin(opts).list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], require_stable=True, request_timeout=30
            )
            result = futures[group].result()
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args else None
            if code == KafkaError.GROUP_ID_NOT_FOUND:
                return None
            if not (is_leader_change(exc) or code in (
                KafkaError.UNSTABLE_OFFSET_COMMIT, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR)) and attempt >= 3:
                raise
            last = exc
            continue
        found = [
            tp.offset for tp in result.topic_partitions or []
            if tp.error is None and tp.offset >= 0 and (tp.metadata or "").startswith(MARKER)
        ]
        return max(found) if found else None
    raise TimeoutError(f"Could not read the exactly-once marker of {group}: {last}")


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
        from confluent_kafka import Consumer, Producer, TopicPartition

        opts = self.opts
        scope = TaskScope.current()
        batch_id = scope.batch_id if scope.query_id is not None and scope.batch_id is not None else 0
        txn_id = transactional_id(opts, scope, self.write_id)
        conf = opts.producer_config()
        conf["transactional.id"] = txn_id
        conf["on_delivery"] = _on_delivery
        _DELIVERY_ERRORS.clear()
        # A fresh producer per task: init_transactions is what fences an older attempt (a
        # zombie) of this partition and finishes its transaction, and a producer cached in
        # this worker may itself have been fenced by a task that ran in another worker.
        producer = Producer(conf)
        try:
            producer.init_transactions(TXN_TIMEOUT_S)
            done = last_committed_batch(opts, txn_id)
            if done is not None and done >= batch_id:
                for _ in batches:  # drain the input: Spark expects the task to consume it
                    pass
                log.info("strom sink: %s batch %d already committed by an earlier attempt; skipped", txn_id, batch_id)
                _maybe_fail_for_testing(opts, scope)
                return SinkCommitMessage(rows=0, skipped=True)
            producer.begin_transaction()
            try:
                rows, first_topic = _produce_batches(producer, opts, batches)
                producer.flush(TXN_TIMEOUT_S)
                _raise_delivery_errors()
                _maybe_hold_for_testing(opts, scope)
                if rows == 0:
                    producer.abort_transaction(TXN_TIMEOUT_S)  # nothing to show, nothing to mark
                    return SinkCommitMessage(rows=0)
                marker = json.dumps({"batch": batch_id, "partition": scope.partition, "rows": rows})
                offsets = [TopicPartition(first_topic, 0, batch_id, metadata=f"{MARKER} {marker}")]
                group = Consumer({**_connection_conf(opts), "group.id": txn_id})
                try:
                    producer.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), TXN_TIMEOUT_S)
                finally:
                    group.close()
                producer.commit_transaction(TXN_TIMEOUT_S)
            except BaseException:
                try:
                    producer.abort_transaction(TXN_TIMEOUT_S)
                except Exception:  # noqa: BLE001 - fenced or fatal: the next attempt aborts it anyway
                    pass
                raise
        finally:
            producer.flush(0)
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

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return self.delivery.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.delivery.commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.delivery.abort(messages, batchId)
