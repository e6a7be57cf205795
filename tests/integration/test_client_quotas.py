"""Client quotas end to end: real clients get throttle_time_ms and slow down; quotas come and go at run time."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from strom.protocol import codec
from strom.protocol.record_batch import build_batch
from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess
from tests.support.quotas import alter_quotas, describe_quotas, described, set_quotas
from tests.support.raw_client import RawClient, decode

# Short windows, so a quota bites within a second or two instead of after Kafka's default 10 s of samples.
QUOTA_WINDOWS = {"quota.window.num": 3, "quota.window.size.seconds": 1}
VALUE = b"x" * 1024


@pytest.fixture(scope="module")
def qbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("quota-broker"), QUOTA_WINDOWS)
    b.start()
    try:
        yield b
    finally:
        b.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class ThrottleWatch:
    """What librdkafka reports about throttling: throttle_cb events and the statistics' brokers.*.throttle."""

    def __init__(self) -> None:
        self.events: list[float] = []
        self.stats_max_ms = 0

    def on_throttle(self, event: Any) -> None:
        self.events.append(event.throttle_time)

    def on_stats(self, text: str) -> None:
        for broker in json.loads(text).get("brokers", {}).values():
            self.stats_max_ms = max(self.stats_max_ms, broker.get("throttle", {}).get("max", 0))

    def config(self) -> dict[str, Any]:
        return {"throttle_cb": self.on_throttle, "stats_cb": self.on_stats, "statistics.interval.ms": 200}


def produce_timed(broker: BrokerProcess, topic: str, client_id: str, count: int, watch: ThrottleWatch) -> float:
    """Bytes per second a confluent-kafka producer achieves for `count` 1 KiB records."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "linger.ms": 5,
                  "batch.size": 64 * 1024, **watch.config()})
    failed: list[Any] = []
    started = time.monotonic()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, VALUE, on_delivery=lambda err, _m: err and failed.append(err))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    elapsed = time.monotonic() - started
    for _ in range(3):  # statistics and callbacks due after the last delivery
        p.poll(0.25)
    assert not failed, failed
    return count * len(VALUE) / elapsed


def consume_timed(broker: BrokerProcess, topic: str, client_id: str, count: int, watch: ThrottleWatch) -> float:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "group.id": unique("g"),
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50, **watch.config()})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.monotonic()
    deadline = started + 60
    while got < count and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            assert not m.error(), m.error()
            got += 1
    elapsed = time.monotonic() - started
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        c.poll(0.2)
    c.close()
    assert got == count
    return count * len(VALUE) / elapsed


def test_producer_byte_rate_throttles_a_confluent_producer(qbroker: BrokerProcess) -> None:
    topic = new_topic(qbroker)
    free = ThrottleWatch()
    unthrottled = produce_timed(qbroker, topic, unique("free"), 2000, free)
    assert not free.events

    slow_id = unique("slow-producer")
    set_quotas(qbroker, [("client-id", slow_id)], {"producer_byte_rate": 400_000})
    slow = ThrottleWatch()
    throttled = produce_timed(qbroker, topic, slow_id, 2000, slow)
    assert slow.events and max(slow.events) > 0
    assert slow.stats_max_ms > 0
    assert throttled < unthrottled / 2, (throttled, unthrottled)

    # Removed: the same client id is not throttled any more.
    set_quotas(qbroker, [("client-id", slow_id)], {"producer_byte_rate": None})
    assert not described(describe_quotas(qbroker, [("client-id", 0, slow_id)]))
    again = ThrottleWatch()
    produce_timed(qbroker, topic, slow_id, 500, again)
    assert not again.events


def test_consumer_byte_rate_throttles_a_confluent_consumer(qbroker: BrokerProcess) -> None:
    topic = new_topic(qbroker)
    produce_timed(qbroker, topic, unique("loader"), 2000, ThrottleWatch())
    free = ThrottleWatch()
    unthrottled = consume_timed(qbroker, topic, unique("free-consumer"), 2000, free)
    assert not free.events

    slow_id = unique("slow-consumer")
    set_quotas(qbroker, [("client-id", slow_id)], {"consumer_byte_rate": 400_000})
    slow = ThrottleWatch()
    throttled = consume_timed(qbroker, topic, slow_id, 2000, slow)
    assert slow.events and max(slow.events) > 0
    assert throttled < unthrottled / 2, (throttled, unthrottled)


def _produce_request(topic: str, size: int, acks: int = 1) -> ProduceRequest:
    batch = build_batch([(None, b"y" * size, [], 1_700_000_000_000)])
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])


def _call(client: RawClient, request: Any, version: int) -> Any:
    flexible = codec.is_flexible(request.API_KEY, version)
    return decode(codec.response_class(request.API_KEY), client.request(request, version), version, flexible)


@pytest.mark.parametrize("version", [3, 8, 9, 10])
def test_produce_response_carries_throttle_time(qbroker: BrokerProcess, version: int) -> None:
    topic = new_topic(qbroker)
    client_id = unique(f"raw-produce-v{version}")
    set_quotas(qbroker, [("client-id", client_id)], {"producer_byte_rate": 2000})
    c = RawClient(qbroker, client_id=client_id)
    try:
        resp = _call(c, _produce_request(topic, 10_000), version)
        assert isinstance(resp, ProduceResponse)
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == 0 and part.base_offset == 0  # appended, then throttled
        assert resp.throttle_time_ms > 0
    finally:
        c.close()


@pytest.mark.parametrize("version", [4, 11, 12])
def test_throttled_fetch_is_empty_with_throttle_time(qbroker: BrokerProcess, version: int) -> None:
    topic = new_topic(qbroker)
    c = RawClient(qbroker, client_id=unique("loader"))
    _call(c, _produce_request(topic, 10_000), 8)
    c.close()
    client_id = unique(f"raw-fetch-v{version}")
    set_quotas(qbroker, [("client-id", client_id)], {"consumer_byte_rate": 2000})
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                           FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1,
                                                                  fetch_offset=0, log_start_offset=-1,
                                                                  partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[], rack_id="")
    c = RawClient(qbroker, client_id=client_id)
    try:
        resp = _call(c, req, version)
        assert isinstance(resp, FetchResponse)
        assert resp.throttle_time_ms > 0 and resp.error_code == 0
        assert resp.responses == []  # Kafka answers a throttled fetch with no data
    finally:
        c.close()
    # Without the quota the same fetch returns the records.
    set_quotas(qbroker, [("client-id", client_id)], {"consumer_byte_rate": None})
    c = RawClient(qbroker, client_id=client_id)
    try:
        resp = _call(c, req, version)
        assert resp.throttle_time_ms == 0
        assert len(resp.responses[0].partitions[0].records) > 10_000
    finally:
        c.close()


def test_request_percentage_throttles_any_api(qbroker: BrokerProcess) -> None:
    client_id = unique("raw-requests")
    set_quotas(qbroker, [("client-id", client_id)], {"request_percentage": 0.001})
    c = RawClient(qbroker, client_id=client_id)
    try:
        throttles = []
        for _ in range(5):
            resp = _call(c, MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
            assert isinstance(resp, MetadataResponse) and resp.brokers
            throttles.append(resp.throttle_time_ms)
            if resp.throttle_time_ms:
                break
        assert max(throttles) > 0
    finally:
        c.close()
    set_quotas(qbroker, [("client-id", client_id)], {"request_percentage": None})


def test_acks0_produce_over_quota_mutes_without_closing(qbroker: BrokerProcess) -> None:
    topic = new_topic(qbroker)
    client_id = unique("raw-acks0")
    set_quotas(qbroker, [("client-id", client_id)], {"producer_byte_rate": 20_000})
    c = RawClient(qbroker, client_id=client_id)
    try:
        req = _produce_request(topic, 50_000, acks=0)
        req.with_header(correlation_id=99, client_id=client_id)
        c.send_raw(bytes(req.encode(version=8, header=True, framed=True)))  # no answer comes to acks=0
        resp = _call(c, MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
        assert resp.brokers  # answered once the throttle time is over: muted, not closed
    finally:
        c.close()


def test_user_quota_and_precedence_on_plaintext(broker_factory: Any) -> None:
    """PLAINTEXT clients are User:ANONYMOUS; a (user, client-id) quota outranks the user's own."""
    b = broker_factory(QUOTA_WINDOWS)
    topic = new_topic(b)
    set_quotas(b, [("user", "ANONYMOUS")], {"producer_byte_rate": 2000})
    set_quotas(b, [("user", "ANONYMOUS"), ("client-id", "vip")], {"producer_byte_rate": 1e9})
    for client_id, throttled in (("someone", True), ("vip", False)):
        c = RawClient(b, client_id=client_id)
        try:
            resp = _call(c, _produce_request(topic, 10_000), 9)
            assert (resp.throttle_time_ms > 0) == throttled, client_id
        finally:
            c.close()
    # The default user stands in for every user without a quota of their own.
    set_quotas(b, [("user", "ANONYMOUS")], {"producer_byte_rate": None})
    set_quotas(b, [("user", None)], {"producer_byte_rate": 2000})
    c = RawClient(b, client_id="someone-else")
    try:
        assert _call(c, _produce_request(topic, 10_000), 9).throttle_time_ms > 0
    finally:
        c.close()


def test_alter_and_describe_round_trip(broker_factory: Any) -> None:
    b = broker_factory()
    set_quotas(b, [("client-id", "app")], {"producer_byte_rate": 1048576, "consumer_byte_rate": 2097152})
    set_quotas(b, [("client-id", None)], {"request_percentage": 50})
    set_quotas(b, [("user", "alice")], {"consumer_byte_rate": 1000})
    set_quotas(b, [("user", "alice"), ("client-id", "a/b")], {"producer_byte_rate": 10})
    set_quotas(b, [("user", None), ("client-id", None)], {"producer_byte_rate": 20})

    everything = described(describe_quotas(b, []))
    assert everything == {
        (("client-id", "app"),): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
        (("client-id", None),): {"request_percentage": 50.0},
        (("user", "alice"),): {"consumer_byte_rate": 1000.0},
        (("user", "alice"), ("client-id", "a/b")): {"producer_byte_rate": 10.0},
        (("user", None), ("client-id", None)): {"producer_byte_rate": 20.0},
    }
    assert set(described(describe_quotas(b, [("client-id", 2, None)], strict=True))) == {
        (("client-id", "app"),), (("client-id", None),)}
    assert set(described(describe_quotas(b, [("client-id", 1, None)]))) == {
        (("client-id", None),), (("user", None), ("client-id", None))}
    assert set(described(describe_quotas(b, [("user", 0, "alice")]))) == {
        (("user", "alice"),), (("user", "alice"), ("client-id", "a/b"))}
    assert set(described(describe_quotas(b, [("user", 0, "alice"), ("client-id", 0, "a/b")], version=0))) == {
        (("user", "alice"), ("client-id", "a/b"))}

    # validate_only checks but stores nothing; removing the last key removes the entity.
    assert alter_quotas(b, [("client-id", "new")], {"producer_byte_rate": 5}, validate_only=True).error_code == 0
    assert not described(describe_quotas(b, [("client-id", 0, "new")]))
    set_quotas(b, [("user", "alice")], {"consumer_byte_rate": None})
    assert (("user", "alice"),) not in described(describe_quotas(b, []))

    # Kept across a restart (the metadata store is durable).
    b.restart()
    assert described(describe_quotas(b, [("client-id", 0, "app")])) == {
        (("client-id", "app"),): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0}}


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ([("client-id", "x")], {"no_such_quota": 1}, "Invalid configuration key"),
    ([("client-id", "x")], {"producer_byte_rate": 1.5}, "Long"),
    ([("client-id", "x")], {"producer_byte_rate": -1}, "positive"),
    ([("client-id", "x")], {"request_percentage": 0}, "positive"),
    ([("ip", "10.0.0.1")], {"connection_creation_rate": 1}, "entity type"),
    ([("client-id", "x"), ("client-id", "y")], {"producer_byte_rate": 1}, "Duplicate"),
    ([], {"producer_byte_rate": 1}, "Empty"),
])
def test_alter_rejects_bad_input_with_invalid_request(qbroker: BrokerProcess, entity: Any, ops: Any,
                                                      message: str) -> None:
    result = alter_quotas(qbroker, entity, ops)
    assert result.error_code == 42  # INVALID_REQUEST
    assert message in result.error_message


@pytest.mark.parametrize("components", [
    [("client-id", 0, None)], [("client-id", 1, "x")], [("client-id", 7, None)], [("group", 2, None)],
    [("user", 2, None), ("user", 1, None)],
])
def test_describe_rejects_bad_filters_with_invalid_request(qbroker: BrokerProcess, components: Any) -> None:
    resp = describe_quotas(qbroker, components)
    assert resp.error_code == 42 and resp.error_message and resp.entries is None


def test_unthrottled_responses_carry_zero(qbroker: BrokerProcess) -> None:
    c = RawClient(qbroker, client_id=unique("no-quota"))
    try:
        resp = _call(c, MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
        assert resp.throttle_time_ms == 0
    finally:
        c.close()


def test_kafka_python_producer_and_consumer_are_throttled(qbroker: BrokerProcess) -> None:
    """A second client library: kafka-python keeps working under quotas and slows down as clearly."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    topic = new_topic(qbroker)
    count = 1500

    def produce_rate(client_id: str) -> float:
        p = KafkaProducer(bootstrap_servers=qbroker.bootstrap, client_id=client_id, linger_ms=5)
        started = time.monotonic()
        futures = [p.send(topic, VALUE) for _ in range(count)]
        p.flush(60)
        for f in futures:
            f.get(10)
        elapsed = time.monotonic() - started
        p.close()
        return count * len(VALUE) / elapsed

    def consume_rate(client_id: str) -> float:
        c = KafkaConsumer(bootstrap_servers=qbroker.bootstrap, client_id=client_id, enable_auto_commit=False,
                          group_id=None)
        tp = KafkaTopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = 0
        started = time.monotonic()
        while got < count and time.monotonic() - started < 60:
            for records in c.poll(500).values():
                got += len(records)
        elapsed = time.monotonic() - started
        c.close()
        assert got >= count
        return count * len(VALUE) / elapsed

    free_produce = produce_rate(unique("kp-free"))
    slow_id = unique("kp-slow")
    set_quotas(qbroker, [("client-id", slow_id)], {"producer_byte_rate": 400_000, "consumer_byte_rate": 400_000})
    assert produce_rate(slow_id) < free_produce / 2
    free_consume = consume_rate(unique("kp-free"))
    assert consume_rate(slow_id) < free_consume / 2
