"""Cluster test helpers about replicas: create a topic and wait for its ISR, read logs straight from disk.

Shared by the replication and fault tests. The log readers parse segment files themselves so that
nothing of Strom's own storage code stands between the replicas and a byte-for-byte comparison.
"""

from __future__ import annotations

import itertools
import struct
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.checker import watermark_offsets
from tests.support.cluster import ClusterProcess

# Batch header: baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8, crc int32,
# attributes int16, lastOffsetDelta int32 (at byte 23).
LAST_OFFSET_DELTA_AT = 23
WHOLE_LOG = 1 << 62


# An idempotent acks=all producer that rides out a leader change (used by the cluster tests).
IDEMPOTENT = {"acks": "all", "enable.idempotence": True, "message.timeout.ms": 120_000, "linger.ms": 5}

def create_topic(cluster: ClusterProcess, partitions: int = 1, replication_factor: int = 3,
                 config: dict[str, str] | None = None, replicas: list[list[int]] | None = None) -> str:
    """Create a topic through the Admin API and wait until ZooKeeper shows every partition with a full ISR.

    `replicas` pins the assignment (first = preferred leader) for tests that need a given leader;
    otherwise placement starts at a random broker, as Kafka's does."""
    name = f"r-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    if replicas is not None:
        partitions, replication_factor = len(replicas), len(replicas[0])
        new = NewTopic(name, num_partitions=len(replicas), replication_factor=-1, replica_assignment=replicas,
                       config=config or {})
    else:
        new = NewTopic(name, partitions, replication_factor, config=config or {})
    deadline = time.monotonic() + 60
    for attempt in itertools.count():
        try:
            admin.create_topics([new])[name].result(timeout=60)
            break
        except KafkaException as exc:  # as a Java admin client would: retry what is retriable, within a deadline
            err = exc.args[0]
            if attempt and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                break  # an earlier try went through after all
            if not err.retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    for p in range(partitions):
        state = cluster.wait_isr(name, p, cluster.topic_assignment(name).get(p) or cluster.broker_ids, timeout=60)
        assert len(state.isr) == replication_factor
    return name


def high_watermark(cluster: ClusterProcess, topic: str, partition: int, bootstrap: str | None = None) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap or cluster.bootstrap, "group.id": "hw-probe",
                         "log_level": 0})
    try:
        return watermark_offsets(consumer, TopicPartition(topic, partition), timeout=30)[1]
    finally:
        consumer.close()


def batches_below(log_dir: Path, topic: str, partition: int, hw: int) -> tuple[bytes, int]:
    """The raw bytes of every complete batch that ends below `hw`, and the offset after the last one.

    Read straight from the segment files (`<base offset>.log`, in order); `hw=WHOLE_LOG` reads all.
    """
    folder = log_dir / f"{topic}-{partition}"
    out = bytearray()
    next_offset = 0
    for segment in sorted(folder.glob("*.log"), key=lambda f: int(f.stem)):
        data = segment.read_bytes()
        pos = 0
        while pos + LAST_OFFSET_DELTA_AT + 4 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            end = pos + 12 + length
            if length <= 0 or end > len(data):
                break  # a batch still being written
            (delta,) = struct.unpack_from(">i", data, pos + LAST_OFFSET_DELTA_AT)
            if base + delta >= hw:
                return bytes(out), next_offset
            out += data[pos:end]
            next_offset = base + delta + 1
            pos = end
    return bytes(out), next_offset


def log_contains(log_dir: Path, topic: str, partition: int, needle: bytes) -> bool:
    """Whether any segment file of the replica holds `needle` (uncompressed record values only)."""
    return any(needle in f.read_bytes() for f in (log_dir / f"{topic}-{partition}").glob("*.log"))


def wait_identical_replicas(cluster: ClusterProcess, topic: str, partition: int, hw: int,
                            replicas: set[int], timeout: float = 60.0) -> bytes:
    """Wait until each replica's log holds batches up to `hw`, then require identical bytes."""

    def caught_up() -> dict[int, tuple[bytes, int]] | None:
        views = {b: batches_below(cluster.log_dir(b), topic, partition, hw) for b in replicas}
        return views if all(end == hw for _, end in views.values()) else None

    views = cluster.wait_for(caught_up, timeout, f"every replica of {topic}-{partition} holding offsets < {hw}")
    reference = views[min(replicas)][0]
    for broker_id, (data, _) in views.items():
        assert data == reference, (f"broker {broker_id}'s {topic}-{partition} differs below HW {hw} "
                                   f"({len(data)} vs {len(reference)} bytes; first difference at byte "
                                   f"{next((i for i, (a, b) in enumerate(zip(data, reference, strict=False)) if a != b), min(len(data), len(reference)))})")
    return reference


def metadata_partition(cluster: ClusterProcess, topic: str, partition: int,
                       bootstrap: str | None = None) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap or cluster.bootstrap, "log_level": 0})
    return admin.list_topics(topic, timeout=30).topics[topic].partitions[partition]
