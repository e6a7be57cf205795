"""A new leader whose high watermark has not caught up answers ListOffsets "latest" with OFFSET_NOT_AVAILABLE.

Leadership moves (a controlled shutdown) to a follower that knows the HW only as its leader last sent it,
while the other in-sync replica is frozen (SIGSTOP): the new leader's HW stays below the start of its
leader epoch until that replica fetches. Meanwhile ListOffsets latest / by timestamp answer error 78
(retriable) rather than a stale HW, and real clients retry until the HW has caught up: librdkafka's consumer
and kafka-python by themselves, librdkafka's watermark query through its caller (it hands the error over).
Every answer is the full count, never the stale one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import kafka.errors as Errors
import pytest
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.consumer import ListOffsetsRequest

from strom.protocol.inter_broker import build
from tests.integration.test_api_version_matrix import call
from tests.support.checker import watermark_offsets
from tests.support.cluster import ClusterProcess
from tests.support.replicas import IDEMPOTENT, WHOLE_LOG, batches_below, create_topic

pytestmark = [pytest.mark.cluster]

ACKED, PENDING = 500, 200
LATEST, EARLIEST = -1, -2


def list_offset(cluster: ClusterProcess, broker: int, topic: str, timestamp: int) -> tuple[int, int]:
    """(error code, offset) of one ListOffsets v7 for partition 0, sent to ``broker``."""
    request = build(ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=[
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}])
    [t] = call(cluster.broker(broker), request, 7).topics
    [p] = t.partitions
    return p.error_code, p.offset


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:  # reported by the assertion on the result
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_new_leader_answers_latest_only_once_its_high_watermark_caught_up(cluster_factory) -> None:  # noqa: ANN001
    cluster: ClusterProcess = cluster_factory(3, session_timeout_ms=30_000,
                                              overrides={"replica.lag.time.max.ms": 120_000})
    # The new leader is the controller and neither the old leader nor the frozen replica is: the
    # controlled shutdown is handled at once, and nothing but the frozen replica holds the HW back.
    new_leader = cluster.wait_controller()
    old_leader, frozen = sorted(set(cluster.broker_ids) - {new_leader})
    topic = create_topic(cluster, replicas=[[old_leader, new_leader, frozen]], config={"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, **IDEMPOTENT, "log_level": 0})
    for i in range(ACKED):
        producer.produce(topic, b"acked-%05d" % i, partition=0)
    assert producer.flush(60) == 0

    bootstrap = cluster.broker(new_leader).bootstrap
    python = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=90_000)
    tp, python_tp = TopicPartition(topic, 0), KafkaTopicPartition(topic, 0)
    assert python.end_offsets([python_tp])[python_tp] == ACKED  # connected before the fault

    cluster.sigstop(frozen)  # in the ISR still: the HW stays at ACKED, records beyond it are not acknowledged
    readers: list[tuple[str, threading.Thread, list[Any]]] = []
    tail_stats: list[str] = []
    try:
        for i in range(PENDING):
            producer.produce(topic, b"pending-%05d" % i, partition=0)
        producer.poll(0)
        cluster.wait_for(lambda: batches_below(cluster.log_dir(new_leader), topic, 0, WHOLE_LOG)[1]
                         >= ACKED + PENDING, 60, "the follower holding the records not acknowledged yet")
        assert list_offset(cluster, old_leader, topic, LATEST) == (0, ACKED)
        cluster.stop(old_leader)  # controlled shutdown: the follower leads, the frozen replica still in the ISR
        state = cluster.wait_leader(topic, 0, not_in=[old_leader])
        assert state.leader == new_leader and frozen in state.isr
        # Its HW (ACKED, as the old leader sent it) is below the start of its epoch (its LEO).
        answer = cluster.wait_for(lambda: (lambda r: r if r[0] != Errors.NotLeaderForPartitionError.errno else None)(
            list_offset(cluster, new_leader, topic, LATEST)), 60, "the new leader to take over")
        assert answer == (Errors.OffsetNotAvailableError.errno, -1)
        assert list_offset(cluster, new_leader, topic, int(time.time() * 1000) + 60_000)[0] == \
            Errors.OffsetNotAvailableError.errno  # a timestamp past every record: "latest" too
        assert list_offset(cluster, new_leader, topic, EARLIEST) == (0, 0)
        # Real clients asking now retry until the HW has caught up (librdkafka ones made now: the old leader
        # is not theirs to ask).
        watermarks = Consumer({"bootstrap.servers": bootstrap, "group.id": "latest-probe", "log_level": 0})
        tailer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tail", "enable.auto.commit": False,
                           "log_level": 0, "statistics.interval.ms": 100, "stats_cb": tail_stats.append})
        readers.append(("librdkafka watermarks", *in_thread(lambda: watermark_offsets(watermarks, tp, 90)[1])))
        readers.append(("kafka-python end_offsets", *in_thread(lambda: python.end_offsets([python_tp])[python_tp])))
        tailer.assign([TopicPartition(topic, 0, OFFSET_END)])  # start at the end: a ListOffsets latest
        tailer.poll(1)  # it asks while the HW lags (no assertion on how long anything takes)
    finally:
        cluster.sigcont(frozen)
    cluster.wait_for(lambda: list_offset(cluster, new_leader, topic, LATEST) == (0, ACKED + PENDING), 60,
                     "the new leader's HW after the frozen replica fetched")
    for name, thread, out in readers:
        thread.join(90)
        assert out == [ACKED + PENDING], (name, out)  # never the stale ACKED
    assert producer.flush(60) == 0

    def tail_position() -> int | None:
        """Where the consumer fetches from once it knows (librdkafka's statistics: nothing is consumed yet)."""
        tailer.poll(0.2)
        part = json.loads(tail_stats[-1])["topics"][topic]["partitions"]["0"] if tail_stats else {}
        return part["next_offset"] if part.get("fetch_state") == "active" else None

    # The consumer that started at the end starts past the records acknowledged by the new leader, not
    # at the stale HW; the next record it reads is the next one written.
    assert cluster.wait_for(tail_position, 60, "the tailing consumer's start offset") == ACKED + PENDING
    producer.produce(topic, b"after", partition=0)
    assert producer.flush(60) == 0
    first = cluster.wait_for(lambda: tailer.poll(1), 60, "a record for the tailing consumer")
    assert not first.error() and (first.offset(), first.value()) == (ACKED + PENDING, b"after")
    for consumer in (watermarks, tailer):
        consumer.close()
    python.close()
