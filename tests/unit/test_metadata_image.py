"""MetadataImage / MetadataDelta, and a single node's LocalController on real logs and a real file.

The image is replaced whole by a delta and never changed: readers keep a consistent view, and a
change costs the topics it names, not every partition. The controller writes the metadata file on
the store's writer thread and creates logs and leader epochs on the storage threads, while other
coroutines keep running; a failed file write leaves no log behind.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

import kafka.errors as Errors
import pytest
from tests.support.loop_turns import OtherConnection

import strom.metadata.embedded as embedded_module
from strom.broker.replica_manager import ReplicaManager
from strom.config import BrokerConfig
from strom.metadata.embedded import METADATA_FILE, EmbeddedMetadataStore
from strom.metadata.image import MetadataDelta, MetadataImage
from strom.metadata.local_controller import LocalController
from strom.metadata.publisher import MetadataPublisher
from strom.metadata.store import PartitionState, TopicMetadata
from strom.server_common.purgatory import DelayedOperationPurgatory
from strom.server_common.timing_wheel import Timer
from strom.storage.log_manager import LogManager


def _topic(name: str, partitions: int) -> TopicMetadata:
    return TopicMetadata(name, uuid.uuid4(), {p: PartitionState(p, 0, 0, [0], [0]) for p in range(partitions)})


def test_a_delta_replaces_only_what_it_names() -> None:
    big, small = _topic("big", 1000), _topic("small", 1)
    before = MetadataImage.of([big, small], controller_id=0)
    grown = TopicMetadata("small", small.topic_id, {**small.partitions, 1: PartitionState(1, 0, 0, [0], [0])})
    after = before.apply(MetadataDelta.of([grown]))
    assert after.topics["big"] is big and after.topics["big"].partitions is big.partitions  # not copied
    assert after.topics["small"] is grown and after.topics_by_id[small.topic_id] is grown
    assert before.topics["small"] is small and len(before.topics) == 2  # the old image is unchanged
    with pytest.raises(TypeError):
        after.topics["x"] = big  # type: ignore[index]
    recreated = _topic("big", 1)
    gone = after.apply(MetadataDelta.of(deleted=[big])).apply(MetadataDelta.of([recreated]))
    assert big.topic_id not in gone.topics_by_id and gone.topics_by_id[recreated.topic_id] is recreated
    assert gone.controller_id == 0 and not MetadataDelta()


def _stack(tmp_path: Path) -> tuple[EmbeddedMetadataStore, ReplicaManager, LocalController]:
    lm = LogManager([str(tmp_path)])
    lm.load_logs()
    store = EmbeddedMetadataStore(tmp_path, 0)
    rm = ReplicaManager(BrokerConfig({"broker.id": "0", "log.dirs": str(tmp_path)}), lm, store,
                        DelayedOperationPurgatory("Fetch", Timer()))
    publisher = MetadataPublisher(rm)
    store.set_publisher(publisher.publish)
    controller = LocalController(store, publisher)
    store.attach_controller(controller)
    return store, rm, controller


def test_create_topic_writes_off_the_loop_and_serves_leaders_when_it_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writers: list[str] = []
    real_write = embedded_module.write_atomically

    def recording_write(path: str, data: bytes, fsync: bool = True) -> None:
        writers.append(threading.current_thread().name)
        real_write(path, data, fsync)

    monkeypatch.setattr(embedded_module, "write_atomically", recording_write)

    async def scenario() -> tuple[int, list[str]]:
        store, rm, controller = _stack(tmp_path)
        await controller.startup()
        writers.clear()  # the new file, written at start-up
        loop_thread = threading.current_thread().name
        async with OtherConnection() as other:
            topic = await store.create_topic_async("wide", {p: [0] for p in range(300)}, {"retention.ms": "5000"})
        ticks = other.ticks
        assert store.topic("wide") is topic and len(rm.partitions) == 300
        assert all(rm.partitions[("wide", p)].is_leader for p in range(300))
        assert all(rm.partitions[("wide", p)].log.latest_epoch == 0 for p in range(300))
        assert rm.partitions[("wide", 0)].log.config.retention_ms == 5000
        assert loop_thread not in writers
        await store.delete_topic_async("wide")
        assert store.topic("wide") is None and not rm.partitions
        assert not any(tmp_path.glob("wide-*")) and "wide" not in (tmp_path / METADATA_FILE).read_text()
        rm.log_manager.shutdown()
        store.close()
        return ticks, writers

    ticks, writers = asyncio.run(scenario())
    assert ticks > 10  # another coroutine ran while the logs, epochs and file were written
    assert writers and all(name.startswith("metadata-writer") for name in writers), set(writers)


def test_a_failed_metadata_write_removes_the_new_logs(tmp_path: Path) -> None:
    async def scenario() -> None:
        store, rm, controller = _stack(tmp_path)
        await controller.startup()
        await store.create_topic_async("kept", {0: [0]}, {})
        blocker = tmp_path / (METADATA_FILE + ".tmp")
        blocker.mkdir()  # the file's temp path is taken: the write fails
        with pytest.raises(OSError):
            await store.create_topic_async("gone", {0: [0], 1: [0]}, {})
        with pytest.raises(OSError):
            await store.add_partitions_async("kept", {1: [0]})
        blocker.rmdir()
        assert store.topic("gone") is None and not any(tmp_path.glob("gone-*"))
        assert sorted(store.topic("kept").partitions) == [0] and not (tmp_path / "kept-1").exists()
        assert set(rm.partitions) == {("kept", 0)}
        with pytest.raises(Errors.TopicAlreadyExistsError):
            await store.create_topic_async("kept", {0: [0]}, {})
        rm.log_manager.shutdown()
        store.close()

    asyncio.run(scenario())
