"""The `strom` sink: Arrow-based batch and streaming writers.

Delivery is at least once, like Spark's Kafka sink: a task retried after a failure, or a
micro-batch replayed after a crash, writes its rows again. The idempotent producer (on by
default) removes the duplicates that librdkafka's own retries would otherwise create inside
one task. How rows reach the broker is a ``Delivery`` strategy, so a transactional
exactly-once mode can be added later without touching the writers.
"""

from __future__ import annotations

import logging
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
    """How rows reach the broker. The seam for a future transactional exactly-once mode."""

    def write(self, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage: ...

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None: ...

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None: ...


_PRODUCERS: dict[tuple[tuple[str, str], ...], Any] = {}
_DELIVERY_ERRORS: list[str] = []


def _on_delivery(err: Any, msg: Any) -> None:
    if err is not None:
        _DELIVERY_ERRORS.append(f"{msg.topic()}[{msg.partition()}]: {err}")


def _producer(opts: SinkOptions) -> Any:
    """One producer per configuration per Python worker; Spark reuses workers across tasks."""
    from confluent_kafka import Producer

    conf = opts.producer_config()
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    producer = _PRODUCERS.get(key)
    if producer is None:
        conf["on_delivery"] = _on_delivery
        producer = Producer(conf)
        _PRODUCERS[key] = producer
    return producer


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


class AtLeastOnceDelivery:
    """Produce every row directly; flush before the task reports success."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        producer = _producer(self.opts)
        _DELIVERY_ERRORS.clear()
        rows = 0
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            values = _col(batch, "value")
            assert values is not None
            keys = _col(batch, "key") or [None] * n
            parts = _col(batch, "partition")
            headers = _col(batch, "headers")
            if self.opts.topic is not None and parts is None and headers is None:
                _produce_plain(producer, self.opts.topic, values, keys)
            else:
                topics = (
                    [self.opts.topic] * n
                    if self.opts.topic is not None
                    else (_col(batch, "topic") or [None] * n)
                )
                _produce_general(producer, topics, values, keys, parts, headers)
            producer.poll(0)
            rows += n
            if _DELIVERY_ERRORS:
                break
        remaining = producer.flush(120)
        if _DELIVERY_ERRORS:
            raise RuntimeError(
                f"{len(_DELIVERY_ERRORS)} records failed to reach Strom, first: {_DELIVERY_ERRORS[0]}"
            )
        if remaining:
            raise TimeoutError(f"{remaining} records were still unacknowledged after 120 s.")
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


def delivery_for(opts: SinkOptions) -> Delivery:
    """Pick the delivery strategy. Exactly-once needs broker transactions, not there yet."""
    if opts.delivery == "exactly-once":
        raise StromOptionError(
            "delivery=exactly-once is not available yet: it will build on Strom transactions. "
            "The default at-least-once delivery with the idempotent producer is in effect otherwise."
        )
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
