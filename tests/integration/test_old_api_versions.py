"""The old API versions Kafka 3.9 still serves, by raw request (the matrix in test_api_version_matrix walks
every advertised version with a well-formed request; these check what the old layouts carry)."""

from __future__ import annotations

import time

import lz4.frame
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, OffsetCommitRequest
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.legacy_records import LegacyRecordBatch

from strom.protocol import codec
from strom.protocol.compression import decompress
from strom.protocol.record_batch import build_batch
from strom.storage.lazy_down_conversion import CHUNK_BYTES
from tests.integration.test_api_version_matrix import call
from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient

UNSUPPORTED_VERSION, UNSUPPORTED_COMPRESSION_TYPE = 35, 76


def produce_modern(broker: BrokerProcess, topic: str, n: int, **conf: object) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, **conf})
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=value(i), headers=[("h", b"1")],
                  timestamp=1_700_000_000_000 + i)
    assert p.flush(30) == 0


def value(i: int) -> bytes:
    return f"v{i}-".encode() + b"x" * 300  # compressible: librdkafka sends a batch uncompressed when it does not shrink


def fetch(broker: BrokerProcess, topic: str, version: int, offset: int = 0) -> FetchResponse:
    fp = FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                                log_start_offset=-1, partition_max_bytes=1 << 20)
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[fp])],
                       forgotten_topics_data=[], rack_id="")
    return call(broker, req, version)


def messages(records: bytes, magic: int) -> list[tuple[int, int | None, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of each message of a v0/v1 message set, every CRC checked; a compressed
    wrapper gives its inner messages (inflated here: kafka-python cannot read snappy without python-snappy)."""
    out = []
    for msg in _split(records):
        assert msg[16] == magic
        batch = LegacyRecordBatch(msg, magic)
        assert batch.validate_crc()
        if not msg[17] & 7:
            out += [(m.offset, m.timestamp, m.key, m.value) for m in batch]
            continue
        (wrapper,) = list(LegacyRecordBatch(_plain(msg), magic))
        payload = wrapper.value
        if magic == 0 and msg[17] & 7 == 3:  # a magic-0 LZ4 header checksum is the old clients' (KAFKA-3160)
            payload = payload[:6] + bytes([(xxh32(payload[4:6]) >> 8) & 0xFF]) + payload[7:]
        inner = [m for part in _split(decompress(msg[17] & 7, payload)) for m in LegacyRecordBatch(part, magic)]
        assert all(m.validate_crc() for m in inner)
        base = batch.base_offset - inner[-1].offset if magic == 1 else 0  # v1: inner offsets are relative
        out += [(base + m.offset, m.timestamp, m.key, m.value) for m in inner]
    return out


def _split(records: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos + 12 <= len(records):
        size = int.from_bytes(records[pos + 8:pos + 12], "big")
        out.append(records[pos:pos + 12 + size])
        pos += 12 + size
    return out


def _plain(message: bytes) -> bytes:
    """The wrapper message with its codec bits cleared, so its value reads as bytes."""
    out = bytearray(message)
    out[17] &= ~7
    return bytes(out)


def xxh32(data: bytes) -> int:
    """XXH32 with seed 0 of a short input (under 16 bytes), written out here as the test's own oracle."""
    p1, p2, p3, p4, p5, mask = 2654435761, 2246822519, 3266489917, 668265263, 374761393, 0xFFFFFFFF
    assert len(data) < 16

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    h = (p5 + len(data)) & mask
    pos = 0
    while pos + 4 <= len(data):
        h = rotl((h + int.from_bytes(data[pos:pos + 4], "little") * p3) & mask, 17) * p4 & mask
        pos += 4
    for b in data[pos:]:
        h = rotl((h + b * p5) & mask, 11) * p1 & mask
    h ^= h >> 15
    h = h * p2 & mask
    h ^= h >> 13
    h = h * p3 & mask
    return h ^ (h >> 16)


@pytest.mark.parametrize("codec_name", ["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_v0_to_v3_down_converts(broker: BrokerProcess, version: int, codec_name: str) -> None:
    topic = new_topic(broker)
    produce_modern(broker, topic, 4, **{"compression.type": codec_name})
    part = fetch(broker, topic, version).responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 4
    magic = 0 if version <= 1 else 1
    got = messages(bytes(part.records), magic)
    assert [(o, k, v) for o, _, k, v in got] == [(i, f"k{i}".encode(), value(i)) for i in range(4)]
    if magic == 1:
        assert [ts for _, ts, _, _ in got] == [1_700_000_000_000 + i for i in range(4)]
    if codec_name != "none":  # one wrapper message in the topic's codec
        assert bytes(part.records)[17] & 7 == {"gzip": 1, "snappy": 2, "lz4": 3}[codec_name]
    # from the middle of a batch: the messages before the offset asked for may come too (as Kafka)
    later = messages(bytes(fetch(broker, topic, version, 2).responses[0].partitions[0].records), magic)
    assert [o for o, _, _, _ in later][-2:] == [2, 3]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_lz4_for_magic_0_carries_the_header_checksum_old_java_clients_expect(broker: BrokerProcess,
                                                                             version: int) -> None:
    """Kafka 0.8-0.10.0 Java clients check the LZ4 frame header checksum over the magic number and the descriptor
    (KAFKA-3160); Kafka writes that one into magic-0 LZ4 messages and the correct one into magic 1 (KIP-57)."""
    topic = new_topic(broker)
    produce_modern(broker, topic, 4, **{"compression.type": "lz4"})
    records = bytes(fetch(broker, topic, version).responses[0].partitions[0].records)
    magic = 0 if version <= 1 else 1
    (message,) = _split(records)
    assert message[16] == magic and message[17] & 7 == 3
    (wrapper,) = list(LegacyRecordBatch(_plain(message), magic))
    frame = wrapper.value
    assert frame[:4] == bytes.fromhex("04224d18") and not frame[4] & 0x08  # no content size: header is 7 bytes
    correct, broken = (xxh32(frame[4:6]) >> 8) & 0xFF, (xxh32(frame[:6]) >> 8) & 0xFF
    assert correct != broken
    if magic == 0:
        assert frame[6] == broken
        with pytest.raises(RuntimeError):
            lz4.frame.decompress(frame)  # a decoder that checks the header refuses it, as Kafka 0.10.0+ would
        frame = frame[:6] + bytes([correct]) + frame[7:]
    else:
        assert frame[6] == correct
    inner = [m for part in _split(lz4.frame.decompress(frame)) for m in LegacyRecordBatch(part, magic)]
    assert [(m.key, m.value) for m in inner] == [(f"k{i}".encode(), value(i)) for i in range(4)]


def fetch_at(broker: BrokerProcess, topic: str, version: int, offset: int, max_bytes: int) -> bytes:
    fp = FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                                log_start_offset=-1, partition_max_bytes=max_bytes)
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[fp])],
                       forgotten_topics_data=[], rack_id="")
    part = call(broker, req, version).responses[0].partitions[0]
    assert part.error_code == 0
    return bytes(part.records)


def whole_messages(records: bytes, magic: int) -> tuple[list, bytes]:
    """The whole messages of a fetched message set (CRC checked) and the bytes after them, which must be a
    partial message: a header running past the end, or fewer bytes than a header."""
    out, pos = [], 0
    while pos + 12 <= len(records) and pos + 12 + int.from_bytes(records[pos + 8:pos + 12], "big") <= len(records):
        end = pos + 12 + int.from_bytes(records[pos + 8:pos + 12], "big")
        batch = LegacyRecordBatch(records[pos:end], magic)
        assert records[pos + 16] == magic and batch.validate_crc()
        out += [(m.offset, m.key, m.value) for m in batch]
        pos = end
    return out, records[pos:]


@pytest.mark.parametrize("batch_records", [100, 1000], ids=["32KiB-batches", "320KiB-batches"])
@pytest.mark.parametrize("version", [1, 3])
def test_large_reads_are_converted_lazily_and_cut_at_the_read_size(broker: BrokerProcess, version: int,
                                                                   batch_records: int) -> None:
    """A read longer than one conversion chunk is converted while it is written (KIP-283): the partition's records
    take exactly the read's size (that of its v2 batches); converted messages, larger than v2 records here, are cut
    there, and the partial last one is fetched again from its offset. Every record comes once, in order (batches
    larger than a chunk are converted one at a time)."""
    topic = new_topic(broker)
    produce_modern(broker, topic, 3000, **{"batch.num.messages": batch_records})
    magic = 0 if version <= 1 else 1
    got: list = []
    cut = 0
    while len(got) < 3000:
        v1 = fetch_at(broker, topic, version, len(got), 1 << 20)
        v2 = fetch_at(broker, topic, 4, len(got), 1 << 20)
        messages_, tail = whole_messages(v1, magic)
        if len(v1) != len(v2):  # a read of one chunk, converted at once: exactly its messages
            assert not tail and len(v2) <= max(CHUNK_BYTES, batch_records * 400)
        messages_ = [m for m in messages_ if m[0] >= len(got)]  # a batch's earlier records may come too
        assert messages_ and messages_[0][0] == len(got)
        if tail:
            assert len(tail) < 12 or int.from_bytes(tail[8:12], "big") + 12 > len(tail)
            cut += 1
        got += messages_
    assert [(o, k, v) for o, k, v in got] == [(i, f"k{i}".encode(), value(i)) for i in range(3000)]
    assert cut > 0


def test_lazily_converted_records_shorter_than_the_read_are_padded(broker: BrokerProcess) -> None:
    """Headers are lost in the conversion: the converted messages are shorter than the read, and the rest of the
    partition's size is a message header claiming more than remains (clients read it as a partial message)."""
    topic = new_topic(broker)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.num.messages": 100})
    for i in range(2000):
        p.produce(topic, value=f"v{i}".encode(), headers=[("h", b"y" * 400)])
    assert p.flush(30) == 0
    v1 = fetch_at(broker, topic, 1, 0, 512 * 1024)
    v2 = fetch_at(broker, topic, 4, 0, 512 * 1024)
    assert len(v1) == len(v2)
    messages_, tail = whole_messages(v1, 0)
    assert [(o, v) for o, _, v in messages_] == [(i, f"v{i}".encode()) for i in range(len(messages_))]
    assert len(messages_) > 100 and len(tail) > 12  # more than one chunk converted, much shorter than the read
    assert int.from_bytes(tail[:8], "big", signed=True) == -1 and int.from_bytes(tail[8:12], "big") > len(tail) - 12


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 1)], ids=lambda v: ".".join(map(str, v)))
def test_old_kafka_python_reads_lazily_converted_fetches(broker: BrokerProcess, api_version: tuple) -> None:
    """kafka-python pinned to Fetch v0/v3 reads through cut and padded partitions."""
    plain, padded = new_topic(broker), new_topic(broker)
    produce_modern(broker, plain, 3000, **{"batch.num.messages": 100})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.num.messages": 100})
    for i in range(2000):
        p.produce(padded, value=f"v{i}".encode(), headers=[("h", b"y" * 400)])
    assert p.flush(30) == 0
    for topic, n in ((plain, 3000), (padded, 2000)):
        c = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version, enable_auto_commit=False,
                          group_id=None, max_partition_fetch_bytes=200 * 1024, fetch_max_bytes=400 * 1024)
        c.assign([KafkaTopicPartition(topic, 0)])
        c.seek_to_beginning()
        got: list = []
        deadline = time.monotonic() + 90
        try:
            while len(got) < n and time.monotonic() < deadline:
                for records in c.poll(timeout_ms=500).values():
                    got += [(r.offset, r.value) for r in records]
        finally:
            c.close()
        expected = [value(i) for i in range(n)] if topic == plain else [f"v{i}".encode() for i in range(n)]
        assert got == list(enumerate(expected)), topic


def test_fetch_refuses_down_conversion_when_the_topic_disables_it_and_zstd(broker: BrokerProcess) -> None:
    off = new_topic(broker, config={"message.downconversion.enable": "false"})
    produce_modern(broker, off, 2)
    assert fetch(broker, off, 3).responses[0].partitions[0].error_code == UNSUPPORTED_VERSION
    assert fetch(broker, off, 4).responses[0].partitions[0].error_code == 0  # v2 readers are not converted
    zstd = new_topic(broker)
    produce_modern(broker, zstd, 2, **{"compression.type": "zstd"})
    assert fetch(broker, zstd, 2).responses[0].partitions[0].error_code == UNSUPPORTED_COMPRESSION_TYPE
    # a zstd batch after others: the records before it come, the fetch from its offset gets the error
    mixed = new_topic(broker)
    produce_modern(broker, mixed, 2)
    produce_modern(broker, mixed, 2, **{"compression.type": "zstd"})
    part = fetch(broker, mixed, 2).responses[0].partitions[0]
    assert part.error_code == 0 and [o for o, _, _, _ in messages(bytes(part.records), 1)] == [0, 1]
    assert fetch(broker, mixed, 2, 2).responses[0].partitions[0].error_code == UNSUPPORTED_COMPRESSION_TYPE


def list_offsets_v0(broker: BrokerProcess, topic: str, timestamp: int, max_num: int) -> list[int]:
    P = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[P(partition_index=0, timestamp=timestamp, max_num_offsets=max_num)])])
    p = call(broker, req, 0).topics[0].partitions[0]
    assert p.error_code == 0
    return list(p.old_style_offsets)


def produce_batch(broker: BrokerProcess, topic: str, n: int) -> int:
    """One batch of ``n`` records (of 400 bytes: with segment.bytes=1024 each batch starts a segment); its base offset."""
    now = int(time.time() * 1000)
    batch = build_batch([(None, b"x" * 400, (), now)] * n)
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    p = call(broker, req, 3).responses[0].partition_responses[0]
    assert p.error_code == 0
    return p.base_offset


def test_list_offsets_v0_answers_old_style_offsets(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    produce_modern(broker, topic, 5)
    assert list_offsets_v0(broker, topic, -1, 1) == [5]
    assert list_offsets_v0(broker, topic, -1, 10) == [5, 0]  # the log end offset, the segment's base offset
    assert list_offsets_v0(broker, topic, -2, 10) == [0]
    assert list_offsets_v0(broker, topic, -1, 0) == []


def test_list_offsets_v0_lists_segment_base_offsets_by_modification_time(broker: BrokerProcess) -> None:
    """Kafka 3.9's legacy answer: every segment's base offset and the log end offset, newest first, limited
    by max_num_offsets and by the timestamp, compared with when each segment was last written (record
    timestamps play no part)."""
    topic = new_topic(broker, config={"segment.bytes": "1024"})
    assert [produce_batch(broker, topic, 3) for _ in range(3)] == [0, 3, 6]
    time.sleep(1)  # segment files are stamped by the file system clock: keep well apart from the cut
    cut = int(time.time() * 1000)
    time.sleep(1)
    assert [produce_batch(broker, topic, 3) for _ in range(2)] == [9, 12]
    assert list_offsets_v0(broker, topic, -1, 100) == [15, 12, 9, 6, 3, 0]
    assert list_offsets_v0(broker, topic, -1, 3) == [15, 12, 9]
    assert list_offsets_v0(broker, topic, -2, 100) == [0]
    # segments last written at or before the cut: those of offsets 0, 3 and 6
    assert list_offsets_v0(broker, topic, cut, 100) == [6, 3, 0]
    assert list_offsets_v0(broker, topic, cut, 2) == [6, 3]
    assert list_offsets_v0(broker, topic, int(time.time() * 1000) + 60_000, 100) == [15, 12, 9, 6, 3, 0]
    assert list_offsets_v0(broker, topic, 1_700_000_000_000, 100) == []  # before any segment was written
    # the first segment's base offset becomes the log start offset when records are deleted below it
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [deleted] = admin.delete_records([TopicPartition(topic, 0, 4)]).values()
    assert deleted.result(timeout=30).low_watermark == 4
    assert list_offsets_v0(broker, topic, -1, 100) == [15, 12, 9, 6, 4]
    assert list_offsets_v0(broker, topic, -2, 100) == [4]


@pytest.mark.parametrize("version", [0, 1])
def test_offset_commit_v0_v1_and_offset_fetch_v0(broker: BrokerProcess, version: int) -> None:
    """v0 carries no generation nor member (a standalone commit); on a single node Strom stores it in
    __consumer_offsets, as every other version, and OffsetFetch v0 and v1+ both read it back."""
    topic = new_topic(broker)
    group = f"old-{version}-{topic}"
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[T(
        name=topic, partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=42,
                                                               commit_timestamp=-1, committed_metadata="m")])])
    resp = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # FindCoordinator v0 creates __consumer_offsets; it may still be loading
        found = call(broker, FindCoordinatorRequest(key=group), 0)
        resp = call(broker, req, version)
        if found.error_code == 0 and resp.topics[0].partitions[0].error_code not in (14, 15, 16):
            assert found.port == broker.port
            break
        time.sleep(0.5)
    assert resp is not None and resp.topics[0].partitions[0].error_code == 0
    F = OffsetFetchRequest.OffsetFetchRequestTopic
    for fetch_version in (0, 1, 5):
        fr = call(broker, OffsetFetchRequest(group_id=group, topics=[F(name=topic, partition_indexes=[0])]),
                  fetch_version)
        p = fr.topics[0].partitions[0]
        assert (p.error_code, p.committed_offset, p.metadata) == (0, 42, "m"), fetch_version


def test_versions_outside_the_range_get_unsupported_version(broker: BrokerProcess) -> None:
    """A version above what Strom serves (but that the wire format defines) gets UNSUPPORTED_VERSION in
    that version's answer instead of a silent close; the connection stays usable."""
    topic = new_topic(broker)
    max_produce = 13  # a Produce version kafka-python's definitions know and Strom does not advertise
    c = RawClient(broker)
    try:
        req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=b"")])])
        frame = c.request(req, max_produce)
        body = frame[5:] if codec.is_flexible(0, max_produce) else frame[4:]
        resp = codec.response_class(0).decode(body, version=max_produce)
        assert resp.responses[0].partition_responses[0].error_code == UNSUPPORTED_VERSION
        req = OffsetFetchRequest(group_id="x", topics=[])
        frame = c.request(req, 1)  # still answered on the same connection
        assert codec.response_class(9).decode(frame[4:], version=1).error_code == 0
    finally:
        c.close()
