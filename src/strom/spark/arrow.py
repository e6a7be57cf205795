"""Fetched messages to Arrow record batches, and Arrow columns back to produce calls.

Spark's Python data source accepts ``pyarrow.RecordBatch`` from ``read()``; building
columns in bulk is 3-5x faster than yielding one tuple per row (measured in the spike).
The batch schema must *equal* the Spark schema converted with
``to_arrow_schema(..., timezone="UTC")``, so every column is built with the exact type.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def source_schema(include_headers: bool) -> StructType:
    """The row schema of Spark's Kafka source, built by hand (DDL parsing fails on workers)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE)))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(source_schema(include_headers), timezone="UTC")


_TS_TYPE = pa.timestamp("us", tz="UTC")
_TS_PAIR = pa.struct([("type", pa.int32()), ("ms", pa.int64())])  # Message.timestamp() tuples
_HEADER_ARROW = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _constant_string(value: str, n: int) -> pa.Array:
    """A string column holding one value n times, built from buffers instead of n objects."""
    raw = value.encode()
    offsets = array("i", range(0, (n + 1) * len(raw), len(raw))) if raw else array("i", bytes(4 * (n + 1)))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _constant_int32(value: int, n: int) -> pa.Array:
    """An int32 column holding one value n times, without a Python list of n ints."""
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(array("i", [value]) * n)])


def messages_to_batch(
    msgs: list[Any],
    topic: str,
    partition: int,
    schema: pa.Schema,
    include_headers: bool,
    offsets: Sequence[int] | None = None,
) -> pa.RecordBatch:
    """Convert confluent-kafka messages of one partition into a RecordBatch of ``schema``.

    Per-message Python work is kept to one accessor call per field (timestamp arithmetic
    and constant columns are Arrow kernels/buffers: ~20% less CPU than Python lists).
    librdkafka reports timestamp types 0 (none), 1 (create), 2 (log append); Kafka and
    Spark number them -1, 0, 1, so the column is ``type - 1``; missing timestamps (-1) become 0.
    """
    n = len(msgs)
    if offsets is None:
        offsets = [m.offset() for m in msgs]
    ts = pa.array([m.timestamp() for m in msgs], type=_TS_PAIR)
    columns: list[pa.Array] = [
        pa.array([m.key() for m in msgs], type=pa.binary()),
        pa.array([m.value() for m in msgs], type=pa.binary()),
        _constant_string(topic, n),
        _constant_int32(partition, n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(array("q", offsets))]),
        pc.multiply(pc.max_element_wise(ts.field(1), 0), 1000).view(_TS_TYPE),
        pc.subtract(ts.field(0), pa.scalar(1, pa.int32())),
    ]
    if include_headers:
        hdrs = []
        for m in msgs:
            h = m.headers()
            hdrs.append([{"key": k, "value": v} for k, v in h] if h else [])
        columns.append(pa.array(hdrs, type=_HEADER_ARROW))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def column_or_none(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    """A column as Python values, or None when the DataFrame has no such column."""
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        return None
    return batch.column(idx).to_pylist()
