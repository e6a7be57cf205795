"""Old clients against Kafka 3.9's answers where the details matter: a v0-v3 fetch from the middle of an
uncompressed batch, LogAppendTime topics written by v1 producers, aborted transactions as old readers see
them, a topic that refuses down-conversion, and keys/null values/tombstones both ways."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as Errors
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from strom.protocol.record_batch import ATTRIBUTES_POS, COMPRESSION_ZSTD, build_batch, iter_batches
from strom.storage.log_config import LogConfig
from strom.storage.recompression import recompress
from tests.integration.test_api_version_matrix import call
from tests.integration.test_old_api_versions import UNSUPPORTED_COMPRESSION_TYPE, fetch, messages
from tests.integration.test_old_message_formats import produce_raw
from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess

LOG_APPEND_TIME = 1  # kafka-python's timestamp_type for LogAppendTime (librdkafka says 2)


def produce_one_batch(broker: BrokerProcess, topic: str, records: list[tuple[bytes | None, bytes | None]],
                      **conf: object) -> None:
    """One v2 batch (librdkafka, one flush) of the given records."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 200, **conf})
    for k, v in records:
        p.produce(topic, key=k, value=v, timestamp=1_700_000_000_000)
    assert p.flush(30) == 0


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_from_the_middle_of_an_uncompressed_batch_starts_at_the_fetch_offset(broker: BrokerProcess,
                                                                                    version: int) -> None:
    """Kafka's down-conversion drops the records of an uncompressed batch below the fetch offset (each v0/v1
    message stands alone); a compressed batch stays one wrapper message, whole."""
    magic = 0 if version <= 1 else 1
    plain = new_topic(broker)
    produce_one_batch(broker, plain, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(5)])
    part = fetch(broker, plain, version, offset=2).responses[0].partitions[0]
    assert part.error_code == 0
    assert [(o, k, v) for o, _, k, v in messages(bytes(part.records), magic)] == [
        (i, f"k{i}".encode(), f"v{i}".encode()) for i in range(2, 5)]
    gzip = new_topic(broker)
    produce_one_batch(broker, gzip, [(f"k{i}".encode(), b"x" * 200) for i in range(5)],
                      **{"compression.type": "gzip"})
    part = fetch(broker, gzip, version, offset=2).responses[0].partitions[0]
    assert [o for o, _, _, _ in messages(bytes(part.records), magic)] == list(range(5))


@pytest.mark.parametrize("api_version", [(0, 10, 1), (0, 11)], ids=lambda v: ".".join(map(str, v)))
def test_old_consumer_seeking_into_a_batch_gets_the_records_from_there(broker: BrokerProcess,
                                                                       api_version: tuple) -> None:
    topic = new_topic(broker)
    produce_one_batch(broker, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(6)])
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version, enable_auto_commit=False,
                      request_timeout_ms=30000)
    tp = KafkaTopicPartition(topic, 0)
    try:
        c.assign([tp])
        c.seek(tp, 3)
        got: list = []
        deadline = time.monotonic() + 60
        while len(got) < 3 and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=1000).values():
                got += records
    finally:
        c.close()
    assert [(r.offset, r.value) for r in got] == [(i, f"v{i}".encode()) for i in range(3, 6)]


@pytest.mark.parametrize("api_version", [(0, 10, 0), (0, 10, 1)], ids=lambda v: ".".join(map(str, v)))
@pytest.mark.parametrize("codec", [None, "gzip"])
def test_v1_producer_on_a_log_append_time_topic(broker: BrokerProcess, api_version: tuple,
                                                codec: str | None) -> None:
    """The broker's clock replaces a v1 producer's timestamps: in the Produce v2 answer (its
    log_append_time), for modern readers and for old readers (timestamp type LogAppendTime)."""
    topic = new_topic(broker, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version, compression_type=codec,
                      linger_ms=50, request_timeout_ms=30000)
    try:
        futures = [p.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), timestamp_ms=1_000 + i)
                   for i in range(3)]
        p.flush(timeout=60)
        metadata = [f.get(timeout=30) for f in futures]
    finally:
        p.close(timeout=10)
    after = int(time.time() * 1000)
    assert [m.offset for m in metadata] == [0, 1, 2]
    stamped = {m.timestamp for m in metadata}  # Produce v2 answers carry the log append time
    assert len(stamped) == 1 and before <= stamped.pop() <= after
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    modern: list = []
    deadline = time.monotonic() + 60
    try:
        while len(modern) < 3 and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and not m.error():
                modern.append(m)
    finally:
        c.close()
    assert [(m.offset(), m.value()) for m in modern] == [(i, f"v{i}".encode()) for i in range(3)]
    kinds = {m.timestamp()[0] for m in modern}
    times = {m.timestamp()[1] for m in modern}
    assert kinds == {2} and len(times) == 1 and before <= times.pop() <= after  # librdkafka: 2 = LogAppendTime
    old = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version, enable_auto_commit=False,
                        auto_offset_reset="earliest", request_timeout_ms=30000)
    old.assign([KafkaTopicPartition(topic, 0)])
    got: list = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < 3 and time.monotonic() < deadline:
            for records in old.poll(timeout_ms=1000).values():
                got += records
    finally:
        old.close()
    assert [r.value for r in got] == [f"v{i}".encode() for i in range(3)]
    assert {r.timestamp_type for r in got} == {LOG_APPEND_TIME}
    assert {r.timestamp for r in got} == {modern[0].timestamp()[1]}


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 1)], ids=lambda v: ".".join(map(str, v)))
def test_old_readers_get_aborted_records_and_never_the_markers(broker: BrokerProcess, api_version: tuple) -> None:
    """Fetch v0-v3 has no isolation level: Kafka 3.9 serves it read_uncommitted, so an old consumer gets an
    aborted transaction's records too; the control batches (markers) never reach it."""
    topic = new_topic(broker)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"aborted-0")
    p.produce(topic, value=b"aborted-1")
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"committed-3")
    p.commit_transaction(30)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version, enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=30000)
    c.assign([KafkaTopicPartition(topic, 0)])
    got: list = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < 3 and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=1000).values():
                got += records
        time.sleep(1)
        for records in c.poll(timeout_ms=1000).values():
            got += records
    finally:
        c.close()
    assert [(r.offset, r.value) for r in got] == [(0, b"aborted-0"), (1, b"aborted-1"), (3, b"committed-3")]


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 1), (2, 0)], ids=lambda v: ".".join(map(str, v)))
def test_keys_null_values_and_tombstones_both_ways(broker: BrokerProcess, api_version: tuple) -> None:
    """What an old producer writes a modern consumer reads, and the other way round: keys, null keys, empty
    values and tombstones (null values) as written."""
    records = [(b"k0", b"v0"), (None, b"no-key"), (b"k2", b""), (b"k3", None), (b"", b"empty-key")]
    old_written = new_topic(broker)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version, request_timeout_ms=30000)
    try:
        for k, v in records:
            p.send(old_written, key=k, value=v).get(timeout=30)
    finally:
        p.close(timeout=10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{old_written}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(old_written, 0, 0)])
    modern: list = []
    deadline = time.monotonic() + 60
    try:
        while len(modern) < len(records) and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and not m.error():
                modern.append(m)
    finally:
        c.close()
    assert [(m.key(), m.value()) for m in modern] == records
    assert modern[3].value() is None  # the tombstone stays a tombstone
    modern_written = new_topic(broker)
    mp = Producer({"bootstrap.servers": broker.bootstrap})
    for k, v in records:
        mp.produce(modern_written, key=k, value=v)
    assert mp.flush(30) == 0
    old = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version, enable_auto_commit=False,
                        auto_offset_reset="earliest", request_timeout_ms=30000)
    old.assign([KafkaTopicPartition(modern_written, 0)])
    got: list = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(records) and time.monotonic() < deadline:
            for recs in old.poll(timeout_ms=1000).values():
                got += recs
    finally:
        old.close()
    assert [(r.key, r.value) for r in got] == records


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 1)], ids=lambda v: ".".join(map(str, v)))
def test_old_consumer_of_a_topic_without_down_conversion_gets_unsupported_version(broker: BrokerProcess,
                                                                                  api_version: tuple) -> None:
    """message.downconversion.enable=false: an old consumer's poll fails with UNSUPPORTED_VERSION (no hang,
    no records), a modern consumer of the same topic reads it."""
    topic = new_topic(broker, config={"message.downconversion.enable": "false"})
    produce_one_batch(broker, topic, [(b"k", b"v")])
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version, enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=30000)
    c.assign([KafkaTopicPartition(topic, 0)])
    raised: Exception | None = None
    deadline = time.monotonic() + 60
    try:
        while raised is None and time.monotonic() < deadline:
            try:
                assert not c.poll(timeout_ms=1000)
            except Errors.UnsupportedVersionError as e:
                raised = e
    finally:
        c.close()
    assert isinstance(raised, Errors.UnsupportedVersionError)
    m = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{topic}", "enable.auto.commit": False})
    m.assign([TopicPartition(topic, 0, 0)])
    got = None
    try:
        while got is None and time.monotonic() < deadline + 60:
            got = m.poll(1)
            got = got if got is not None and not got.error() else None
    finally:
        m.close()
    assert got is not None and got.value() == b"v"


def test_offset_commit_v0_on_a_single_node_survives_a_restart(broker_factory) -> None:  # noqa: ANN001
    """On a single node a v0 commit goes to __consumer_offsets (the README's statement): it outlives the broker
    process, and OffsetFetch v0 reads it back after the restart."""
    b: BrokerProcess = broker_factory()
    topic = new_topic(b)
    group = f"v0-{topic}"
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[T(
        name=topic, partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=3,
                                                               commit_timestamp=-1, committed_metadata="")])])
    F = OffsetFetchRequest.OffsetFetchRequestTopic
    offset_fetch = OffsetFetchRequest(group_id=group, topics=[F(name=topic, partition_indexes=[0])])
    deadline = time.monotonic() + 60
    code = None
    while code != 0 and time.monotonic() < deadline:  # __consumer_offsets is created by the first commit
        call(b, FindCoordinatorRequest(key=group), 0)
        code = call(b, commit, 0).topics[0].partitions[0].error_code
        if code != 0:
            time.sleep(0.5)
    assert code == 0
    b.restart()
    got = None
    while got != (0, 3) and time.monotonic() < deadline + 60:  # loading __consumer_offsets after the restart
        p = call(b, offset_fetch, 0).topics[0].partitions[0]
        got = (p.error_code, p.committed_offset)
        if got != (0, 3):
            time.sleep(0.5)
    assert got == (0, 3)


def zstd_batch(records: list) -> bytes:
    """One v2 batch in zstd (Strom's compressor: kafka-python's needs the zstandard package)."""
    plain = memoryview(build_batch(records))
    out = recompress(plain, list(iter_batches(plain)), replace(LogConfig(), compression_type="zstd"))
    assert out is not None and out[ATTRIBUTES_POS + 1] & 7 == COMPRESSION_ZSTD
    return bytes(out)


def test_produce_before_v7_with_zstd_gets_unsupported_compression_type(broker: BrokerProcess) -> None:
    """zstd came with Produce v7 (KIP-110): a v3-v6 request carrying a zstd batch gets
    UNSUPPORTED_COMPRESSION_TYPE and nothing is appended; v7 appends it; other codecs stay fine at v3."""
    topic = new_topic(broker)
    zstd = zstd_batch([(b"k", b"zstd", (), int(time.time() * 1000))])
    for version in (3, 6):
        assert produce_raw(broker, topic, zstd, version) == (UNSUPPORTED_COMPRESSION_TYPE, -1), version
    assert produce_raw(broker, topic, zstd, 7) == (0, 0)
    gzip = build_batch([(b"k", b"gzip", (), int(time.time() * 1000))], compression=1)
    assert produce_raw(broker, topic, gzip, 3) == (0, 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < 2 and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and not m.error():
                got.append(m)
        m = c.poll(2)
        if m is not None and not m.error():
            got.append(m)
    finally:
        c.close()
    assert [(m.offset(), m.value()) for m in got] == [(0, b"zstd"), (1, b"gzip")]


@pytest.mark.parametrize("version", [2, 4, 9])
def test_fetch_before_v10_of_a_zstd_topic_gets_unsupported_compression_type(broker: BrokerProcess,
                                                                            version: int) -> None:
    """A topic with compression.type=zstd answers Fetch v0-v9 UNSUPPORTED_COMPRESSION_TYPE (those clients
    cannot read zstd), as Kafka does; Fetch v10+ reads it."""
    topic = new_topic(broker, config={"compression.type": "zstd"})
    produce_one_batch(broker, topic, [(b"k", b"v")])
    assert fetch(broker, topic, version).responses[0].partitions[0].error_code == UNSUPPORTED_COMPRESSION_TYPE
    part = fetch(broker, topic, 10).responses[0].partitions[0]
    assert part.error_code == 0 and part.records
