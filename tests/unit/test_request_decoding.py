"""codec.decode_request: the per-version decoder it caches decodes as the library does, and nulls
the schema forbids are still refused at every depth (the check skips only structs with nothing to check)."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from strom.protocol import codec
from strom.protocol.record_batch import build_batch

BATCH = build_batch([(None, b"value", (), 1_700_000_000_000)])


def _produce(records: bytes | None = BATCH) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)])])


def _fetch() -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic="t", partitions=[
                            FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1,
                                                                   fetch_offset=0, log_start_offset=-1,
                                                                   partition_max_bytes=1 << 20)])],
                        forgotten_topics_data=[], rack_id="")


def _decode(api_key: int, version: int, body: bytes) -> object:
    flexible = codec.is_flexible(api_key, version)
    return codec.decode_request(codec.RequestHeader(api_key, version, 1, "c", flexible), memoryview(body))


@pytest.mark.parametrize(("message", "versions"), [
    (_produce(), range(3, 12)),
    (_fetch(), range(4, 13)),
    (MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")], allow_auto_topic_creation=True),
     range(4, 13)),
])
def test_decodes_as_the_library_does(message: object, versions: range) -> None:
    cls = type(message)
    for version in versions:
        body = bytes(message.encode(version=version))  # type: ignore[attr-defined]
        for _ in range(2):  # the first decode builds the cached decoder, the second uses it
            decoded = _decode(cls.API_KEY, version, body)  # type: ignore[attr-defined]
            assert type(decoded) is type(cls.decode(body, version=version))  # type: ignore[attr-defined]
            assert decoded == cls.decode(body, version=version), version  # type: ignore[attr-defined]


def test_version_beyond_the_definitions_is_malformed() -> None:
    with pytest.raises(codec.MalformedRequest, match="no such version"):
        _decode(0, 99, b"")


def test_truncated_body_is_malformed() -> None:
    body = bytes(_produce().encode(version=7))
    with pytest.raises(codec.MalformedRequest, match="cannot decode ProduceRequest v7"):
        _decode(0, 7, body[:20])


def test_null_topic_name_in_produce_is_refused() -> None:
    """A struct-array element's required string: the check descends into topics."""
    body = bytearray(_produce().encode(version=7))
    # v7: transactional_id (int16 -1), acks int16, timeout int32, topics array int32, then the name
    name_at = 2 + 2 + 4 + 4
    assert body[name_at:name_at + 3] == b"\x00\x01t"
    body[name_at:name_at + 3] = struct.pack(">h", -1)
    with pytest.raises(codec.MalformedRequest, match=r"topic_data.name is null"):
        _decode(0, 7, bytes(body))


def test_null_partition_array_in_fetch_is_refused() -> None:
    """Two levels down: a fetch topic's partitions array may not be null."""
    body = bytearray(_fetch().encode(version=11))
    # v11: replica_id, max_wait_ms, min_bytes, max_bytes (int32s), isolation int8, session id and epoch
    # (int32s), topics array int32, topic string "t", then the partitions array length
    partitions_at = 4 * 4 + 1 + 4 * 2 + 4 + 3
    assert body[partitions_at:partitions_at + 4] == struct.pack(">i", 1)
    one_partition = 4 + 4 + 8 + 8 + 4  # partition, leader epoch, fetch offset, log start, max bytes
    body[partitions_at:partitions_at + 4 + one_partition] = struct.pack(">i", -1)
    with pytest.raises(codec.MalformedRequest, match=r"topics.partitions is null"):
        _decode(1, 11, bytes(body))


def test_null_records_are_left_to_the_handler() -> None:
    """Produce's records are nullable in the schema: decoding keeps the null (the handler answers it)."""
    decoded = _decode(0, 7, bytes(_produce(records=None).encode(version=7)))
    assert decoded.topic_data[0].partition_data[0].records is None  # type: ignore[attr-defined]
