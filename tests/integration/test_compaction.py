"""Log compaction on a real broker: latest value per key, tombstones, offsets, __consumer_offsets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import BrokerProcess

# Run the cleaner often so the tests see compaction within seconds.
OVERRIDES: dict[str, object] = {"offsets.topic.segment.bytes": 2048, "offsets.topic.num.partitions": 1,
                                "log.cleaner.backoff.ms": 200}
DEADLINE = 20


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("compaction"), OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.close()


def compacted_topic(broker: BrokerProcess, **configs: str) -> str:
    name = f"compact-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    conf = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
            "file.delete.delay.ms": "0", **configs}
    for f in admin.create_topics([NewTopic(name, 1, 1, config=conf)]).values():
        f.result(15)
    return name


def read_all(broker: BrokerProcess, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    out = []
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # partition EOF
                    break
                raise AssertionError(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
            if msg.offset() >= high - 1:
                break
    finally:
        c.close()
    return out


def wait_for(cond: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        result = cond()
        if result:
            return result
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def produce(broker: BrokerProcess, topic: str, records: list[tuple[bytes, bytes | None]]) -> dict[bytes, int]:
    """Returns the offset of the last write of each key."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    offsets: dict[bytes, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None
        offsets[msg.key()] = max(offsets.get(msg.key(), -1), msg.offset())

    for k, v in records:
        p.produce(topic, key=k, value=v, on_delivery=delivered)
        p.poll(0)
    assert p.flush(15) == 0
    return offsets


def test_latest_value_per_key_survives_with_its_offset(cbroker: BrokerProcess) -> None:
    topic = compacted_topic(cbroker)
    records = [(f"k{i % 5}".encode(), f"value-{i}".encode() * 4) for i in range(200)]
    last_offsets = produce(cbroker, topic, records)
    # a final filler batch so the segments holding the keys are no longer the active one
    produce(cbroker, topic, [(f"filler{i}".encode(), b"x" * 100) for i in range(20)])
    def compacted() -> list[tuple[int, bytes | None, bytes | None]] | None:
        rows = read_all(cbroker, topic)
        key_rows = [r for r in rows if r[1] and r[1].startswith(b"k")]
        return rows if len(key_rows) < 50 else None

    rows = wait_for(compacted, "the cleaner to compact the topic")
    latest = {k: v for k, v in records}
    by_key: dict[bytes, list[tuple[int, bytes | None]]] = {}
    for off, k, v in rows:
        by_key.setdefault(k or b"", []).append((off, v))
    for k, v in latest.items():
        assert by_key[k][-1] == (last_offsets[k], v)  # latest value, at its original offset
    offsets = [r[0] for r in rows]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def test_tombstones_disappear_after_delete_retention(cbroker: BrokerProcess) -> None:
    topic = compacted_topic(cbroker, **{"delete.retention.ms": "1000"})
    produce(cbroker, topic, [(f"k{i % 3}".encode(), b"v" * 60) for i in range(30)])
    produce(cbroker, topic, [(b"k0", None)])
    produce(cbroker, topic, [(f"filler{i}".encode(), b"x" * 100) for i in range(20)])

    def k0_gone() -> bool:
        rows = read_all(cbroker, topic)
        return bool(rows) and all(k != b"k0" for _, k, _ in rows) and any(k == b"k1" for _, k, _ in rows)

    wait_for(k0_gone, "the tombstone of k0 (and its values) to be removed")


def test_consumer_offsets_are_compacted_and_still_load(cbroker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": cbroker.bootstrap})
    for f in admin.create_topics([NewTopic("plain", 1, 1)]).values():
        f.result(15)
    c = Consumer({"bootstrap.servers": cbroker.bootstrap, "group.id": "committer"})
    for i in range(300):
        c.commit(offsets=[TopicPartition("plain", 0, i)], asynchronous=False)
    c.close()

    def shrunk() -> bool:
        rows = read_all(cbroker, "__consumer_offsets")
        return 0 < len(rows) < 150

    wait_for(shrunk, "__consumer_offsets to be compacted")
    cbroker.restart()
    c = Consumer({"bootstrap.servers": cbroker.bootstrap, "group.id": "committer"})
    try:
        assert c.committed([TopicPartition("plain", 0)], 15)[0].offset == 299
    finally:
        c.close()
