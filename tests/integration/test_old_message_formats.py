"""Message formats v0/v1 (clients before Kafka 0.11): produced by old clients, up-converted on append,
read by modern clients; malformed message sets get Kafka's error and leave the log as it was."""

from __future__ import annotations

import struct
import time
import zlib

import lz4.frame
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from strom.protocol.compression import CODEC_SNAPPY, StreamCompressor
from strom.protocol.record_batch import build_batch
from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess, free_port
from tests.support.metrics import scrape
from tests.support.raw_client import RawClient

OLD_CLIENTS = [(0, 9), (0, 10, 0), (0, 10, 1), (0, 11), (1, 0), (2, 0)]
CORRUPT_MESSAGE, INVALID_TIMESTAMP, INVALID_RECORD = 2, 32, 87


def read_all(broker: BrokerProcess, topic: str, expected: int, partition: int = 0) -> list:
    """What a modern client (librdkafka) reads from the start of the partition."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, 0)])
    got: list = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and not m.error():
                got.append(m)
        # anything beyond what was expected shows up too
        extra_deadline = time.monotonic() + 1
        while time.monotonic() < extra_deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m)
    finally:
        c.close()
    return got


def legacy_set(magic: int, records: list[tuple[bytes | None, bytes | None, int]], codec: int = 0) -> bytes:
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i, (k, v, ts) in enumerate(records):
        b.append(i, ts, k, v)
    return bytes(b.build())


def wrapper(magic: int, codec: int, inner: bytes, value: bytes | None = None, last_offset: int = 0) -> bytes:
    """A compressed message around ``inner`` (or the raw ``value`` given), as old producers write it."""
    if value is None:
        c = StreamCompressor(codec)
        value = bytes(c.compress(inner)) + c.flush()
    b = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    b.append(last_offset, int(time.time() * 1000), None, value)
    out = b.build()
    out[17] = codec  # attributes: the codec
    struct.pack_into(">I", out, 12, zlib.crc32(bytes(out[16:])))
    return bytes(out)


def produce_raw(broker: BrokerProcess, topic: str, records: bytes, version: int = 2) -> tuple[int, int]:
    c = RawClient(broker)
    try:
        req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)])])
        frame = c.request(req, version)
    finally:
        c.close()
    body = frame[5:] if version >= 9 else frame[4:]  # v9+: the flexible header's tagged fields
    p = ProduceResponse.decode(body, version=version).responses[0].partition_responses[0]
    return p.error_code, p.base_offset


@pytest.mark.parametrize("api_version", OLD_CLIENTS, ids=lambda v: ".".join(map(str, v)))
def test_old_kafka_python_produces_and_modern_client_reads(broker: BrokerProcess, api_version: tuple) -> None:
    topic = new_topic(broker)
    codecs = [None, "gzip", "lz4"]
    if api_version == (0, 9):
        codecs.remove("lz4")  # kafka-python needs xxhash for 0.9's LZ4 framing; the raw test below covers it
    sent = []
    for codec in codecs:
        p = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version, compression_type=codec,
                          linger_ms=20, request_timeout_ms=30000)
        try:
            futures = [p.send(topic, key=f"k{i}".encode(), value=f"{codec}-{i}".encode(),
                              timestamp_ms=1_700_000_000_000 + i) for i in range(5)]
            p.flush(timeout=60)
            for f in futures:
                f.get(timeout=30)
        finally:
            p.close(timeout=10)
        sent += [(f"k{i}".encode(), f"{codec}-{i}".encode(), 1_700_000_000_000 + i) for i in range(5)]
    got = read_all(broker, topic, len(sent))
    assert [(m.key(), m.value()) for m in got] == [(k, v) for k, v, _ in sent]
    assert [m.offset() for m in got] == list(range(len(sent)))
    if api_version >= (0, 10):  # message format v1 and later carry the producer's timestamps
        assert [m.timestamp()[1] for m in got] == [ts for _, _, ts in sent]


@pytest.mark.parametrize("magic", [0, 1])
def test_snappy_and_lz4_wrappers_by_raw_request(broker: BrokerProcess, magic: int) -> None:
    topic = new_topic(broker)
    now = int(time.time() * 1000)
    inner = legacy_set(magic, [(b"a", b"snappy-1", now), (None, b"snappy-2", now)])
    assert produce_raw(broker, topic, wrapper(magic, CODEC_SNAPPY, inner, last_offset=1)) == (0, 0)
    inner = legacy_set(magic, [(b"b", b"lz4-1", now)])
    frame = bytearray(lz4.frame.compress(inner, store_size=False, content_checksum=False))
    if magic == 0:
        frame[6] ^= 0x5A  # 0.8-0.10.0 clients wrote a header checksum over the wrong bytes: Kafka ignores it
    assert produce_raw(broker, topic, wrapper(magic, 3, inner, value=bytes(frame))) == (0, 2)
    got = read_all(broker, topic, 3)
    assert [(m.key(), m.value()) for m in got] == [(b"a", b"snappy-1"), (None, b"snappy-2"), (b"b", b"lz4-1")]


def test_malformed_message_sets_get_kafka_errors_and_the_log_is_intact(broker_factory) -> None:  # noqa: ANN001
    broker = broker_factory()
    topic = new_topic(broker, config={"message.timestamp.before.max.ms": "3600000"})
    now = int(time.time() * 1000)
    good = legacy_set(1, [(b"k", b"good", now)])
    assert produce_raw(broker, topic, good) == (0, 0)

    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    truncated = good[:-3]
    nested_inner = wrapper(1, 1, legacy_set(1, [(None, b"deep", now)]))
    nested = wrapper(1, 1, nested_inner)
    bad_lz4_v1 = bytearray(lz4.frame.compress(legacy_set(1, [(None, b"x", now)]), store_size=False))
    bad_lz4_v1[6] ^= 0x5A  # a wrong LZ4 header checksum is only forgiven in magic 0
    cases = {
        "bad crc": (bytes(bad_crc), CORRUPT_MESSAGE),
        "truncated": (truncated, CORRUPT_MESSAGE),
        "nested compression": (nested, INVALID_RECORD),
        "magic 1 lz4 with a bad header checksum": (wrapper(1, 3, b"", value=bytes(bad_lz4_v1)), CORRUPT_MESSAGE),
        "timestamp too old": (legacy_set(1, [(None, b"old", now - 7_200_000)]), INVALID_TIMESTAMP),
        "mixed magic": (good + legacy_set(0, [(None, b"v0", now)]), INVALID_RECORD),
    }
    for name, (records, error) in cases.items():
        assert produce_raw(broker, topic, records)[0] == error, name
    # Produce v3 and later may carry message format v2 only: INVALID_RECORD, as Kafka answers
    assert produce_raw(broker, topic, good, version=3)[0] == INVALID_RECORD
    assert produce_raw(broker, topic, legacy_set(1, [(b"k", b"after", now)])) == (0, 1)
    got = read_all(broker, topic, 2)
    assert [m.value() for m in got] == [b"good", b"after"]


@pytest.mark.parametrize("compression", ["producer", "gzip"])
def test_produce_v3_and_later_with_old_message_format_is_an_invalid_record(broker: BrokerProcess,
                                                                            compression: str) -> None:
    """Kafka 3.9 answers INVALID_RECORD to a Produce v3+ carrying magic 0/1 (only v2 batches may come with
    them), whether or not the topic recompresses; nothing is appended and v2 batches still are."""
    topic = new_topic(broker, config={"compression.type": compression})
    now = int(time.time() * 1000)
    for version in (3, 7, 9):
        for magic in (0, 1):
            plain = legacy_set(magic, [(b"k", b"old", now)])
            wrapped = wrapper(magic, 1, legacy_set(magic, [(b"k", b"old-gzip", now)]))
            for records in (plain, wrapped):
                assert produce_raw(broker, topic, records, version=version) == (INVALID_RECORD, -1), \
                    (version, magic)
    assert produce_raw(broker, topic, build_batch([(b"k", b"v2", (), now)]), version=3) == (0, 0)
    assert [m.value() for m in read_all(broker, topic, 1)] == [b"v2"]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_old_produce_versions_answer_in_their_layout(broker: BrokerProcess, version: int) -> None:
    """v0 has no throttle time, v0-v1 no log append time: a v2 batch is accepted too (as Kafka)."""
    topic = new_topic(broker)
    for records in (legacy_set(1, [(None, b"legacy", int(time.time() * 1000))]),
                    build_batch([(None, b"modern", [], int(time.time() * 1000))])):
        c = RawClient(broker)
        try:
            req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
                ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)])])
            frame = c.request(req, version)
        finally:
            c.close()
        body = frame[4:]  # after the correlation id
        resp = ProduceResponse.decode(body, version=version)
        assert resp.responses[0].partition_responses[0].error_code == 0
        expected = 4 + 2 + len(topic) + 4 + 14 + (8 if version >= 2 else 0) + (4 if version >= 1 else 0)
        assert len(body) == expected  # correlation id aside: nothing more, nothing less
    assert [m.value() for m in read_all(broker, topic, 2)] == [b"legacy", b"modern"]


@pytest.mark.parametrize("api_version", OLD_CLIENTS, ids=lambda v: ".".join(map(str, v)))
def test_old_kafka_python_consumes_in_a_group_commits_and_lists_offsets(broker: BrokerProcess,
                                                                        api_version: tuple) -> None:
    """What a modern client wrote (with headers, and a transaction's markers) an old consumer reads as
    Kafka 3.9 serves it: down-converted, headers and control records invisible; its group commits and
    reads back its offsets; ListOffsets answers."""
    topic = new_topic(broker)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, key=f"k{i}".encode(), value=f"txn-{i}".encode(), headers=[("h", b"x")],
                  timestamp=1_700_000_000_000 + i)
    p.commit_transaction(30)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3, 5):
        p.produce(topic, key=f"k{i}".encode(), value=f"plain-{i}".encode(), timestamp=1_700_000_000_000 + i)
    p.flush(30)
    expected = [f"txn-{i}".encode() for i in range(3)] + [f"plain-{i}".encode() for i in range(3, 5)]
    group = f"g-{topic}"
    c = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, api_version=api_version, group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=20000,
                      request_timeout_ms=30000)
    try:
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(expected) and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=1000).values():
                got += records
        assert [r.value for r in got] == expected
        headers = [list(r.headers or []) for r in got]
        if api_version < (0, 11):  # message format v0/v1 has no headers: they are dropped, as Kafka does
            assert headers == [[]] * 5
        else:
            assert headers == [[("h", b"x")]] * 3 + [[]] * 2
        if api_version >= (0, 10):
            assert [r.timestamp for r in got] == [1_700_000_000_000 + i for i in range(5)]
        tp = KafkaTopicPartition(topic, 0)
        c.commit({tp: OffsetAndMetadata(got[-1].offset + 1, "", -1)})
        assert c.committed(tp) == got[-1].offset + 1
        end = c.end_offsets([tp])[tp] if api_version >= (0, 10, 1) else None
        if end is not None:
            assert end == got[-1].offset + 1
    finally:
        c.close()
    assert got[-1].offset == 5  # offset 3 is the commit marker, never handed out


@pytest.mark.parametrize("fallback", ["0.8.2", "0.9.0"])
def test_librdkafka_in_old_broker_mode_produces_and_consumes(broker: BrokerProcess, fallback: str) -> None:
    """librdkafka told the broker predates ApiVersions (Produce v0/v1 with message format v0 — magic-0
    LZ4 with the old header checksum —, Fetch v0/v1) writes every codec and reads it back."""
    conf = {"bootstrap.servers": broker.bootstrap, "api.version.request": False, "broker.version.fallback": fallback}
    topic = new_topic(broker)
    sent = []
    errors: list = []
    for codec in ("none", "gzip", "snappy", "lz4"):
        p = Producer({**conf, "compression.type": codec, "linger.ms": 20})
        for i in range(5):
            value = f"{codec}-{i}-".encode() + b"x" * 200  # compressible: librdkafka keeps a batch that shrinks
            p.produce(topic, key=f"k{i}".encode(), value=value,
                      on_delivery=lambda err, _msg: errors.append(err) if err else None)
            sent.append(value)
        assert p.flush(30) == 0 and errors == []
    c = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(sent) and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        c.close()
    assert [m.value() for m in got] == sent
    assert [m.offset() for m in got] == list(range(len(sent)))
    assert read_all(broker, topic, len(sent))[-1].value() == sent[-1]  # and a modern reader too


def test_conversions_are_counted_per_topic(broker_factory) -> None:  # noqa: ANN001
    port = free_port()
    broker = broker_factory({"metrics.listener": f"http://127.0.0.1:{port}"})
    topic = new_topic(broker)
    now = int(time.time() * 1000)
    assert produce_raw(broker, topic, legacy_set(1, [(None, b"a", now), (None, b"b", now)]))[0] == 0
    assert produce_raw(broker, topic, build_batch([(None, b"c", [], now)]), version=3)[0] == 0  # not converted
    c = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, api_version=(0, 10, 1), group_id=None,
                      auto_offset_reset="earliest", consumer_timeout_ms=20000)
    try:
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 3 and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=1000).values():
                got += records
    finally:
        c.close()
    assert [r.value for r in got] == [b"a", b"b", b"c"]
    s = scrape(port)
    assert s.get("kafka_server_brokertopicmetrics_producemessageconversions_total", topic=topic) == 2
    assert s.get("kafka_server_brokertopicmetrics_fetchmessageconversions_total", topic=topic) >= 3
