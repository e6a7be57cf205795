"""Bad input gets Kafka's error code or a closed connection; the broker keeps serving and the log stays intact."""

from __future__ import annotations

import functools
import struct
import uuid

from confluent_kafka import Consumer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.integration.test_produce_consume import consume_all, new_topic, produce
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode


def assert_alive(broker: BrokerProcess) -> None:
    c = RawClient(broker)
    try:
        resp = decode(ApiVersionsResponse, c.request(ApiVersionsRequest(), 0), 0, False)
        assert resp.error_code == 0
    finally:
        c.close()
    assert broker.proc is not None and broker.proc.poll() is None


def test_huge_length_is_refused_without_allocating(broker: BrokerProcess) -> None:
    c = RawClient(broker)
    c.send_raw(struct.pack(">i", 0x7FFFFFFF))  # 2 GiB
    assert c.is_closed_by_peer()
    c.close()
    c = RawClient(broker)
    c.send_raw(struct.pack(">i", -5))
    assert c.is_closed_by_peer()
    c.close()
    assert_alive(broker)


def test_unknown_api_key_closes_only_that_connection(broker: BrokerProcess) -> None:
    c = RawClient(broker)
    c.send_raw(struct.pack(">ihhih", 10, 999, 0, 1, -1))
    assert c.is_closed_by_peer()
    c.close()
    assert_alive(broker)


def test_api_versions_newer_than_ours_gets_v0_unsupported_version(broker: BrokerProcess) -> None:
    c = RawClient(broker)
    header = struct.pack(">hhih", 18, 99, 7, -1) + b"\x00"
    c.send_raw(struct.pack(">i", len(header)) + header)
    frame = c.read_frame()
    c.close()
    assert struct.unpack(">i", frame[:4])[0] == 7
    resp = ApiVersionsResponse.decode(frame[4:], version=0)
    assert resp.error_code == 35
    assert any(k.api_key == 18 for k in resp.api_keys)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(api_key=st.sampled_from([0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 21, 22, 32, 33, 35, 37,
                                 42, 44, 47, 60]), version=st.integers(0, 16),
       body=st.binary(max_size=300))
def test_fuzzed_frames_never_kill_the_broker(hostile_broker: BrokerProcess, api_key: int, version: int,
                                             body: bytes) -> None:
    frame = struct.pack(">hhih", api_key, version, 1, 3) + b"fuz" + body
    c = RawClient(hostile_broker)
    try:
        c.send_raw(struct.pack(">i", len(frame)) + frame)
        c.sock.settimeout(2)
        try:
            c.read_frame()
        except (TimeoutError, OSError, ConnectionError, struct.error):
            pass
    finally:
        c.close()
    assert hostile_broker.proc is not None and hostile_broker.proc.poll() is None


@functools.cache
def _valid_requests() -> list[tuple[int, bytes]]:
    """Real, well-formed requests (header included) that the mutation fuzzer starts from."""
    from kafka.protocol.metadata import MetadataRequest

    produce_req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name="fuzz", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(_batch([b"a", b"b"])))])])
    fetch_req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                             session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic="fuzz", partitions=[
                                 FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1,
                                                                        fetch_offset=0, log_start_offset=-1,
                                                                        partition_max_bytes=1 << 20)])],
                             forgotten_topics_data=[], rack_id="")
    meta_req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="fuzz")],
                               allow_auto_topic_creation=True)
    out = []
    for req, version in ((produce_req, 9), (produce_req, 7), (fetch_req, 12), (fetch_req, 11), (meta_req, 12)):
        req.with_header(correlation_id=1, client_id="fuzz")
        out.append((version, bytes(req.encode(version=version, header=True, framed=False))))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(which=st.integers(0, 4), flips=st.lists(st.tuples(st.integers(0, 10_000),
                                                                              st.integers(0, 255)), max_size=4),
       cut=st.integers(0, 10_000))
def test_mutated_real_requests_never_kill_the_broker(hostile_broker: BrokerProcess, which: int,
                                                     flips: list[tuple[int, int]], cut: int) -> None:
    frame = bytearray(_valid_requests()[which][1])
    for pos, value in flips:
        frame[8 + pos % max(1, len(frame) - 8)] = value  # keep api key / version, damage the rest
    frame = frame[: max(8, len(frame) - cut % len(frame))]
    c = RawClient(hostile_broker)
    try:
        c.send_raw(struct.pack(">i", len(frame)) + bytes(frame))
        c.sock.settimeout(2)
        try:
            c.read_frame()
        except (TimeoutError, OSError, ConnectionError, struct.error):
            pass
    finally:
        c.close()
    assert hostile_broker.proc is not None and hostile_broker.proc.poll() is None


def test_client_works_after_fuzzing(hostile_broker: BrokerProcess) -> None:
    topic = new_topic(hostile_broker)
    produce(hostile_broker, topic, [{"value": b"still fine"}])
    assert [m.value() for m in consume_all(hostile_broker, topic, 1)] == [b"still fine"]


def _batch(values: list[bytes]) -> bytearray:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000, key=None, value=v, headers=[])
    return b.build()


def _produce_raw(broker: BrokerProcess, topic: str, records: bytes) -> int:
    c = RawClient(broker)
    req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    try:
        resp = decode(ProduceResponse, c.request(req, 7), 7, False)
    finally:
        c.close()
    return resp.responses[0].partition_responses[0].error_code


def _end_offset(broker: BrokerProcess, topic: str) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def test_bad_crc_is_rejected_and_nothing_is_written(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    assert _produce_raw(broker, topic, bytes(_batch([b"good"]))) == 0
    bad = _batch([b"first", b"second"])
    bad[-1] ^= 0xFF  # flip a byte inside the CRC-covered records
    assert _produce_raw(broker, topic, bytes(bad)) == 2  # CORRUPT_MESSAGE
    truncated = bytes(_batch([b"cut"]))[:-3]
    assert _produce_raw(broker, topic, truncated) in (2, 87)  # CORRUPT_MESSAGE / INVALID_RECORD
    assert _end_offset(broker, topic) == 1
    assert [m.value() for m in consume_all(broker, topic, 1)] == [b"good"]


def test_invalid_topic_names_get_invalid_topic_exception(broker: BrokerProcess) -> None:
    c = RawClient(broker)
    names = ["bad name!", "", "a" * 250, "..", f"ok-{uuid.uuid4().hex[:6]}"]
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[]) for n in names],
        timeout_ms=5000, validate_only=False)
    resp = decode(CreateTopicsResponse, c.request(req, 5), 5, True)
    c.close()
    codes = {t.name: t.error_code for t in resp.topics}
    assert [codes[n] for n in names[:4]] == [17, 17, 17, 17]
    assert codes[names[4]] == 0


def test_fetch_out_of_range_offset(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    produce(broker, topic, [{"value": b"only"}])
    c = RawClient(broker)
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                           FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1,
                                                                  fetch_offset=1000, log_start_offset=-1,
                                                                  partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[], rack_id="")
    resp = decode(FetchResponse, c.request(req, 11), 11, False)
    c.close()
    part = resp.responses[0].partitions[0]
    assert part.error_code == 1  # OFFSET_OUT_OF_RANGE
    assert part.high_watermark == 1
