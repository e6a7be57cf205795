"""A full disk (or a broken one, or no file descriptors) is an error the broker reports, never a crash.

Each test runs a real broker whose log dir is a small tmpfs, fills it with a filler file,
and checks what clients see, what the broker logs, and what survives a restart.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.protocol.admin import DescribeLogDirsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

import strom.storage.index
from strom.protocol.record_batch import build_batch
from tests.integration.test_api_version_matrix import call
from tests.integration.test_produce_consume import consume_all, new_topic, produce
from tests.support.broker import BrokerProcess

STORAGE_ERROR = 56
VALUE = b"x" * 10_000  # bigger than a page: every append needs fresh blocks


def _mount_tmpfs(path: Path, size_mb: int) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {res.stderr.strip()}")


def _unmount(path: Path) -> None:
    for args in (["umount", str(path)], ["umount", "-l", str(path)]):
        if subprocess.run(args, capture_output=True).returncode == 0:
            return


@pytest.fixture
def small_disk_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Brokers whose data dir is a tmpfs of ``size_mb``; stopped before the tmpfs is unmounted."""
    brokers: list[BrokerProcess] = []
    mounts: list[Path] = []

    def make(size_mb: int = 16, overrides: dict[str, object] | None = None, start: bool = True,
             max_open_files: int | None = None) -> BrokerProcess:
        base = tmp_path / f"b{len(brokers)}"
        _mount_tmpfs(base / "data", size_mb)
        mounts.append(base / "data")
        b = BrokerProcess(base, overrides,
                          rlimit_nofile=(max_open_files, max_open_files) if max_open_files else None)
        brokers.append(b)
        return b.start() if start else b

    try:
        yield make
    finally:
        for b in brokers:
            b.close()
        for m in mounts:
            _unmount(m)


def fill(directory: str) -> str:
    """Write a filler file until the filesystem has no free block left; returns its path."""
    path = os.path.join(directory, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    chunk = b"\0" * (1 << 20)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    assert free_bytes(directory) == 0
    return path


def free_bytes(directory: str) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def produce_errors(b: BrokerProcess, topic: str, n: int, partition: int = 0) -> list[KafkaError | None]:
    """Produce ``n`` records one by one without retries; the delivery error of each (None: delivered)."""
    p = Producer({"bootstrap.servers": b.bootstrap, "retries": 0, "enable.idempotence": False, "acks": 1,
                  "linger.ms": 0, "message.timeout.ms": 10_000})
    out: list[KafkaError | None] = []
    for _ in range(n):
        p.produce(topic, VALUE, partition=partition, on_delivery=lambda err, _msg: out.append(err))
        assert p.flush(15) == 0
    return out


def broker_log(b: BrokerProcess) -> str:
    return b.log_path.read_text(errors="replace")


def topics(b: BrokerProcess) -> set[str]:
    return set(AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics)


def tombstones(b: BrokerProcess, topic: str) -> list[str]:
    return glob.glob(os.path.join(b.data_dir, f"{topic}-*-delete"))


def wait_for(predicate: Callable[[], bool], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


# -- 1. produce on a full disk --------------------------------------------------------------------------


# A roll on a full disk writes the closing time-index entry; with memory-mapped indexes that write can
# hit a page tmpfs cannot allocate and the broker dies of SIGBUS, which only moving indexes off mmap fixes.
_MMAP_INDEXES = hasattr(strom.storage.index, "mmap")


@pytest.mark.parametrize("segment_bytes", [
    1 << 30,
    pytest.param(15_000, marks=pytest.mark.xfail(_MMAP_INDEXES, run=False,
                                                 reason="memory-mapped indexes SIGBUS on a full tmpfs")),
], ids=["append-fails", "roll-fails"])
def test_produce_on_full_disk_answers_storage_error_and_logs_once(small_disk_broker,  # noqa: ANN001
                                                                  segment_bytes: int) -> None:
    b = small_disk_broker(16, {"log.segment.bytes": segment_bytes})
    topic = new_topic(b)
    assert produce_errors(b, topic, 1) == [None]
    filler = fill(b.data_dir)
    errors = produce_errors(b, topic, 4)
    assert all(e is not None and e.code() == KafkaError.KAFKA_STORAGE_ERROR for e in errors), errors
    lines = [ln for ln in broker_log(b).splitlines() if f"storage error on produce to {topic}-0" in ln]
    assert len(lines) == 1 and " ERROR " in lines[0], lines  # once per interval, not once per request
    os.unlink(filler)
    assert produce_errors(b, topic, 1) == [None]  # space is back: no restart needed
    assert len(consume_all(b, topic, 2)) == 2


# -- 2. topic deletion on a full disk -------------------------------------------------------------------


def test_delete_topic_on_full_disk_frees_space_and_stays_deleted(small_disk_broker) -> None:  # noqa: ANN001
    b = small_disk_broker(24)
    topic = new_topic(b, partitions=2)
    keep = new_topic(b)
    produce(b, topic, [{"value": VALUE, "partition": i % 2} for i in range(300)])
    produce(b, keep, [{"value": b"kept"}])
    fill(b.data_dir)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_topics([topic])[topic].result(15)
    assert free_bytes(b.data_dir) > 2_500_000  # the ~3 MB of the topic were freed
    assert topic not in topics(b)
    assert not tombstones(b, topic)  # the metadata write succeeded: tombstones are gone
    assert not os.path.exists(os.path.join(b.data_dir, f"{topic}-0"))
    assert b.stop() == 0
    b.start()
    assert topic not in topics(b) and keep in topics(b)
    assert [m.value() for m in consume_all(b, keep, 1)] == [b"kept"]


def test_delete_topic_when_metadata_write_keeps_failing_converges_after_restart(
        small_disk_broker) -> None:  # noqa: ANN001
    b = small_disk_broker(24)
    topic = new_topic(b, partitions=2)
    produce(b, topic, [{"value": VALUE, "partition": i % 2} for i in range(200)])
    fill(b.data_dir)
    # A directory where the metadata store writes its temp file: the write fails whatever the free space.
    blocker = os.path.join(b.data_dir, "__cluster_metadata.json.tmp")
    os.mkdir(blocker)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_topics([topic])[topic].result(15)
    assert free_bytes(b.data_dir) > 1_500_000
    assert topic not in topics(b)
    stones = tombstones(b, topic)
    assert len(stones) == 2 and all(not os.listdir(s) for s in stones)  # empty: the deletion's durable record
    assert topic in (Path(b.data_dir) / "__cluster_metadata.json").read_text()
    assert b.stop() == 0  # shutdown retries the metadata write, fails again, still exits cleanly
    b.start()  # the tombstones complete the deletion at start-up
    assert topic not in topics(b)
    assert "completing the interrupted deletion of topic " + topic in broker_log(b)
    os.rmdir(blocker)
    # The periodic retry now writes the metadata, then drops the tombstones.
    assert wait_for(lambda: not tombstones(b, topic))
    meta = json.loads((Path(b.data_dir) / "__cluster_metadata.json").read_text())
    assert topic not in {t["name"] for t in meta["topics"]}
    b.restart()
    assert topic not in topics(b)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    assert topic in topics(b)


def test_tombstone_of_another_topic_id_does_not_delete_a_recreated_topic(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory()
    topic = new_topic(b)
    produce(b, topic, [{"value": b"v"}])
    b.stop()
    # A leftover tombstone from an earlier topic of the same name (another id).
    stone = os.path.join(b.data_dir, f"{topic}-0.{uuid.uuid4().hex}-delete")
    os.makedirs(stone)
    b.start()
    assert topic in topics(b)
    assert [m.value() for m in consume_all(b, topic, 1)] == [b"v"]
    assert wait_for(lambda: not os.path.exists(stone))


# -- 3. shutdown on a full disk ------------------------------------------------------------------------


def test_sigterm_on_full_disk_exits_cleanly_and_next_start_recovers(small_disk_broker) -> None:  # noqa: ANN001
    b = small_disk_broker(16)
    topic = new_topic(b, partitions=2)
    values = [f"{i:04d}".encode() * 1250 for i in range(60)]
    # Small batches, so the (memory-mapped) indexes already hold entries: this test is about ENOSPC on
    # the checkpoint, snapshot and marker writes, not about first-touch faults on index pages.
    produce(b, topic, [{"value": v, "partition": i % 2} for i, v in enumerate(values)],
            **{"enable.idempotence": True, "acks": "all", "batch.size": 6000, "linger.ms": 0})
    filler = fill(b.data_dir)
    assert b.stop() == 0
    log_text = broker_log(b)
    assert "Traceback" not in log_text, log_text[-3000:]
    assert "not writing .kafka_cleanshutdown" in log_text
    assert not os.path.exists(os.path.join(b.data_dir, ".kafka_cleanshutdown"))
    os.unlink(filler)
    b.start()
    got = consume_all(b, topic, len(values), partitions=2)
    assert sorted(m.value() for m in got) == sorted(values)


# -- 4. start-up on a full disk, and a broken log dir ---------------------------------------------------


def test_restart_on_full_disk_serves_reads(small_disk_broker) -> None:  # noqa: ANN001
    b = small_disk_broker(16)
    topic = new_topic(b)
    produce(b, topic, [{"value": f"r{i}".encode()} for i in range(100)])
    assert b.stop() == 0
    filler = fill(b.data_dir)
    b.start()
    assert [m.value() for m in consume_all(b, topic, 100)] == [f"r{i}".encode() for i in range(100)]
    errors = produce_errors(b, topic, 1)
    assert errors[0] is not None and errors[0].code() == KafkaError.KAFKA_STORAGE_ERROR
    assert b.stop() == 0
    os.unlink(filler)
    b.start()
    assert len(consume_all(b, topic, 100)) == 100
    assert produce_errors(b, topic, 1) == [None]


def _produce_req(topic: str, partition: int) -> ProduceRequest:
    batch = build_batch([(None, b"v", [], 1_700_000_000_000)])
    return ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=batch)])])


def _fetch_req(topic: str, partition: int) -> FetchRequest:
    fp = FetchRequest.FetchTopic.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=0,
                                                log_start_offset=-1, partition_max_bytes=1 << 20)
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[fp])],
                        forgotten_topics_data=[], rack_id="")


def _list_offsets_req(topic: str, partition: int) -> ListOffsetsRequest:
    parts = [ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=partition, current_leader_epoch=-1, timestamp=-1)]
    return ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=5000,
                              topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=parts)])


def test_broken_log_dir_goes_offline_and_the_other_keeps_serving(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "data", tmp_path / "data2"
    b = BrokerProcess(tmp_path, {"log.dirs": f"{d1},{d2}"})
    try:
        b.start()
        topic = new_topic(b, partitions=2)
        assert (d1 / f"{topic}-0").is_dir() and (d2 / f"{topic}-1").is_dir()
        for p in (0, 1):
            assert call(b, _produce_req(topic, p), 7).responses[0].partition_responses[0].error_code == 0
        assert b.stop() == 0
        # The second dir fails (a path that is no longer a directory gives I/O errors even to root).
        shutil.rmtree(d2)
        d2.write_text("not a directory")
        b.start()
        assert "log dir " + str(d2) + " is offline" in broker_log(b)
        produced = {p: call(b, _produce_req(topic, p), 7).responses[0].partition_responses[0] for p in (0, 1)}
        assert produced[0].error_code == 0 and produced[0].base_offset == 1
        assert produced[1].error_code == STORAGE_ERROR
        fetched = {p: call(b, _fetch_req(topic, p), 11).responses[0].partitions[0] for p in (0, 1)}
        assert fetched[0].error_code == 0 and fetched[0].high_watermark == 2
        assert fetched[1].error_code == STORAGE_ERROR
        offsets = {p: call(b, _list_offsets_req(topic, p), 5).topics[0].partitions[0] for p in (0, 1)}
        assert offsets[0].error_code == 0 and offsets[0].offset == 2
        assert offsets[1].error_code == STORAGE_ERROR
        meta = call(b, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                       allow_auto_topic_creation=False), 9)
        parts = {p.partition_index: p for p in meta.topics[0].partitions}
        assert (parts[0].error_code, parts[0].leader_id) == (0, 0)
        assert (parts[1].error_code, parts[1].leader_id) == (STORAGE_ERROR, -1)
        dirs = {r.log_dir: r for r in call(b, DescribeLogDirsRequest(topics=None), 1).results}
        assert dirs[str(d2)].error_code == STORAGE_ERROR and dirs[str(d1)].error_code == 0
        # New topics go to the healthy dir.
        other = new_topic(b, partitions=2)
        assert (d1 / f"{other}-0").is_dir() and (d1 / f"{other}-1").is_dir()
        produce(b, other, [{"value": b"ok", "partition": 1}])
        assert b.stop() == 0
    finally:
        b.close()


# -- 5. CreateTopics is all or nothing ------------------------------------------------------------------


def test_create_topics_without_file_descriptors_leaves_nothing_behind(small_disk_broker) -> None:  # noqa: ANN001
    b = small_disk_broker(64, max_open_files=200)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    name = f"many-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception, match="KAFKA_STORAGE_ERROR|[Tt]oo many open files") as info:
        admin.create_topics([NewTopic(name, 300, 1)])[name].result(30)
    assert "open files" in str(info.value)
    assert name not in topics(b)
    assert not glob.glob(os.path.join(b.data_dir, f"{name}-*"))
    assert name not in (Path(b.data_dir) / "__cluster_metadata.json").read_text()
    # The broker keeps serving, and a topic that fits is created normally.
    small = new_topic(b, partitions=2)
    produce(b, small, [{"value": b"ok", "partition": 1}])
    # CreatePartitions follows the same rule.
    with pytest.raises(Exception, match="KAFKA_STORAGE_ERROR|[Tt]oo many open files"):
        admin.create_partitions([NewPartitions(small, 300)])[small].result(30)
    assert len(admin.list_topics(timeout=10).topics[small].partitions) == 2
    assert not os.path.exists(os.path.join(b.data_dir, f"{small}-2"))
    produce(b, small, [{"value": b"still ok", "partition": 0}])
    assert b.stop() == 0
    b.start()
    assert name not in topics(b) and small in topics(b)
