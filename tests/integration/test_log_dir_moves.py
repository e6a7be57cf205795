"""Moving a replica between the log dirs of one broker (AlterReplicaLogDirs / DescribeLogDirs, KIP-113).

A real broker with two log.dirs, confluent-kafka producing while the partition moves, and the
requests sent as kafka-python's message classes over a bare socket.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kafka.errors as Errors
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.protocol.admin import AlterReplicaLogDirsRequest, DescribeLogDirsRequest

from strom.cli.log_dirs import alter_replica_log_dirs
from tests.integration.test_api_version_matrix import call
from tests.integration.test_cli import strom
from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess

Dir = AlterReplicaLogDirsRequest.AlterReplicaLogDir
DirTopic = Dir.AlterReplicaLogDirTopic
# Pace the copy so that it spans the producing (and a crash) on any machine; the move is still seconds.
THROTTLE = 1_000_000
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
TOPIC_CONFIG = {"segment.bytes": str(256 * 1024), "file.delete.delay.ms": "0"}


def alter(b: BrokerProcess, topic: str, partition: int, path: str, version: int = 1) -> int:
    resp = call(b, AlterReplicaLogDirsRequest(dirs=[Dir(path=path, topics=[DirTopic(name=topic,
                                                                                  partitions=[partition])])]),
                version)
    [result] = resp.results
    assert result.topic_name == topic
    [part] = result.partitions
    assert part.partition_index == partition
    return part.error_code


def describe(b: BrokerProcess, topic: str) -> dict[str, list[Any]]:
    """log dir -> the partitions of ``topic`` DescribeLogDirs lists there."""
    resp = call(b, DescribeLogDirsRequest(topics=[DescribeLogDirsRequest.DescribableLogDirTopic(
        topic=topic, partitions=[0])]), 1)
    assert resp.error_code == 0
    return {r.log_dir: [p for t in r.topics if t.name == topic for p in t.partitions] for r in resp.results}


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


class BackgroundProducer:
    """confluent-kafka, idempotent, acks=all, producing numbered records until stopped; keeps what was acknowledged."""

    def __init__(self, b: BrokerProcess, topic: str) -> None:
        self.topic = topic
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self._producer = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "acks": "all",
                                   "linger.ms": 2, "message.timeout.ms": 120_000})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(self.topic, value=b"live-%08d" % i + b"x" * 200, partition=0,
                                       on_delivery=self._delivered)
                i += 1
            except BufferError:
                pass
            self._producer.poll(0.002)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append(msg.value())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(60) == 0


def fill(b: BrokerProcess, topic: str, n: int, size: int = 1000) -> list[bytes]:
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    values = [b"fill-%08d" % i + b"y" * size for i in range(n)]
    for v in values:
        while True:
            try:
                p.produce(topic, value=v, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    return values


def consume_all(b: BrokerProcess, topic: str, timeout: float = 60) -> list[bytes]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
    c.assign([TopicPartition(topic, 0, low)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    offset = low
    while offset < high and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert not m.error(), m.error()
        out.append(m.value())
        offset = m.offset() + 1
    c.close()
    return out


def partition_dirs(log_dir: Path, topic: str) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir() if p.name.startswith(f"{topic}-0"))


@pytest.fixture
def two_dirs(tmp_path: Path) -> Any:
    d1, d2 = tmp_path / "data", tmp_path / "data2"
    b = BrokerProcess(tmp_path, {"log.dirs": f"{d1},{d2}",
                                 "replica.alter.log.dirs.io.max.bytes.per.second": THROTTLE})
    b.start()
    try:
        yield b, d1, d2
    finally:
        b.close()


def where(d1: Path, d2: Path, topic: str) -> tuple[Path, Path]:
    """(the dir holding partition 0, the other one)."""
    return (d1, d2) if (d1 / f"{topic}-0").is_dir() else (d2, d1)


def test_move_while_producing_keeps_every_acknowledged_record(two_dirs: Any) -> None:
    b, d1, d2 = two_dirs
    topic = new_topic(b, config=TOPIC_CONFIG)
    src, dst = where(d1, d2, topic)
    filled = fill(b, topic, 3000)  # ~3 MB: about three seconds of copying at the throttle
    producer = BackgroundProducer(b, topic)
    try:
        wait_for("the producer to get going", lambda: len(producer.acked) > 50)
        assert alter(b, topic, 0, str(dst)) == 0
        # While it copies, DescribeLogDirs shows the future replica in the target dir, lagging.
        future = wait_for("the future replica", lambda: [p for p in describe(b, topic).get(str(dst), [])
                                                         if p.is_future_key])
        assert future[0].offset_lag > 0
        assert any(p.name.endswith("-future") for p in dst.iterdir())
        wait_for("the move to finish", lambda: (dst / f"{topic}-0").is_dir() and not
                 [p for ps in describe(b, topic).values() for p in ps if p.is_future_key])
        time.sleep(0.5)  # some records after the swap, too
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]
    moved_while_live = len(producer.acked)
    assert moved_while_live > 50
    # Every acknowledged record is readable, once, in order.
    values = consume_all(b, topic)
    assert values[: len(filled)] == filled
    assert values[len(filled):] == producer.acked
    # The partition lives in the target dir only; DescribeLogDirs agrees.
    wait_for("the old copy to be deleted", lambda: partition_dirs(src, topic) == [])
    assert partition_dirs(dst, topic) == [f"{topic}-0"]
    listed = describe(b, topic)
    assert listed[str(src)] == []
    [current] = listed[str(dst)]
    assert not current.is_future_key and current.partition_size > 3_000_000
    # And after a restart, from the new dir.
    assert b.stop() == 0
    b.start()
    assert consume_all(b, topic) == values
    assert partition_dirs(src, topic) == []


def test_a_crash_mid_move_resumes_and_loses_nothing(two_dirs: Any) -> None:
    b, d1, d2 = two_dirs
    topic = new_topic(b, config=TOPIC_CONFIG)
    src, dst = where(d1, d2, topic)
    filled = fill(b, topic, 6000)  # ~6 MB: six seconds of copying at the throttle
    assert alter(b, topic, 0, str(dst)) == 0
    wait_for("part of the copy", lambda: [p for p in describe(b, topic).get(str(dst), [])
                                          if p.is_future_key and p.partition_size > 500_000])
    b.kill9()
    b.start()
    # The future log was found at load and the copy goes on where it was.
    assert [p.name for p in dst.iterdir() if p.name.startswith(f"{topic}-0.") and p.name.endswith("-future")]
    producer = BackgroundProducer(b, topic)
    try:
        wait_for("the move to finish after the restart", lambda: (dst / f"{topic}-0").is_dir() and not
                 [p for ps in describe(b, topic).values() for p in ps if p.is_future_key])
        time.sleep(0.3)
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]
    values = consume_all(b, topic)
    assert values == filled + producer.acked
    wait_for("the old copy to be deleted", lambda: partition_dirs(src, topic) == [])
    assert "resuming the move of" in b.log_path.read_text(errors="replace")


def test_errors_and_no_ops(two_dirs: Any) -> None:
    b, d1, d2 = two_dirs
    topic = new_topic(b, config=TOPIC_CONFIG)
    src, dst = where(d1, d2, topic)
    fill(b, topic, 10)
    # Unknown, relative, and not-configured paths.
    assert alter(b, topic, 0, str(d1.parent / "elsewhere")) == Errors.LogDirNotFoundError.errno
    assert alter(b, topic, 0, dst.name) == Errors.LogDirNotFoundError.errno
    # A partition the cluster does not have.
    assert alter(b, topic, 7, str(dst)) == Errors.UnknownTopicOrPartitionError.errno
    assert alter(b, "no-such-topic", 0, str(dst)) == Errors.UnknownTopicOrPartitionError.errno
    # Already there: nothing to do, no future log.
    for version in (0, 1, 2):
        assert alter(b, topic, 0, str(src), version) == 0
    assert not [p for ps in describe(b, topic).values() for p in ps if p.is_future_key]
    assert partition_dirs(dst, topic) == []
    # v0 and v2 move as v1 does.
    assert alter(b, topic, 0, str(dst), version=2) == 0
    wait_for("the move", lambda: partition_dirs(dst, topic) == [f"{topic}-0"] and partition_dirs(src, topic) == [])
    assert alter(b, topic, 0, str(src), version=0) == 0
    wait_for("the move back", lambda: partition_dirs(src, topic) == [f"{topic}-0"]
             and partition_dirs(dst, topic) == [])
    assert len(consume_all(b, topic)) == 10


def test_an_offline_target_dir_is_a_storage_error(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "data", tmp_path / "data2"
    b = BrokerProcess(tmp_path, {"log.dirs": f"{d1},{d2}"})
    try:
        b.start()
        topic = new_topic(b, partitions=2, config=TOPIC_CONFIG)
        assert (d1 / f"{topic}-0").is_dir()
        assert b.stop() == 0
        # The second dir fails (a path that is no longer a directory).
        shutil.rmtree(d2)
        d2.write_text("not a directory")
        b.start()
        assert alter(b, topic, 0, str(d2)) == Errors.KafkaStorageError.errno
        assert alter(b, topic, 1, str(d1)) == Errors.KafkaStorageError.errno  # its replica is offline
    finally:
        b.close()


def test_the_tools_move_and_describe(two_dirs: Any) -> None:
    b, d1, d2 = two_dirs
    topic = new_topic(b, partitions=2, config=TOPIC_CONFIG)
    fill(b, topic, 20)
    src, dst = where(d1, d2, topic)
    # What a reassignment JSON's "log_dirs" asks for, through the function the reassignment tool calls.
    codes = alter_replica_log_dirs(b.bootstrap, {(topic, 0, 0): str(dst), ("no-such-topic", 0, 0): str(dst)})
    assert codes == {(topic, 0, 0): 0, ("no-such-topic", 0, 0): Errors.UnknownTopicOrPartitionError.errno}
    wait_for("the move", lambda: partition_dirs(dst, topic) == [f"{topic}-0"])
    result = strom("log-dirs", "--describe", "--bootstrap-server", b.bootstrap, "--topic-list", topic)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 0"]
    described = json.loads(lines[2])
    [broker] = described["brokers"]
    assert broker["broker"] == 0
    by_dir = {d["logDir"]: d for d in broker["logDirs"]}
    assert by_dir[str(dst)]["error"] is None
    parts = {p["partition"]: p for p in by_dir[str(dst)]["partitions"]}
    assert parts[f"{topic}-0"]["isFuture"] is False and parts[f"{topic}-0"]["size"] > 20_000
    assert f"{topic}-0" not in {p["partition"] for p in by_dir[str(src)]["partitions"]}
    # Unknown broker: one error line, exit 1.
    bad = strom("log-dirs", "--describe", "--bootstrap-server", b.bootstrap, "--broker-list", "5")
    assert bad.returncode == 1 and bad.stderr.startswith("Error: Broker 5 is not in the cluster")


def test_a_crash_right_after_the_move_keeps_the_log_start_offset(two_dirs: Any) -> None:
    b, d1, d2 = two_dirs
    topic = new_topic(b, config=TOPIC_CONFIG)
    src, dst = where(d1, d2, topic)
    filled = fill(b, topic, 100)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    [deleted] = admin.delete_records([TopicPartition(topic, 0, 40)]).values()
    assert deleted.result(timeout=30).low_watermark == 40
    assert alter(b, topic, 0, str(dst)) == 0
    wait_for("the move", lambda: f"moved {topic}-0 to" in b.log_path.read_text(errors="replace"))
    b.kill9()  # long before the periodic checkpoint
    b.start()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=15) == (40, 100)
    finally:
        c.close()
    assert consume_all(b, topic) == filled[40:]
    assert partition_dirs(dst, topic) == [f"{topic}-0"]


def test_moving_needs_alter_on_the_cluster(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "data", tmp_path / "data2"
    # An authorizer and no ACL: the anonymous client may do nothing.
    b = BrokerProcess(tmp_path, {"log.dirs": f"{d1},{d2}", "authorizer.class.name": AUTHORIZER})
    try:
        b.start()
        assert alter(b, "any-topic", 0, str(d2)) == Errors.ClusterAuthorizationFailedError.errno
        assert not [p for p in d2.iterdir() if p.name.endswith("-future")]
    finally:
        b.close()


def test_a_move_cancelled_and_asked_for_again_happens(two_dirs: Any) -> None:
    b, d1, d2 = two_dirs
    topic = new_topic(b, config=TOPIC_CONFIG)
    src, dst = where(d1, d2, topic)
    filled = fill(b, topic, 3000)  # about three seconds of copying at the throttle
    assert alter(b, topic, 0, str(dst)) == 0
    wait_for("the future replica", lambda: [p for p in describe(b, topic).get(str(dst), []) if p.is_future_key])
    assert alter(b, topic, 0, str(src)) == 0  # back where it is: the move is cancelled
    assert alter(b, topic, 0, str(dst)) == 0  # and asked for again at once
    wait_for("the move", lambda: partition_dirs(dst, topic) == [f"{topic}-0"] and partition_dirs(src, topic) == [],
             timeout=60)
    assert consume_all(b, topic) == filled
    # Cancelled for good: the future log goes, the replica stays.
    assert alter(b, topic, 0, str(src)) == 0
    wait_for("the future replica", lambda: [p for p in describe(b, topic).get(str(src), []) if p.is_future_key])
    assert alter(b, topic, 0, str(dst)) == 0
    wait_for("the future log to go", lambda: partition_dirs(src, topic) == [])
    assert partition_dirs(dst, topic) == [f"{topic}-0"]
    assert not [p for ps in describe(b, topic).values() for p in ps if p.is_future_key]


def test_a_move_finishes_while_the_partition_takes_writes_faster_than_the_throttle(tmp_path: Path) -> None:
    """The throttle paces the backlog, not the writes that arrive during the move: with a producer far
    above the throttle, a copy paced as a whole would never catch up and the move would never end."""
    d1, d2 = tmp_path / "data", tmp_path / "data2"
    throttle = 50_000
    b = BrokerProcess(tmp_path, {"log.dirs": f"{d1},{d2}",
                                 "replica.alter.log.dirs.io.max.bytes.per.second": throttle})
    b.start()
    try:
        topic = new_topic(b, config=TOPIC_CONFIG)
        src, dst = where(d1, d2, topic)
        filled = fill(b, topic, 100)  # ~100 KB: two seconds of copying at the throttle
        producer = BackgroundProducer(b, topic)
        try:
            wait_for("the producer to get going", lambda: len(producer.acked) > 500)
            assert alter(b, topic, 0, str(dst)) == 0
            wait_for("the move to finish", lambda: (dst / f"{topic}-0").is_dir() and not
                     [p for ps in describe(b, topic).values() for p in ps if p.is_future_key], timeout=90)
            written = len(producer.acked)
            wait_for("writes after the move", lambda: len(producer.acked) > written + 100)
        finally:
            producer.stop()
        assert not producer.errors, producer.errors[:5]
        assert consume_all(b, topic) == filled + producer.acked
        wait_for("the old copy to be deleted", lambda: partition_dirs(src, topic) == [])
    finally:
        b.close()
