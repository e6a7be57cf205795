"""The source's Arrow schema and the column helpers shared by the source and the sink.

Spark's Python data source accepts ``pyarrow.RecordBatch`` from ``read()``; building
columns in bulk is 3-5x faster than yielding one tuple per row (measured in the spike).
The batch schema must *equal* the Spark schema converted with
``to_arrow_schema(..., timezone="UTC")``, so every column is built with the exact type.
"""

from __future__ import annotations

from array import array

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


_REPEAT_OFFSETS: dict[int, pa.Buffer] = {}


def _repeat_offsets(width: int, n: int) -> pa.Buffer:
    """Offsets 0, width, 2*width, ... (n + 1 of them), from a per-width buffer grown as needed."""
    buf = _REPEAT_OFFSETS.get(width)
    if buf is None or buf.size < 4 * (n + 1):
        count = max(n + 1, 2 * (buf.size // 4) if buf is not None else 0, 1024)
        values = array("i", range(0, count * width, width)) if width else array("i", bytes(4 * count))
        buf = _REPEAT_OFFSETS[width] = pa.py_buffer(values)
    return buf.slice(0, 4 * (n + 1))


def constant_string(value: str, n: int) -> pa.Array:
    """A string column holding one value n times, built from buffers instead of n objects."""
    raw = value.encode()
    return pa.Array.from_buffers(pa.string(), n, [None, _repeat_offsets(len(raw), n), pa.py_buffer(raw * n)])


def constant_int32(value: int, n: int) -> pa.Array:
    """An int32 column holding one value n times, without a Python list of n ints."""
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(array("i", [value]) * n)])
