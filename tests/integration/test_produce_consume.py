"""Round trips through a real broker process with confluent-kafka, kafka-python, aiokafka and kcat."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import BrokerProcess


def new_topic(broker: BrokerProcess, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name]
    fut.result(timeout=15)
    return name


def produce(broker: BrokerProcess, topic: str, records: list[dict], **conf: object) -> list:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **conf})
    delivered: list = []
    errors: list = []

    def cb(err, msg):  # noqa: ANN001
        (errors if err else delivered).append(err or msg)

    for r in records:
        p.produce(topic, on_delivery=cb, **r)
    assert p.flush(30) == 0
    assert not errors, errors
    return delivered


def consume_all(broker: BrokerProcess, topic: str, n: int, partitions: int = 1, timeout: float = 30) -> list:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        out.append(m)
    c.close()
    return out


def test_confluent_round_trip_keys_nulls_headers_timestamps(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    records = [
        {"key": b"k1", "value": b"v1", "headers": [("h", b"x"), ("h2", None)], "timestamp": 1_700_000_000_123},
        {"key": None, "value": b"no key"},
        {"key": b"tombstone", "value": None},
        {"value": b"", "key": b""},
    ]
    delivered = produce(broker, topic, records)
    assert [m.offset() for m in delivered] == [0, 1, 2, 3]
    got = consume_all(broker, topic, 4)
    assert [(m.key(), m.value()) for m in got] == [(b"k1", b"v1"), (None, b"no key"), (b"tombstone", None),
                                                   (b"", b"")]
    assert got[0].headers() == [("h", b"x"), ("h2", None)]
    assert got[0].timestamp() == (1, 1_700_000_000_123)
    assert [m.offset() for m in got] == [0, 1, 2, 3]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip(broker: BrokerProcess, codec: str) -> None:
    topic = new_topic(broker)
    values = [f"value-{i}-".encode() * 20 for i in range(500)]
    produce(broker, topic, [{"value": v, "key": str(i).encode()} for i, v in enumerate(values)],
            **{"compression.type": codec, "linger.ms": 50})
    got = consume_all(broker, topic, 500)
    assert [m.value() for m in got] == values
    assert [m.offset() for m in got] == list(range(500))


def test_consume_from_middle_of_compressed_batch(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    produce(broker, topic, [{"value": str(i).encode()} for i in range(100)],
            **{"compression.type": "gzip", "linger.ms": 100})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    c.assign([TopicPartition(topic, 0, 57)])
    msgs = []
    deadline = time.monotonic() + 20
    while len(msgs) < 43 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            msgs.append(m)
    c.close()
    assert [m.offset() for m in msgs] == list(range(57, 100))


def test_record_near_max_size_and_too_large(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    big = b"x" * (1_000_000)
    produce(broker, topic, [{"value": big}], **{"message.max.bytes": 2_000_000})
    got = consume_all(broker, topic, 1)
    assert got[0].value() == big
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 3_000_000})
    errs: list = []
    p.produce(topic, b"y" * 2_000_000, on_delivery=lambda e, m: errs.append(e))
    p.flush(30)
    assert errs and errs[0] is not None and errs[0].name() == "MSG_SIZE_TOO_LARGE"


def test_hundred_partitions(broker: BrokerProcess) -> None:
    topic = new_topic(broker, partitions=100)
    produce(broker, topic, [{"value": f"{p}".encode(), "partition": p} for p in range(100)])
    got = consume_all(broker, topic, 100, partitions=100)
    assert sorted((m.partition(), m.value()) for m in got) == sorted((p, f"{p}".encode()) for p in range(100))


def test_several_producers_at_once(broker: BrokerProcess) -> None:
    topic = new_topic(broker, partitions=3)

    def worker(i: int) -> None:
        produce(broker, topic, [{"value": f"{i}-{j}".encode(), "partition": j % 3} for j in range(300)])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    got = consume_all(broker, topic, 1200, partitions=3)
    assert sorted(m.value() for m in got) == sorted(f"{i}-{j}".encode() for i in range(4) for j in range(300))
    for p in range(3):
        offs = [m.offset() for m in got if m.partition() == p]
        assert offs == list(range(len(offs)))


def test_idempotent_producer(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    delivered = produce(broker, topic, [{"value": str(i).encode()} for i in range(1000)],
                        **{"enable.idempotence": True, "acks": "all"})
    assert len(delivered) == 1000
    got = consume_all(broker, topic, 1000)
    assert [m.value() for m in got] == [str(i).encode() for i in range(1000)]


def test_acks_zero_and_all(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    produce(broker, topic, [{"value": b"a0"}], acks=0)
    produce(broker, topic, [{"value": b"aall"}], acks="all")
    got = consume_all(broker, topic, 2)
    assert [m.value() for m in got] == [b"a0", b"aall"]


def test_min_insync_replicas_rejects_acks_all(broker: BrokerProcess) -> None:
    topic = new_topic(broker, config={"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "message.timeout.ms": 3000,
                  "retries": 0})
    errs: list = []
    p.produce(topic, b"x", on_delivery=lambda e, m: errs.append(e))
    p.flush(10)
    assert errs and errs[0] is not None
    assert errs[0].name() == "NOT_ENOUGH_REPLICAS"
    produce(broker, topic, [{"value": b"ok"}], acks=1)
    assert [m.value() for m in consume_all(broker, topic, 1)] == [b"ok"]


def test_offsets_for_times_and_watermarks(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    base = 1_700_000_000_000
    produce(broker, topic, [{"value": str(i).encode(), "timestamp": base + i * 1000} for i in range(10)],
            **{"linger.ms": 0})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 10)
    found = c.offsets_for_times([TopicPartition(topic, 0, base + 4500)], timeout=10)
    assert found[0].offset == 5
    found = c.offsets_for_times([TopicPartition(topic, 0, base + 99_000)], timeout=10)
    assert found[0].offset == -1  # past the end: no offset (librdkafka reports END as -1)
    c.close()


def test_auto_create_on_metadata_and_unknown_topic(broker: BrokerProcess) -> None:
    name = f"auto-{uuid.uuid4().hex[:8]}"
    produce(broker, name, [{"value": b"auto"}])
    assert [m.value() for m in consume_all(broker, name, 1)] == [b"auto"]


def test_kafka_python_round_trip(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = new_topic(broker, partitions=2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip")
    for i in range(50):
        producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2,
                      headers=[("n", str(i).encode())])
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10000)
    consumer.assign([KTP(topic, 0), KTP(topic, 1)])
    consumer.seek_to_beginning()
    got = []
    for m in consumer:
        got.append(m)
        if len(got) == 50:
            break
    consumer.close()
    assert sorted((m.key, m.value, m.headers[0][1]) for m in got) == sorted(
        (f"k{i}".encode(), f"v{i}".encode(), str(i).encode()) for i in range(50))


def test_aiokafka_round_trip(broker: BrokerProcess) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    topic = new_topic(broker)

    async def run() -> list:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await p.start()
        try:
            for i in range(20):
                await p.send_and_wait(topic, f"m{i}".encode(), key=b"k")
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            out = []
            while len(out) < 20:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 20)
                for msgs in batch.values():
                    out.extend(msgs)
            return out
        finally:
            await c.stop()

    got = asyncio.run(run())
    assert [m.value for m in got] == [f"m{i}".encode() for i in range(20)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_round_trip(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    lines = "\n".join(f"key{i}:value{i}" for i in range(10)) + "\n"
    subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-K:", "-z", "lz4"], input=lines.encode(),
                   check=True, timeout=30)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f",
                          "%k=%s@%o\n"], capture_output=True, check=True, timeout=30)
    assert out.stdout.decode().splitlines() == [f"key{i}=value{i}@{i}" for i in range(10)]
    meta = subprocess.run(["kcat", "-b", broker.bootstrap, "-L", "-t", topic], capture_output=True, check=True,
                          timeout=30)
    assert "1 partitions" in meta.stdout.decode()
