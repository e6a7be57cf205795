"""Fetch semantics: long polling through the purgatory, expiry, max_bytes and whole batches."""

from __future__ import annotations

import threading
import time
import uuid

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from tests.integration.test_produce_consume import new_topic, produce
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode


def fetch_request(topic: str, offset: int, max_wait_ms: int, min_bytes: int, max_bytes: int = 1 << 20,
                  partition_max_bytes: int = 1 << 20) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                        isolation_level=0, session_id=0, session_epoch=-1,
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                            FetchRequest.FetchTopic.FetchPartition(
                                partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                                partition_max_bytes=partition_max_bytes)])],
                        forgotten_topics_data=[], rack_id="")


def test_long_poll_is_woken_by_a_produce(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    c = RawClient(broker)
    c.sock.settimeout(30)  # far below max_wait_ms: only a wake-up by the append can answer in time
    timer = threading.Timer(0.5, lambda: produce(broker, topic, [{"value": b"wake up"}]))
    timer.start()
    try:
        resp = decode(FetchResponse, c.request(fetch_request(topic, 0, max_wait_ms=120_000, min_bytes=1), 11),
                      11, False)
    finally:
        timer.join()
        c.close()
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 1
    assert b"wake up" in bytes(part.records)


def test_long_poll_expires_with_empty_response(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    c = RawClient(broker)
    c.sock.settimeout(30)
    started = time.monotonic()
    resp = decode(FetchResponse, c.request(fetch_request(topic, 0, max_wait_ms=300, min_bytes=1), 11), 11, False)
    c.close()
    assert time.monotonic() - started < 30
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 0 and not part.records


def test_max_bytes_still_returns_first_whole_batch(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    produce(broker, topic, [{"value": b"z" * 5000}], **{"linger.ms": 0})
    produce(broker, topic, [{"value": b"y" * 5000}], **{"linger.ms": 0})
    c = RawClient(broker)
    resp = decode(FetchResponse, c.request(fetch_request(topic, 0, 0, 0, max_bytes=100, partition_max_bytes=100),
                                           11), 11, False)
    c.close()
    records = bytes(resp.responses[0].partitions[0].records)
    assert b"z" * 5000 in records and b"y" * 100 not in records  # exactly the first batch, whole


def test_flexible_fetch_with_topic_ids(broker: BrokerProcess) -> None:
    """Fetch v13+ names topics by UUID (what confluent-kafka 2.x sends)."""
    topic = new_topic(broker)
    produce(broker, topic, [{"value": b"by id"}])
    c = RawClient(broker)
    meta = decode(MetadataResponse, c.request(MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), 12), 12, True)
    tid = meta.topics[0].topic_id
    assert isinstance(tid, uuid.UUID) and tid.int != 0
    req = fetch_request(topic, 0, 0, 0)
    req.topics[0].topic = None
    req.topics[0].topic_id = tid
    resp = decode(FetchResponse, c.request(req, 16), 16, True)
    c.close()
    assert resp.responses[0].topic_id == tid
    assert b"by id" in bytes(resp.responses[0].partitions[0].records)
