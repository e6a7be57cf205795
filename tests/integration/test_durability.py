"""Restarts and kill -9: every acknowledged record survives, torn tails are cut, indexes rebuilt."""

from __future__ import annotations

import glob
import os
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.test_produce_consume import consume_all, new_topic, produce


def test_clean_restart_keeps_everything(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory({"log.segment.bytes": 20_000})
    topic = new_topic(b, partitions=2)
    produce(b, topic, [{"value": f"r{i}".encode(), "partition": i % 2} for i in range(2000)])
    b.restart()
    got = consume_all(b, topic, 2000, partitions=2)
    assert sorted(m.value() for m in got) == sorted(f"r{i}".encode() for i in range(2000))
    # topic id and configs survive too: a new produce continues the offsets
    produce(b, topic, [{"value": b"after", "partition": 0}])
    got = consume_all(b, topic, 2001, partitions=2)
    assert max(m.offset() for m in got if m.partition() == 0) == 1000


@pytest.mark.slow
def test_kill9_during_heavy_writes_loses_no_acknowledged_record(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory({"log.segment.bytes": 256 * 1024})
    topic = new_topic(b)
    acked: list[bytes] = []
    stop = threading.Event()

    def writer() -> None:
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "acks": 1,
                      "message.timeout.ms": 5000, "retries": 0})
        i = 0

        def cb(err, msg):  # noqa: ANN001
            if err is None:
                acked.append(msg.value())

        while not stop.is_set():
            try:
                p.produce(topic, f"{i:08d}".encode() + b"x" * 200, on_delivery=cb)
                i += 1
            except BufferError:
                p.poll(0.01)
            p.poll(0)
        p.flush(6)

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(3)
    b.kill9()
    stop.set()
    t.join(30)
    assert len(acked) > 1000
    # Tear the tail like a crash mid-write would: append half a batch to the active segment.
    part_dir = os.path.join(b.data_dir, f"{topic}-0")
    active = sorted(glob.glob(os.path.join(part_dir, "*.log")))[-1]
    with open(active, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x99\x00\x00\x10\x00garbage-torn-tail")
    for idx in glob.glob(os.path.join(part_dir, "*.index")):
        os.remove(idx)  # force index rebuild
    b.start()
    # Records written but not yet acknowledged when the broker died may survive too: read them all.
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "x"})
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.close()
    assert low == 0 and high >= len(acked)
    got = consume_all(b, topic, high, timeout=60)
    values = [m.value() for m in got]
    assert values[: len(acked)] == acked  # every acknowledged record, in order
    assert [m.offset() for m in got] == list(range(high))
    # the torn tail is gone and the log accepts new writes right after it
    delivered = produce(b, topic, [{"value": b"after-crash"}])
    assert delivered[0].offset() == high
    tail = consume_all(b, topic, high + 1, timeout=60)
    assert tail[-1].value() == b"after-crash" and tail[-1].offset() == high
    assert glob.glob(os.path.join(part_dir, "*.index"))
