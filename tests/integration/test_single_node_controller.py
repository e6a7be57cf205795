"""A single node is a one-broker cluster: its topics become partitions through LeaderAndIsr from an
in-process controller, with every file written off the event loop (docs/decisions/0037-one-control-plane.md).

What a user sees: while a wide topic is created or deleted, other connections keep getting answers;
the topic is usable at once, and survives a restart with its data.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.protocol.metadata import ApiVersionsRequest

from tests.integration.test_api_version_matrix import call
from tests.integration.test_full_disk import STORAGE_ERROR, _produce_req
from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient

WIDE = 1500  # partitions: seconds of file work on a loaded machine


def _wait_for_log(broker: BrokerProcess, text: str, deadline: float) -> None:
    while text not in broker.log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"the broker never logged {text!r}"
        time.sleep(0.005)


def _answers_while(broker: BrokerProcess, started: str, future) -> int:  # noqa: ANN001
    """ApiVersions answered on another connection from when the broker logged ``started`` until
    ``future`` (an admin request) is done."""
    pinger = RawClient(broker)
    try:
        pinger.request(ApiVersionsRequest[0](), 0)
        _wait_for_log(broker, started, time.monotonic() + 120)
        answered = 0
        while not future.done():
            pinger.request(ApiVersionsRequest[0](), 0)
            answered += 1
        future.result()
        return answered
    finally:
        pinger.close()


def test_wide_create_and_delete_leave_other_connections_answered(broker: BrokerProcess) -> None:
    """CreateTopics used to create every log, write the metadata file and attach the partitions on the
    loop, and DeleteTopics to tombstone every log there: no other client got an answer meanwhile."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.list_topics(timeout=30)  # the admin connection is up before the timed part
    topic = "wide"
    created = admin.create_topics([NewTopic(topic, WIDE, 1)], operation_timeout=120, request_timeout=180)[topic]
    during_create = _answers_while(broker, f"creating topic {topic} with {WIDE} partitions", created)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(0, WIDE, 100):
        p.produce(topic, f"v{i}".encode(), partition=i)
    assert p.flush(60) == 0
    deleted = admin.delete_topics([topic], operation_timeout=120, request_timeout=180)[topic]
    during_delete = _answers_while(broker, f"deleting topic {topic}", deleted)
    assert topic not in admin.list_topics(timeout=30).topics
    assert during_create >= 5, f"only {during_create} answers to another connection during the creation"
    assert during_delete >= 5, f"only {during_delete} answers to another connection during the deletion"


def test_created_partitions_serve_at_once_and_after_a_restart(broker: BrokerProcess) -> None:
    """Leaders exist when CreateTopics / CreatePartitions answer, and a restart attaches the same
    partitions (through the same LeaderAndIsr path) with their data and leader epoch."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = "grown"
    admin.create_topics([NewTopic(topic, 2, 1)], operation_timeout=60)[topic].result(60)
    admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=60)[topic].result(60)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for part in range(4):
        p.produce(topic, f"before-{part}".encode(), partition=part)
    assert p.flush(60) == 0
    broker.restart()
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for part in range(4):
        p.produce(topic, f"after-{part}".encode(), partition=part)
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, part, 0) for part in range(4)])
        got: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < 8 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.setdefault(m.partition(), []).append(m.value())
                assert m.leader_epoch() in (0, None)  # a single node's partitions keep epoch 0 across restarts
    finally:
        c.close()
    assert got == {part: [f"before-{part}".encode(), f"after-{part}".encode()] for part in range(4)}


def test_a_log_dir_back_at_restart_attaches_its_partitions_again(tmp_path: Path) -> None:
    """A dir unusable at start-up leaves its partitions offline (KAFKA_STORAGE_ERROR) and the others
    serving; repaired, the next start's LeaderAndIsr attaches them with their old data."""
    d1, d2 = tmp_path / "data", tmp_path / "data2"
    b = BrokerProcess(tmp_path, {"log.dirs": f"{d1},{d2}"})
    try:
        b.start()
        topic = new_topic(b, partitions=2)
        assert (d2 / f"{topic}-1").is_dir()
        assert _produce(b, topic, 1) == (0, 0)
        assert b.stop() == 0
        aside = tmp_path / "aside"
        d2.rename(aside)
        d2.write_text("not a directory")
        b.start()
        assert _produce(b, topic, 1)[0] == STORAGE_ERROR
        assert _produce(b, topic, 0) == (0, 0)
        assert b.stop() == 0
        d2.unlink()
        aside.rename(d2)
        b.start()
        assert _produce(b, topic, 1) == (0, 1)  # after the record written before the dir went away
        assert _produce(b, topic, 0) == (0, 1)
        assert b.stop() == 0
    finally:
        b.close()


def _produce(broker: BrokerProcess, topic: str, partition: int) -> tuple[int, int]:
    """(error code, base offset) of one acks=1 record."""
    res = call(broker, _produce_req(topic, partition), 7).responses[0].partition_responses[0]
    return res.error_code, res.base_offset
