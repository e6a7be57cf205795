"""The Spark source's read path against a real broker: Fetch v12 answers decoded straight to Arrow.

Records go in through confluent-kafka (random compression, headers, null keys) and as raw
producer batches through Produce (every codec, including xerial-framed snappy); ``read_range``
reads offsets [lo, hi) with the C kernels and with the pure-Python decoder, and both must return
what a confluent-kafka consumer assigned at lo returns. Transactions: read_committed returns
exactly what a read_committed consumer does, read_uncommitted everything but the markers.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from strom.spark import batch_decode
from strom.spark.arrow import arrow_schema
from strom.spark.options import parse_source_options
from strom.spark.range_reader import PARTITION_MAX_BYTES, read_range
from strom.spark.source import OffsetRange
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode
from tests.support.record_batches import CODECS, compressed, producer_batch

TIMEOUT = 30
PARTITION_EOF = -191
# librdkafka numbers timestamp types 1 (create) and 2 (log append); Kafka and Spark 0 and 1.
LIBRDKAFKA_TS_TYPE_OFFSET = 1


def new_topic(broker: BrokerProcess, timestamp_type: str = "CreateTime") -> str:
    name = f"decode-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(name, 1, 1, config={"message.timestamp.type": timestamp_type})]).values():
        f.result(TIMEOUT)
    return name


def source_options(broker: BrokerProcess, topic: str, **extra: str) -> Any:
    return parse_source_options({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
                                 "includeHeaders": "true", "kafkaConsumer.pollTimeoutMs": "20000", **extra},
                                streaming=False)


@contextmanager
def python_decoder() -> Iterator[None]:
    """Read with decode_python, as a machine without a C compiler (or STROM_NATIVE=0) does."""
    with mock.patch.object(batch_decode, "native_available", lambda: False):
        yield


def read_rows(opts: Any, topic: str, lo: int, hi: int) -> list[tuple[Any, ...]]:
    """(offset, key, value, timestamp µs, timestamp type, headers) of every record read_range yields."""
    rows: list[tuple[Any, ...]] = []
    schema = arrow_schema(True)
    for batch in read_range(opts, OffsetRange(topic, 0, lo, hi)):
        assert batch.schema == schema
        assert batch.num_rows > 0
        assert set(batch.column("topic").to_pylist()) == {topic}
        assert set(batch.column("partition").to_pylist()) == {0}
        for array in batch.columns:
            array.validate(full=True)
        rows += zip(batch.column("offset").to_pylist(), batch.column("key").to_pylist(),
                    batch.column("value").to_pylist(), batch.column("timestamp").view(pa.int64()).to_pylist(),
                    batch.column("timestampType").to_pylist(), batch.column("headers").to_pylist(), strict=True)
    return [tuple(r) for r in rows]


def consumer_rows(broker: BrokerProcess, topic: str, lo: int, hi: int,
                  isolation: str = "read_uncommitted") -> list[tuple[Any, ...]]:
    """What a confluent-kafka consumer assigned at ``lo`` returns below ``hi``, in read_rows' shape."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    rows: list[tuple[Any, ...]] = []
    try:
        c.assign([TopicPartition(topic, 0, lo)])
        while lo < hi:
            m = c.poll(TIMEOUT)
            assert m is not None, f"no end of partition reached; got {rows}"
            if m.error():
                if m.error().code() == PARTITION_EOF:
                    break
                raise AssertionError(m.error())
            if m.offset() >= hi:
                break
            ts_type, ts = m.timestamp()
            rows.append((m.offset(), m.key(), m.value(), max(ts, 0) * 1000, ts_type - LIBRDKAFKA_TS_TYPE_OFFSET,
                         [{"key": k, "value": v} for k, v in m.headers() or []]))
            if m.offset() == hi - 1:
                break
    finally:
        c.close()
    return rows


def end_offset(broker: BrokerProcess, topic: str, isolation: str = "read_uncommitted") -> int:
    """The high watermark, or under read_committed the last stable offset."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks", "isolation.level": isolation})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT)[1]
    finally:
        c.close()


def produce_raw(broker: BrokerProcess, topic: str, batch: bytes) -> None:
    """One batch exactly as given, through a bare Produce v7 request."""
    client = RawClient(broker, client_id="raw-producer")
    try:
        req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=TIMEOUT * 1000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
        resp = decode(ProduceResponse, client.request(req, 7), 7, flexible_header=False)
        assert resp.responses[0].partition_responses[0].error_code == 0
    finally:
        client.close()


# ---------------------------------------------------------------------------------------
# Random records, every codec, both decoders
# ---------------------------------------------------------------------------------------

records = st.tuples(
    st.one_of(st.none(), st.binary(max_size=10)),
    st.one_of(st.none(), st.just(b""), st.binary(max_size=30),
              st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=3), st.integers(1, 300))),
    # librdkafka hands header names over as C strings, so the consumer cuts a key at its first NUL;
    # confluent-kafka's produce() crashes on a lone surrogate, hence codec="utf-8"
    st.lists(st.tuples(st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=5),
                       st.one_of(st.none(), st.binary(max_size=6))), max_size=3),
    st.integers(1, 2**41),
)

chunks = st.lists(st.one_of(
    st.tuples(st.just("client"), st.lists(records, min_size=1, max_size=40)),
    st.tuples(st.just("raw"), st.tuples(st.sampled_from(CODECS), st.lists(records, min_size=1, max_size=5))),
), min_size=1, max_size=5)


def produce_chunks(broker: BrokerProcess, topic: str, parts: list[tuple[str, Any]], codec: str,
                   linger_ms: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                         "linger.ms": linger_ms, "batch.num.messages": 7})
    for kind, part in parts:
        if kind == "client":
            for key, value, headers, ts in part:
                producer.produce(topic, value=value, key=key, headers=headers, timestamp=ts)
            assert producer.flush(TIMEOUT) == 0
        else:
            raw_codec, recs = part
            raw, _ = producer_batch(recs, list(range(len(recs))))
            produce_raw(broker, topic, compressed(raw, raw_codec))


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(parts=chunks, codec=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
       linger_ms=st.sampled_from([0, 20]), log_append_time=st.booleans(),
       max_bytes=st.sampled_from([PARTITION_MAX_BYTES, 1, 300, 2000]), data=st.data())
def test_read_range_returns_what_the_consumer_returns(broker: BrokerProcess, parts: list[tuple[str, Any]],
                                                      codec: str, linger_ms: int, log_append_time: bool,
                                                      max_bytes: int, data: st.DataObject) -> None:
    topic = new_topic(broker, "LogAppendTime" if log_append_time else "CreateTime")
    produce_chunks(broker, topic, parts, codec, linger_ms)
    end = end_offset(broker, topic)
    assert end == sum(len(p) if k == "client" else len(p[1]) for k, p in parts)
    lo = data.draw(st.integers(0, end), label="lo")
    hi = data.draw(st.integers(lo, end), label="hi")
    # A small fetch size spreads a range over many answers (the broker still returns one whole first batch).
    opts = source_options(broker, topic, **{"kafka.max.partition.fetch.bytes": str(max_bytes)})
    for a, b in ((0, end), (lo, hi)):
        expected = consumer_rows(broker, topic, a, b)
        assert [r[0] for r in expected] == list(range(a, b))
        if batch_decode.native_available():
            assert read_rows(opts, topic, a, b) == expected
        with python_decoder():
            assert read_rows(opts, topic, a, b) == expected


# ---------------------------------------------------------------------------------------
# Transactions: read_committed and read_uncommitted
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transactional_topic(broker: BrokerProcess) -> tuple[str, set[bytes], set[bytes]]:
    """Two transactional producers committing and aborting, interleaved with plain writes.

    Returns the topic, the committed and plain values, and the aborted values."""
    topic = new_topic(broker)
    conf = {"bootstrap.servers": broker.bootstrap, "linger.ms": 0}
    plain = Producer({**conf, "compression.type": "lz4"})
    txn = [Producer({**conf, "transactional.id": f"t{i}-{uuid.uuid4().hex[:6]}",
                     "compression.type": codec}) for i, codec in enumerate(["none", "zstd"])]
    for p in txn:
        p.init_transactions(TIMEOUT)
    kept: set[bytes] = set()
    aborted: set[bytes] = set()
    n = 0

    def write(p: Producer, count: int, into: set[bytes], tag: str) -> None:
        nonlocal n
        for _ in range(count):
            value = f"{tag}-{n}".encode()
            n += 1
            p.produce(topic, value=value, key=None if n % 3 else b"k", headers=[("n", str(n).encode())])
            into.add(value)
        assert p.flush(TIMEOUT) == 0

    write(plain, 2, kept, "plain")
    # round: (producer, commit?) pairs whose transactions overlap in the log
    for round_ in ([(0, True), (1, False)], [(0, False), (1, True)], [(0, False), (1, False)],
                   [(0, True), (1, True)], [(1, False)], [(0, True)]):
        for i, _ in round_:
            txn[i].begin_transaction()
        for step in range(3):
            for i, commit in round_:
                write(txn[i], 1 + step % 2, kept if commit else aborted, f"{'c' if commit else 'a'}{i}")
            write(plain, 1, kept, "plain")
        for i, commit in round_:
            if commit:
                txn[i].commit_transaction(TIMEOUT)
            else:
                txn[i].abort_transaction(TIMEOUT)
    write(plain, 1, kept, "plain")
    return topic, kept, aborted


def test_read_committed_returns_what_a_read_committed_consumer_returns(
        broker: BrokerProcess, transactional_topic: tuple[str, set[bytes], set[bytes]]) -> None:
    topic, kept, aborted = transactional_topic
    end = end_offset(broker, topic)
    expected = consumer_rows(broker, topic, 0, end, "read_committed")
    assert {r[2] for r in expected} == kept and len(expected) == len(kept)
    opts = source_options(broker, topic, **{"kafka.isolation.level": "read_committed"})
    assert read_rows(opts, topic, 0, end) == expected
    with python_decoder():
        assert read_rows(opts, topic, 0, end) == expected
    # Every start offset: inside transactions, on markers, after aborted batches.
    for lo in range(end + 1):
        assert read_rows(opts, topic, lo, end) == [r for r in expected if r[0] >= lo], lo
    for hi in range(end + 1):
        assert read_rows(opts, topic, 0, hi) == [r for r in expected if r[0] < hi], hi
    # One or two batches per answer: the aborted list of each answer must still apply.
    small = source_options(broker, topic, **{"kafka.isolation.level": "read_committed",
                                             "kafka.max.partition.fetch.bytes": "100"})
    for lo in range(0, end + 1, 3):
        assert read_rows(small, topic, lo, end) == [r for r in expected if r[0] >= lo], lo


def test_read_uncommitted_returns_aborted_records_but_never_markers(
        broker: BrokerProcess, transactional_topic: tuple[str, set[bytes], set[bytes]]) -> None:
    topic, kept, aborted = transactional_topic
    end = end_offset(broker, topic)
    expected = consumer_rows(broker, topic, 0, end, "read_uncommitted")
    assert {r[2] for r in expected} == kept | aborted and len(expected) == len(kept) + len(aborted)
    assert len(expected) < end  # the markers take offsets too
    opts = source_options(broker, topic)
    rows = read_rows(opts, topic, 0, end)
    assert rows == expected
    with python_decoder():
        assert read_rows(opts, topic, 0, end) == expected
    for lo in range(end + 1):
        assert read_rows(opts, topic, lo, end) == [r for r in expected if r[0] >= lo], lo


def test_an_open_transaction_ends_read_committed_ranges_at_the_last_stable_offset(broker: BrokerProcess) -> None:
    """Records after an open transaction's first one are past the last stable offset: a read_committed
    range ends there (as Spark plans it), and reads on once the transaction is aborted."""
    topic = new_topic(broker)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"open-{uuid.uuid4().hex[:6]}"})
    txn.init_transactions(TIMEOUT)
    txn.begin_transaction()
    txn.produce(topic, b"committed")
    txn.commit_transaction(TIMEOUT)
    for value in (b"p0", b"p1"):
        plain.produce(topic, value)
    assert plain.flush(TIMEOUT) == 0
    txn.begin_transaction()
    for value in (b"open0", b"open1"):
        txn.produce(topic, value)
    assert txn.flush(TIMEOUT) == 0
    for value in (b"p2", b"p3"):
        plain.produce(topic, value)
    assert plain.flush(TIMEOUT) == 0

    high = end_offset(broker, topic)
    stable = end_offset(broker, topic, "read_committed")
    assert (stable, high) == (4, 8)  # committed, its marker, p0, p1 | open0, open1, p2, p3
    committed = source_options(broker, topic, **{"kafka.isolation.level": "read_committed"})
    expected = consumer_rows(broker, topic, 0, high, "read_committed")
    assert [r[2] for r in expected] == [b"committed", b"p0", b"p1"]
    assert read_rows(committed, topic, 0, stable) == expected
    uncommitted = consumer_rows(broker, topic, 0, high)
    assert [r[2] for r in uncommitted] == [b"committed", b"p0", b"p1", b"open0", b"open1", b"p2", b"p3"]
    assert read_rows(source_options(broker, topic), topic, 0, high) == uncommitted

    txn.abort_transaction(TIMEOUT)
    end = end_offset(broker, topic)
    assert end == high + 1  # the abort marker
    expected = consumer_rows(broker, topic, 0, end, "read_committed")
    assert [r[2] for r in expected] == [b"committed", b"p0", b"p1", b"p2", b"p3"]
    for lo in range(end + 1):
        assert read_rows(committed, topic, lo, end) == [r for r in expected if r[0] >= lo], lo


def test_megabyte_answers_read_like_the_consumer(broker: BrokerProcess) -> None:
    """Answers of megabytes (received straight into their own frame buffer) and many batches per answer."""
    topic = new_topic(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4", "linger.ms": 50})
    rng = random.Random(11)
    for i in range(3000):
        producer.produce(topic, value=rng.randbytes(2000), key=str(i).encode() if i % 2 else None,
                         headers=[("i", str(i).encode())] if i % 3 else None, timestamp=1_700_000_000_000 + i)
    assert producer.flush(TIMEOUT) == 0
    end = end_offset(broker, topic)
    expected = consumer_rows(broker, topic, 0, end)
    assert len(expected) == end == 3000
    for max_bytes in ("8388608", "1048576"):
        opts = source_options(broker, topic, **{"kafka.max.partition.fetch.bytes": max_bytes})
        assert read_rows(opts, topic, 0, end) == expected
        with python_decoder():
            assert read_rows(opts, topic, 1234, end) == expected[1234:]
