"""Damaged files at rest and descriptor use: recovery cuts only what is damaged; ~1 descriptor per segment."""

from __future__ import annotations

import glob
import os
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.integration.test_admin_and_retention import watermarks
from tests.integration.test_produce_consume import consume_all, new_topic, produce
from tests.support.broker import BrokerProcess


def consume_through(broker: BrokerProcess, topic: str, last: int, timeout: float = 30) -> list:
    """Partition 0's records up to offset `last`. Stops at that offset, not at a count: with records
    dropped a count is never reached and the read would wait out its whole timeout."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list = []
    deadline = time.monotonic() + timeout
    try:
        while not (out and out[-1].offset() >= last) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            out.append(m)
    finally:
        c.close()
    return out


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def segment_files(data_dir: str, topic: str = "*") -> list[str]:
    return glob.glob(os.path.join(data_dir, f"{topic}-*", "*.log"))


def test_damaged_older_segment_loses_only_its_damaged_records(broker_factory) -> None:  # noqa: ANN001
    """A flipped payload byte plus an odd-length .index in an old segment: later segments survive."""
    b = broker_factory({"log.segment.bytes": 60_000})
    topic = new_topic(b)
    values = [f"{i:06d}".encode() + b"v" * 200 for i in range(5000)]
    produce(b, topic, [{"value": v} for v in values], **{"batch.num.messages": 50})
    b.stop()
    part_dir = os.path.join(b.data_dir, f"{topic}-0")
    logs = sorted(glob.glob(os.path.join(part_dir, "*.log")))
    assert len(logs) >= 5
    victim = logs[1]
    next_base = int(os.path.basename(logs[2]).split(".")[0])
    # Flip one payload byte in the middle of the victim segment, and tear its offset index.
    size = os.path.getsize(victim)
    with open(victim, "r+b") as f:
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0x55]))
    with open(victim[: -len(".log")] + ".index", "ab") as f:
        f.write(b"\x01\x02\x03")
    b.start()
    low, high = watermarks(b, topic)
    assert (low, high) == (0, 5000)  # the high watermark does not fall back
    got = consume_through(b, topic, 4999)
    offsets = [m.offset() for m in got]
    lost = sorted(set(range(5000)) - set(offsets))
    assert lost, "the damaged batch must not be served"
    # Only records of the damaged segment, from the damaged batch to its end, are gone.
    assert lost == list(range(lost[0], next_base))
    assert len(lost) < 5000 // len(logs)
    assert all(m.value() == values[m.offset()] for m in got)
    errors = [line for line in b.log_tail(400).splitlines() if " ERROR " in line]
    assert any(f"dropped offsets {lost[0]} to {lost[-1]}" in line for line in errors), errors
    # The log keeps appending after its end.
    assert produce(b, topic, [{"value": b"after"}])[0].offset() == 5000


def test_about_one_descriptor_per_segment(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory({"log.segment.bytes": 16_384})
    before = open_descriptors(b.pid)
    topic = new_topic(b, partitions=10)
    produce(b, topic, [{"value": b"x" * 1000, "partition": i % 10} for i in range(2000)],
            **{"batch.num.messages": 10})
    segments = len(segment_files(b.data_dir, topic))
    assert segments >= 100
    assert (open_descriptors(b.pid) - before) / segments <= 1.2
    # After a restart (clean, then kill -9) indexes load lazily: still about one per segment
    # (counting every segment: consumers create __consumer_offsets).
    b.restart()
    produce(b, topic, [{"value": b"y", "partition": 0}])
    assert (open_descriptors(b.pid) - before) / len(segment_files(b.data_dir)) <= 1.2
    b.kill9()
    b.start()
    assert watermarks(b, topic, 0) == (0, 201)
    assert len(consume_all(b, topic, 201, timeout=30)) == 201
    assert (open_descriptors(b.pid) - before) / len(segment_files(b.data_dir)) <= 1.2
