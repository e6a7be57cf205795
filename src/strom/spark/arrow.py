"""The source's Arrow schema and the column helpers shared by the source and the sink.

Spark's Python data source accepts ``pyarrow.RecordBatch`` from ``read()``; building
columns in bulk is 3-5x faster than yielding one tuple per row (measured in the spike).
The batch schema must *equal* the Spark schema converted with
``to_arrow_schema(..., timezone="UTC")``, so every column is built with the exact type.
"""

from __future__ import annotations

from array import array
from typing import Any

import pyarrow as pa
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


def constant_string(value: str, n: int) -> pa.Array:
    """A string column holding one value n times, built from buffers instead of n objects."""
    raw = value.encode()
    offsets = array("i", range(0, (n + 1) * len(raw), len(raw))) if raw else array("i", bytes(4 * (n + 1)))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def constant_int32(value: int, n: int) -> pa.Array:
    """An int32 column holding one value n times, without a Python list of n ints."""
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(array("i", [value]) * n)])


def column_or_none(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    """A column as Python values, or None when the DataFrame has no such column."""
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        return None
    return batch.column(idx).to_pylist()
