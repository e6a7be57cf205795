"""Every client's transactional round trip against a real broker.

confluent-kafka, kafka-python, aiokafka and kcat each commit one transaction and abort another;
a read_committed consumer sees exactly the committed records, a read_uncommitted one sees both.
confluent-kafka also runs a consume-transform-produce loop with send_offsets_to_transaction.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import BrokerProcess

TIMEOUT = 30


def new_topic(broker: BrokerProcess, partitions: int = 1) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(TIMEOUT)
    return name


def read_all(broker: BrokerProcess, topic: str, isolation: str, partitions: int = 1) -> list[bytes]:
    """Every record a consumer with ``isolation`` gets, from the start up to the current end."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        at_eof: set[int] = set()
        while len(at_eof) < partitions:
            m = c.poll(TIMEOUT)
            assert m is not None, f"no end of partition reached; got {out}"
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    at_eof.add(m.partition())
                    continue
                raise AssertionError(m.error())
            at_eof.discard(m.partition())
            out.append(m.value())
        return out
    finally:
        c.close()


def assert_committed_only(broker: BrokerProcess, topic: str, committed: list[bytes], aborted: list[bytes]) -> None:
    assert sorted(read_all(broker, topic, "read_committed")) == sorted(committed)
    assert sorted(read_all(broker, topic, "read_uncommitted")) == sorted(committed + aborted)


def test_confluent_kafka_commit_and_abort(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"ck-{uuid.uuid4().hex[:6]}"})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, f"c{i}".encode())
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, f"a{i}".encode())
    p.flush(TIMEOUT)
    p.abort_transaction(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, b"c5")
    p.commit_transaction(TIMEOUT)
    assert_committed_only(broker, topic, [f"c{i}".encode() for i in range(6)], [f"a{i}".encode() for i in range(3)])


def test_kafka_python_commit_and_abort(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = new_topic(broker)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:6]}")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            p.send(topic, f"c{i}".encode())
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"a0")
        p.flush()
        p.abort_transaction()
    finally:
        p.close(timeout=10)
    committed, aborted = [f"c{i}".encode() for i in range(4)], [b"a0"]
    assert_committed_only(broker, topic, committed, aborted)
    c = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                      auto_offset_reset="earliest", consumer_timeout_ms=5000, enable_auto_commit=False)
    try:
        assert sorted(m.value for m in c) == sorted(committed)
    finally:
        c.close()


def test_aiokafka_commit_and_abort(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = new_topic(broker)

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"ak-{uuid.uuid4().hex[:6]}")
        await p.start()
        try:
            async with p.transaction():
                for i in range(3):
                    await p.send(topic, f"c{i}".encode())
            await p.begin_transaction()
            await p.send_and_wait(topic, b"a0")
            await p.abort_transaction()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            got: list[bytes] = []
            batches = await c.getmany(timeout_ms=5000)
            while batches:
                got.extend(m.value for msgs in batches.values() for m in msgs)
                batches = await c.getmany(timeout_ms=1000)
            return got
        finally:
            await c.stop()

    got = asyncio.run(asyncio.wait_for(run(), 60))
    committed = [f"c{i}".encode() for i in range(3)]
    assert sorted(got) == sorted(committed)
    assert_committed_only(broker, topic, committed, [b"a0"])


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_transactional_producer_and_read_committed_consumer(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    lines = [f"k{i}" for i in range(10)]
    out = subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-X",
                          f"transactional.id=kc-{uuid.uuid4().hex[:6]}"],
                         input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # an aborted transaction from another client in between
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"ab-{uuid.uuid4().hex[:6]}"})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, b"aborted")
    p.flush(TIMEOUT)
    p.abort_transaction(TIMEOUT)
    read = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-o", "beginning", "-e",
                           "-X", "isolation.level=read_committed", "-f", "%s\n"],
                          capture_output=True, text=True, timeout=60)
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == lines
    assert_committed_only(broker, topic, [s.encode() for s in lines], [b"aborted"])


def test_consume_transform_produce_with_offsets_in_the_transaction(broker: BrokerProcess) -> None:
    source, sink = new_topic(broker), new_topic(broker)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        plain.produce(source, f"{i}".encode())
    plain.flush(TIMEOUT)
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"ctp-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(TIMEOUT)
    consumer.subscribe([source])
    try:
        done = 0
        round_no = 0
        while done < 20:
            msgs = consumer.consume(5, TIMEOUT)
            assert msgs, "input ran dry"
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, b"x" + m.value())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), TIMEOUT)
            round_no += 1
            if round_no == 2:
                producer.abort_transaction(TIMEOUT)  # its input is read again: rewind to the committed offsets
                committed = consumer.committed(consumer.assignment(), TIMEOUT)
                for tp in committed:
                    consumer.seek(tp)
                continue
            producer.commit_transaction(TIMEOUT)
            done += len(msgs)
    finally:
        consumer.close()
    assert sorted(read_all(broker, sink, "read_committed")) == sorted(b"x" + str(i).encode() for i in range(20))
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        [tp] = check.committed([TopicPartition(source, 0)], TIMEOUT)
        assert tp.offset == 20
    finally:
        check.close()
