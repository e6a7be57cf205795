"""Transactions on a real three-broker cluster: markers on remote leaders, and kill -9 under a copy loop.

(a) One transaction spans partitions led by brokers 1, 2 and 3, so the transaction coordinator
reaches at least two remote leaders with WriteTxnMarkers; read_committed sees only committed
records, the group's offsets sent with send_offsets_to_transaction appear only on commit, and
every replica's log holds the same COMMIT/ABORT markers (read from the segment files).
(b) The exactly-once copy loop of the single-broker crash test (tests/support/copy_loop.py) runs
while the broker leading the transactional id's `__transaction_state` partition (found with
FindCoordinator key type 1) is killed with SIGKILL and restarted, then the leader of an output
partition: afterwards the output, read read_committed, holds every input record exactly once.
"""

from __future__ import annotations

import os
import random
import struct
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from tests.support.cluster import ClusterProcess
from tests.support.exactly_once import (
    CopyLoopProcess,
    assert_exactly_once,
    committed_offsets,
    end_offsets,
    fill_input,
    read_committed,
    wait_progress,
)
from tests.support.raw_client import RawClient, decode
from tests.support.replicas import WHOLE_LOG, batches_below, create_topic, high_watermark

pytestmark = pytest.mark.cluster

TIMEOUT = 60
CONTROL = 0x20
TRANSACTIONAL = 0x10
MARKER_TYPES = {0: "ABORT", 1: "COMMIT"}


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos`: (value, position after it)."""
    shift = raw = 0
    while True:
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def markers(log: bytes) -> list[tuple[int, str]]:
    """(offset, ABORT|COMMIT) of every control batch in raw log bytes, parsed here, not by Strom."""
    found = []
    pos = 0
    while pos + 61 <= len(log):
        base, length = struct.unpack_from(">qi", log, pos)
        (attributes,) = struct.unpack_from(">h", log, pos + 21)
        if attributes & CONTROL:
            record = pos + 61
            _, record = varint(log, record)  # record length
            record += 1  # attributes
            _, record = varint(log, record)  # timestamp delta
            _, record = varint(log, record)  # offset delta
            _, record = varint(log, record)  # key length
            _version, kind = struct.unpack_from(">hh", log, record)
            found.append((base, MARKER_TYPES[kind]))
        pos += 12 + length
    return found


def replica_markers(cluster: ClusterProcess, topic: str, partition: int, count: int) -> dict[int, list]:
    """Wait until every replica holds `count` markers of the partition; returns them per broker."""

    def all_there() -> dict[int, list] | None:
        found = {b: markers(batches_below(cluster.log_dir(b), topic, partition, WHOLE_LOG)[0])
                 for b in cluster.broker_ids}
        return found if all(len(m) >= count for m in found.values()) else None

    return cluster.wait_for(all_there, TIMEOUT, f"{count} markers on every replica of {topic}-{partition}")


def read_all(cluster: ClusterProcess, topic: str, partitions: int, isolation: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.partition.eof": True, "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        at_eof: set[int] = set()
        deadline = time.monotonic() + TIMEOUT
        while len(at_eof) < partitions and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    at_eof.add(m.partition())
                continue
            at_eof.discard(m.partition())
            out.append(m.value())
        assert len(at_eof) == partitions, f"no end of {topic} within {TIMEOUT}s"
        return out
    finally:
        consumer.close()


def transaction_coordinator(cluster: ClusterProcess, transactional_id: str) -> int:
    """FindCoordinator key type 1 (raw, v4) to any live broker; retried while __transaction_state loads."""

    def ask() -> int | None:
        for broker_id in cluster.broker_ids:
            if not cluster.running(broker_id):
                continue
            raw = RawClient(cluster.broker(broker_id))
            try:
                resp = decode(FindCoordinatorResponse, raw.request(
                    FindCoordinatorRequest(key_type=1, coordinator_keys=[transactional_id]), 4), 4, True)
            finally:
                raw.close()
            coordinator = resp.coordinators[0]
            if coordinator.error_code == 0:
                return coordinator.node_id
        return None

    return cluster.wait_for(ask, TIMEOUT, f"the transaction coordinator of {transactional_id}")


def test_transaction_across_three_leaders_commits_and_aborts_with_offsets(cluster3: ClusterProcess) -> None:
    topic = create_topic(cluster3, replicas=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    source = create_topic(cluster3, partitions=1)
    group = f"g-{uuid.uuid4().hex[:6]}"
    txn_id = f"x-{uuid.uuid4().hex[:6]}"
    group_member = Consumer({"bootstrap.servers": cluster3.bootstrap, "group.id": group, "log_level": 0})
    producer = Producer({"bootstrap.servers": cluster3.bootstrap, "transactional.id": txn_id, "log_level": 0})
    try:
        producer.init_transactions(TIMEOUT)
        coordinator = transaction_coordinator(cluster3, txn_id)
        leaders = {p: cluster3.partition_state(topic, p).leader for p in range(3)}  # type: ignore[union-attr]
        assert sorted(leaders.values()) == [1, 2, 3]
        assert len([b for b in leaders.values() if b != coordinator]) == 2

        def transaction(prefix: str, offset: int, commit: bool) -> list[bytes]:
            values = [f"{prefix}-{p}-{i}".encode() for p in range(3) for i in range(4)]
            producer.begin_transaction()
            for value in values:
                producer.produce(topic, value, partition=int(value.split(b"-")[1]))
            producer.send_offsets_to_transaction([TopicPartition(source, 0, offset)],
                                                 group_member.consumer_group_metadata(), TIMEOUT)
            if commit:
                producer.commit_transaction(TIMEOUT)
            else:
                producer.flush(TIMEOUT)
                producer.abort_transaction(TIMEOUT)
            return values

        first = transaction("c1", 5, commit=True)
        assert committed_offsets(cluster3.bootstrap, group, source, 1) == {0: 5}
        aborted = transaction("a", 9, commit=False)
        assert committed_offsets(cluster3.bootstrap, group, source, 1) == {0: 5}
        second = transaction("c2", 12, commit=True)
        assert committed_offsets(cluster3.bootstrap, group, source, 1) == {0: 12}
    finally:
        group_member.close()

    assert sorted(read_all(cluster3, topic, 3, "read_committed")) == sorted(first + second)
    assert sorted(read_all(cluster3, topic, 3, "read_uncommitted")) == sorted(first + aborted + second)
    for p in range(3):
        # 4 records + 1 marker per transaction: COMMIT at 4, ABORT at 9, COMMIT at 14
        expected = [(4, "COMMIT"), (9, "ABORT"), (14, "COMMIT")]
        assert high_watermark(cluster3, topic, p) == 15
        found = replica_markers(cluster3, topic, p, len(expected))
        assert found == {b: expected for b in cluster3.broker_ids}, f"partition {p} led by {leaders[p]}"


@pytest.mark.slow
def test_copy_loop_is_exactly_once_when_the_coordinator_and_a_leader_are_killed(cluster_factory,  # noqa: ANN001
                                                                                 tmp_path: Path) -> None:
    seed = int(os.environ.get("STROM_CHAOS_SEED") or random.randrange(1 << 32))
    print(f"STROM_CHAOS_SEED={seed}")
    rng = random.Random(seed)
    cluster = cluster_factory(3)
    partitions, per_partition = 3, 500
    source = create_topic(cluster, partitions=partitions)
    sink = create_topic(cluster, partitions=partitions, config={"min.insync.replicas": "2"})
    group, txn_id = f"copy-{uuid.uuid4().hex[:6]}", f"copy-txn-{uuid.uuid4().hex[:6]}"
    values = fill_input(cluster.bootstrap, source, partitions, per_partition)
    total = len(values)
    loop = CopyLoopProcess(tmp_path, cluster.bootstrap, source, sink, group, txn_id, partitions,
                           batch=rng.choice((10, 20, 30))).start()
    try:
        wait_progress(loop, 1, 90, lambda: cluster.describe_failure("first commit", 90))
        last = loop.progress()
        for victim in ("coordinator", "output leader"):
            # a random number of records copied since the last kill (at least one commit)
            at = last + rng.randint(1, total // 4)
            wait_progress(loop, at, 120, lambda at=at: cluster.describe_failure(f"progress {at}", 120))
            if victim == "coordinator":
                target = transaction_coordinator(cluster, txn_id)
            else:
                partition = rng.randrange(partitions)
                target = cluster.wait_leader(sink, partition).leader
            time.sleep(rng.uniform(0, 0.3))
            last = loop.progress()
            print(f"kill -9 broker {target} ({victim}) at progress {last}")
            cluster.kill9(target)
            # its ephemeral registration must expire first (a broker id registered by another
            # session stops the new process, as in Kafka)
            cluster.wait_for(lambda t=target: t not in cluster.registered_brokers(), TIMEOUT,
                             f"broker {target}'s registration to expire")
            time.sleep(rng.uniform(0, 2.0))
            cluster.start_broker(target)
        assert loop.wait(150) == 0, f"seed {seed}"
    finally:
        loop.close()

    assert_exactly_once(values, read_committed(cluster.bootstrap, sink, partitions))
    ends = end_offsets(cluster.bootstrap, source, partitions)
    assert ends == {p: per_partition for p in range(partitions)}
    assert committed_offsets(cluster.bootstrap, group, source, partitions) == ends, f"seed {seed}"
