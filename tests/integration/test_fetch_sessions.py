"""Incremental fetch sessions (KIP-227) against a real broker: the wire protocol, and consumers
(kafka-python opens sessions, librdkafka fetches without them) reading many partitions exactly."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from tests.integration.test_produce_consume import new_topic, produce
from tests.support.broker import BrokerProcess
from tests.support.metrics import metered_broker, metrics_port, scrape
from tests.support.raw_client import RawClient, decode

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with metered_broker(tmp_path_factory.mktemp("sessions")) as broker:
        yield broker


def fetch(client: RawClient, version: int, session_id: int, epoch: int, topics: list[Any],
          forgotten: list[Any] | None = None, max_wait_ms: int = 50) -> Any:
    request = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                           isolation_level=0, session_id=session_id, session_epoch=epoch, topics=topics,
                           forgotten_topics_data=forgotten or [], rack_id="")
    return decode(FetchResponse, client.request(request, version), version, version >= 12)


def by_name(topic: str, offsets: dict[int, int]) -> Any:
    return FetchRequest.FetchTopic(topic=topic, partitions=[
        FetchRequest.FetchTopic.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o,
                                               log_start_offset=-1, partition_max_bytes=1 << 20)
        for p, o in offsets.items()])


def by_id(topic_id: uuid.UUID, offsets: dict[int, int]) -> Any:
    return FetchRequest.FetchTopic(topic_id=topic_id, partitions=[
        FetchRequest.FetchTopic.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o,
                                               log_start_offset=-1, partition_max_bytes=1 << 20)
        for p, o in offsets.items()])


def answered(resp: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in resp.responses for p in t.partitions}


def test_session_answers_only_what_changed_and_refuses_stale_epochs(broker: BrokerProcess) -> None:
    topic = new_topic(broker, partitions=3)
    produce(broker, topic, [{"value": b"first", "partition": p} for p in range(3)])
    c = RawClient(broker)
    try:
        full = fetch(c, 12, 0, 0, [by_name(topic, {0: 0, 1: 0, 2: 0})])
        assert full.error_code == 0 and full.session_id != 0
        assert sorted(answered(full)) == [0, 1, 2]
        sid = full.session_id
        # The fetcher moves its offsets past what it read: nothing new to tell, an empty answer.
        moved = fetch(c, 12, sid, 1, [by_name(topic, {0: 1, 1: 1, 2: 1})])
        assert moved.error_code == 0 and moved.session_id == sid and answered(moved) == {}
        # Nothing sent, nothing new: empty again.
        assert answered(fetch(c, 12, sid, 2, [])) == {}
        produce(broker, topic, [{"value": b"second", "partition": 1}])
        news = answered(fetch(c, 12, sid, 3, [], max_wait_ms=5000))
        assert list(news) == [1] and b"second" in bytes(news[1].records) and news[1].high_watermark == 2
        # A replayed or skipped epoch, and an unknown session, are refused without partitions.
        stale = fetch(c, 12, sid, 3, [])
        assert (stale.error_code, stale.session_id, answered(stale)) == (INVALID_FETCH_SESSION_EPOCH, 0, {})
        assert fetch(c, 12, sid ^ 0x5A5A, 1, []).error_code == FETCH_SESSION_ID_NOT_FOUND
        # Forgetting a partition, then closing the session with epoch -1.
        forget = fetch(c, 12, sid, 4, [], forgotten=[FetchRequest.ForgottenTopic(topic=topic, partitions=[2])])
        assert forget.error_code == 0
        closing = fetch(c, 12, sid, -1, [by_name(topic, {0: 0})])
        assert closing.session_id == 0 and b"first" in bytes(answered(closing)[0].records)
        assert fetch(c, 12, sid, 5, []).error_code == FETCH_SESSION_ID_NOT_FOUND
        # Sessionless fetches answer everything, as before.
        plain = fetch(c, 12, 0, -1, [by_name(topic, {0: 0, 1: 0, 2: 0})])
        assert plain.session_id == 0 and sorted(answered(plain)) == [0, 1, 2]
    finally:
        c.close()


def test_session_by_topic_id_and_a_fetch_by_name_of_it(broker: BrokerProcess) -> None:
    topic = new_topic(broker, partitions=2)
    produce(broker, topic, [{"value": b"x", "partition": p} for p in range(2)])
    c = RawClient(broker)
    try:
        meta = decode(MetadataResponse, c.request(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic)],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False), 12), 12, True)
        topic_id = meta.topics[0].topic_id
        full = fetch(c, 13, 0, 0, [by_id(topic_id, {0: 0, 1: 0})])
        assert full.session_id != 0 and sorted(answered(full)) == [0, 1]
        assert full.responses[0].topic_id == topic_id
        forget = fetch(c, 13, full.session_id, 1, [by_id(topic_id, {1: 1})],
                       forgotten=[FetchRequest.ForgottenTopic(topic_id=topic_id, partitions=[0])])
        assert forget.error_code == 0 and answered(forget) == {}
        produce(broker, topic, [{"value": b"y", "partition": p} for p in range(2)])
        news = answered(fetch(c, 13, full.session_id, 2, [], max_wait_ms=5000))
        assert list(news) == [1]  # partition 0 was forgotten
        assert fetch(c, 12, full.session_id, 3, []).error_code == FETCH_SESSION_TOPIC_ID_ERROR
    finally:
        c.close()


def test_consumers_read_many_partitions_exactly_through_sessions(metered: BrokerProcess) -> None:
    partitions, per_partition = 60, 50
    topic = new_topic(metered, partitions=partitions)
    expected = {(p, f"{p}-{i}".encode()) for p in range(partitions) for i in range(per_partition)}
    stop = threading.Event()
    # Records keep arriving while the consumers read: incremental fetches must carry every change.
    def produce_slowly() -> None:
        producer = Producer({"bootstrap.servers": metered.bootstrap, "linger.ms": 5})
        for i in range(per_partition):
            for p in range(partitions):
                producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
            producer.poll(0)
            if i % 10 == 9:
                time.sleep(0.2)
        assert producer.flush(30) == 0
        stop.set()

    writer = threading.Thread(target=produce_slowly)
    writer.start()
    kp = KafkaConsumer(bootstrap_servers=metered.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=200,
                       max_partition_fetch_bytes=4096)
    kp.assign([KTopicPartition(topic, p) for p in range(partitions)])
    kp.seek_to_beginning()
    got: list[tuple[int, bytes]] = []
    sessions_seen = 0
    deadline = time.monotonic() + 90
    try:
        while len(got) < len(expected) and time.monotonic() < deadline:
            for records in kp.poll(timeout_ms=500).values():
                got.extend((r.partition, r.value) for r in records)
            if not sessions_seen:
                sessions_seen = int(scrape(metrics_port(metered)).get(
                    "kafka_server_fetchsessioncache_numincrementalfetchsessions") or 0)
    finally:
        kp.close()
        writer.join()
    assert len(got) == len(expected) and set(got) == expected  # every record once, none twice
    assert sessions_seen >= 1, "kafka-python fetched without an incremental session"
    cached = scrape(metrics_port(metered)).get("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached")
    assert cached is not None

    # librdkafka fetches sessionless (session id 0, epoch -1): the same records, exactly, and no new session.
    sessions_before = scrape(metrics_port(metered)).get("kafka_server_fetchsessioncache_numincrementalfetchsessions")
    cc = Consumer({"bootstrap.servers": metered.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    cc.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < len(expected) and time.monotonic() < deadline:
            m = cc.poll(0.5)
            if m is not None and not m.error():
                seen.append((m.partition(), m.value()))
    finally:
        cc.close()
    assert len(seen) == len(expected) and set(seen) == expected
    assert scrape(metrics_port(metered)).get(
        "kafka_server_fetchsessioncache_numincrementalfetchsessions") == sessions_before
