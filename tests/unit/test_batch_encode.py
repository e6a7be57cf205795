"""The sink's batch encoder: native kernels == pure Python == what Kafka clients decode."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pytest.importorskip("cramjam")

from kafka.partitioner.default import murmur2 as kafka_murmur2  # noqa: E402
from kafka.record.default_records import DefaultRecordBatch  # noqa: E402

from strom.protocol.compression import decompress  # noqa: E402
from strom.protocol.record_batch import HEADER_SIZE, parse_header  # noqa: E402
from strom.spark.batch_encode import (  # noqa: E402
    BatchEncoder,
    SinkDataError,
    key_partition,
    murmur2,
)
from strom.spark.options import StromOptionError  # noqa: E402

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
NATIVE = BatchEncoder(use_native=True).lib is not None
needs_native = pytest.mark.skipif(not NATIVE, reason="no C compiler: only the pure-Python encoder exists")

blobs = st.one_of(st.none(), st.binary(max_size=40))
headers = st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3))
rows = st.lists(st.tuples(blobs, blobs, headers, st.one_of(st.none(), st.integers(0, 4))), min_size=1, max_size=60)


def arrow_batch(data: list[tuple[Any, ...]], *, strings: bool, with_parts: bool, slice_from: int,
                large: bool = False) -> Any:
    """The rows as the sink receives them; ``slice_from`` leading rows are sliced off (array offsets);
    ``large``: 64-bit offsets, as Spark sends with spark.sql.execution.arrow.useLargeVarTypes."""
    if large:
        kind = pa.large_string() if strings else pa.large_binary()
        header_type = pa.large_list(pa.struct([("key", pa.large_string()), ("value", pa.large_binary())]))
    else:
        kind = pa.string() if strings else pa.binary()
        header_type = HEADERS

    def conv(b: bytes | None) -> Any:
        return None if b is None else (b.decode("latin-1") if strings else b)

    pad = data[:1] * slice_from
    full = pad + data
    cols = {
        "key": pa.array([conv(k) for k, _, _, _ in full], kind),
        "value": pa.array([conv(v) for _, v, _, _ in full], kind),
        "headers": pa.array([None if h is None else [{"key": hk, "value": hv} for hk, hv in h]
                             for _, _, h, _ in full], header_type),
    }
    if with_parts:
        cols["partition"] = pa.array([p for _, _, _, p in full], pa.int32())
    return pa.record_batch(cols).slice(slice_from)


def encode(batch: Any, *, native: bool, batch_size: int, compression: str = "none") -> list[tuple[str, int, bytes]]:
    enc = BatchEncoder(batch_size, compression, use_native=native, sticky_start=7, clock=lambda: 1_700_000_000_000)
    return [(t, p, b.wire(1000, 3, 42)) for t, p, b in enc.encode(batch, "t", lambda _: 5)]


def as_bytes(v: Any, strings: bool) -> bytes | None:
    return None if v is None else (v.decode("latin-1").encode() if strings else v)


@needs_native
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows, st.booleans(), st.booleans(), st.integers(0, 3), st.sampled_from([HEADER_SIZE + 1, 200, 1_000_000]),
       st.booleans())
def test_native_equals_python_and_kafka_decodes_it(data: list[tuple[Any, ...]], strings: bool, with_parts: bool,
                                                   slice_from: int, batch_size: int, large: bool) -> None:
    batch = arrow_batch(data, strings=strings, with_parts=with_parts, slice_from=slice_from, large=large)
    native = encode(batch, native=True, batch_size=batch_size)
    python = encode(batch, native=False, batch_size=batch_size)
    assert native == python

    expected: dict[int, list[tuple[Any, ...]]] = {}
    for key, value, hdrs, part in data:
        k = as_bytes(key, strings)
        if with_parts and part is not None:
            p = part
        elif k is None:
            p = 7 % 5  # the sticky partition of the first batch
        else:
            p = (kafka_murmur2(k) & 0x7FFFFFFF) % 5
        expected.setdefault(p, []).append(
            (k, as_bytes(value, strings), list(hdrs or [])))

    got: dict[int, list[tuple[Any, ...]]] = {}
    for topic, partition, wire in native:
        assert topic == "t"
        decoded = DefaultRecordBatch(wire)
        assert decoded.validate_crc()
        assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (1000, 3, 42)
        records = list(decoded)
        assert [r.offset for r in records] == list(range(len(records)))
        assert all(r.timestamp == 1_700_000_000_000 for r in records)
        header = parse_header(wire)
        assert header.records_count == len(records)
        assert len(records) == 1 or header.size <= batch_size
        got.setdefault(partition, []).extend((r.key, r.value, list(r.headers)) for r in records)
    assert got == expected


@given(st.binary(max_size=64))
def test_murmur2_is_kafkas(key: bytes) -> None:
    assert murmur2(key) & 0xFFFFFFFF == kafka_murmur2(key)
    assert key_partition(key, 7) == (kafka_murmur2(key) & 0x7FFFFFFF) % 7


def test_murmur2_known_partitions() -> None:
    """Values the Java client computes (DefaultPartitioner / BuiltInPartitioner.partitionForKey)."""
    assert murmur2(b"") == 275646681
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_native), False])
def test_compressed_batches_hold_the_records(compression: str, native: bool) -> None:
    data = [(f"k{i}".encode(), f"value {i}".encode() * 5, [("h", b"x")], None) for i in range(300)]
    batch = arrow_batch(data, strings=False, with_parts=False, slice_from=0)
    plain = {(p, r.key, r.value) for _, p, w in encode(batch, native=native, batch_size=1_000_000)
             for r in DefaultRecordBatch(w)}
    out = encode(batch, native=native, batch_size=1_000_000, compression=compression)
    codec = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[compression]
    seen = set()
    for _, p, wire in out:
        header = parse_header(wire)
        assert header.compression == codec
        assert DefaultRecordBatch(wire).validate_crc()
        body = bytes(wire[HEADER_SIZE:])
        raw = decompress(codec, body)
        # The same records, uncompressed, decode with kafka-python.
        unpacked = bytearray(wire[:HEADER_SIZE]) + bytes(raw)
        unpacked[21:23] = b"\x00\x00"
        unpacked[8:12] = (len(unpacked) - 12).to_bytes(4, "big")
        seen |= {(p, r.key, r.value) for r in DefaultRecordBatch(bytes(unpacked))}
    assert seen == plain


@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_native), False])
def test_a_row_bigger_than_batch_size_is_a_batch_of_its_own(native: bool) -> None:
    data = [(b"k", b"a" * 10, None, 0), (b"k", b"b" * 5000, None, 0), (b"k", b"c" * 10, None, 0)]
    out = encode(arrow_batch(data, strings=False, with_parts=True, slice_from=0), native=native, batch_size=1000)
    assert [[r.value[:1] for r in DefaultRecordBatch(w)] for _, _, w in out] == [[b"a"], [b"b"], [b"c"]]
    assert len(out[1][2]) > 5000


@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_native), False])
def test_null_keys_are_sticky_per_batch_round_robin(native: bool) -> None:
    enc = BatchEncoder(use_native=native, sticky_start=0)
    batch = pa.record_batch({"value": pa.array([b"v"] * 10)})
    parts = [[p for _, p, _ in enc.encode(batch, "t", lambda _: 3)] for _ in range(4)]
    assert parts == [[0], [1], [2], [0]]


@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_native), False])
def test_bad_rows_are_refused_clearly(native: bool) -> None:
    enc = BatchEncoder(use_native=native)
    with pytest.raises(SinkDataError, match="t-9.*UNKNOWN_TOPIC_OR_PARTITION"):
        list(enc.encode(pa.record_batch({"value": pa.array([b"v"]), "partition": pa.array([9], pa.int32())}),
                        "t", lambda _: 3))
    no_key = pa.array([[{"key": None, "value": b"x"}]], HEADERS)
    with pytest.raises(SinkDataError, match="header without a key"):
        list(enc.encode(pa.record_batch({"value": pa.array([b"v"]), "headers": no_key}), "t", lambda _: 3))
    with pytest.raises(StromOptionError, match="Null topic"):
        list(enc.encode(pa.record_batch({"value": pa.array([b"v"]), "topic": pa.array([None], pa.string())}),
                        None, lambda _: 3))


def test_topic_column_splits_rows_per_topic() -> None:
    enc = BatchEncoder(use_native=NATIVE)
    batch = pa.record_batch({"topic": pa.array(["a", "b", "a"]), "key": pa.array(["x", "y", "z"]),
                             "value": pa.array(["1", "2", "3"])})
    got = sorted((t, r.key, r.value) for t, _, b in enc.encode(batch, None, lambda _: 2)
                 for r in DefaultRecordBatch(b.wire(-1, -1, -1)))
    assert got == [("a", b"x", b"1"), ("a", b"z", b"3"), ("b", b"y", b"2")]


def test_encoded_records_export_exactly_their_size() -> None:
    """pyarrow exports a shrunken resizable buffer with its old capacity as the shape; every view of
    an encoded batch's records, however nested or sliced, must hold exactly the records."""
    import pyarrow as pa

    from strom.spark.batch_encode import BatchEncoder

    values = pa.array([b"x" * 1000] * 2000, pa.binary())  # about 2 MB: several 1 MB batches
    batch = pa.RecordBatch.from_arrays([values], names=["value"])
    encoded = [e for _, _, e in BatchEncoder(1_000_000).encode(batch, "t", lambda _topic: 1)]
    assert len(encoded) > 1
    for e in encoded:
        size = len(e.records)
        view = memoryview(memoryview(e.records))
        assert view.nbytes == size and len(view) == size and len(view[10:]) == size - 10
