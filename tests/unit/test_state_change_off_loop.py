"""LeaderAndIsr and StopReplica keep the event loop free: file work on the log dir's storage thread,
thousands of partitions applied in chunks that let other requests in between.

A real ReplicaManager over a real LogManager in a temp dir; what is observed is which thread
writes each leader-epoch checkpoint and whether another coroutine runs while a request applies.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import threading
import uuid
from pathlib import Path
from typing import Any

import kafka.errors as Errors
import pytest
from tests.support.loop_turns import OtherConnection

import strom.broker.replica_manager as replica_manager_module
import strom.storage.leader_epoch_cache as leader_epoch_cache
from strom.broker.replica_manager import LeaderAndIsrPartition, ReplicaManager
from strom.config import BrokerConfig
from strom.metadata.store import PartitionState
from strom.protocol.record_batch import build_batch
from strom.server_common.purgatory import DelayedOperationPurgatory
from strom.server_common.timing_wheel import Timer
from strom.storage.log_manager import LogManager

PARTITIONS = 600  # several chunks


def replica_manager(log_dir: Path) -> ReplicaManager:
    lm = LogManager([str(log_dir)])
    lm.load_logs()
    return ReplicaManager(BrokerConfig({"broker.id": "1", "log.dirs": str(log_dir)}), lm, None,  # type: ignore[arg-type]
                          DelayedOperationPurgatory("Fetch", Timer()))


def leader_and_isr(topic_id: uuid.UUID, leader: int, epoch: int, is_new: bool = False
                   ) -> list[LeaderAndIsrPartition]:
    return [LeaderAndIsrPartition("t", topic_id, PartitionState(p, leader, epoch, [1, 2], [1, 2], epoch), is_new)
            for p in range(PARTITIONS)]


async def settle(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


def configs(_topic: str) -> dict[str, str]:
    return {}


def record_epoch_writers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that write leader-epoch checkpoints from now on, in order."""
    writers: list[str] = []
    real_write = leader_epoch_cache.write_atomically

    def recording_write(path: str, data: bytes, fsync: bool = True) -> None:
        writers.append(threading.current_thread().name)
        real_write(path, data, fsync)

    monkeypatch.setattr(leader_epoch_cache, "write_atomically", recording_write)
    return writers


def test_leader_and_isr_lets_other_work_run_and_fsyncs_epochs_on_the_storage_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writers = record_epoch_writers(monkeypatch)
    creators: list[str] = []
    real_ensure = replica_manager_module.ensure_topic_id

    def recording_ensure(directory: str, topic_id: uuid.UUID) -> None:
        creators.append(threading.current_thread().name)
        real_ensure(directory, topic_id)

    monkeypatch.setattr(replica_manager_module, "ensure_topic_id", recording_ensure)

    async def scenario() -> tuple[int, int, int]:
        rm = replica_manager(tmp_path)
        tid = uuid.uuid4()
        async with OtherConnection() as other:  # stands for every other client's requests
            started = other.ticks
            await settle(rm.become_leader_or_follower(1, leader_and_isr(tid, 2, 0, is_new=True), configs))
            during_creation = other.ticks - started
            assert len(rm.partitions) == PARTITIONS and all(
                (tmp_path / f"t-{p}").is_dir() for p in range(PARTITIONS))
            writers.clear()
            started = other.ticks
            errors = await settle(rm.become_leader_or_follower(1, leader_and_isr(tid, 1, 1), configs))
            during = other.ticks - started
        assert set(errors.values()) == {0}
        assert all(rm.partitions[("t", p)].is_leader for p in range(PARTITIONS))
        assert all(rm.partitions[("t", p)].log.latest_epoch == 1 for p in range(PARTITIONS))
        rm.log_manager.shutdown()
        return during_creation, during, len(writers)

    during_creation, during, written = asyncio.run(scenario())
    assert written == PARTITIONS  # one durable write per new leader epoch
    assert all(name.startswith("storage-") for name in writers), set(writers)
    assert during >= PARTITIONS // 200  # the other coroutine ran between chunks
    assert during_creation >= PARTITIONS // 200  # and while the new replicas' files were created
    assert len(creators) == PARTITIONS and all(name.startswith("storage-") for name in creators), set(creators)


def test_stop_replica_deletes_on_the_storage_thread_between_other_work(tmp_path: Path) -> None:
    async def scenario() -> int:
        rm = replica_manager(tmp_path)
        tid = uuid.uuid4()
        await settle(rm.become_leader_or_follower(1, leader_and_isr(tid, 2, 0, is_new=True), configs))
        async with OtherConnection() as other:
            started = other.ticks
            errors = await settle(rm.stop_replicas(1, {("t", p): True for p in range(PARTITIONS)}))
            during = other.ticks - started
        assert set(errors.values()) == {0}
        assert not rm.partitions and not rm.log_manager.all_logs()
        rm.log_manager.shutdown()
        return during

    assert asyncio.run(scenario()) >= PARTITIONS // 200
    assert not list(tmp_path.glob("t-*[0-9]"))  # every replica dir became a tombstone


def test_a_full_disk_writing_the_epoch_on_the_storage_thread_still_takes_the_dir_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = leader_epoch_cache.write_atomically
    full = threading.Event()

    def write(path: str, data: bytes, fsync: bool = True) -> None:
        if full.is_set():
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real_write(path, data, fsync)

    monkeypatch.setattr(leader_epoch_cache, "write_atomically", write)
    failed_dirs: list[str] = []

    async def scenario() -> dict[Any, int]:
        rm = replica_manager(tmp_path)
        rm.log_dir_failure_listener = failed_dirs.append  # a cluster broker: the dir goes offline (KIP-112)
        tid = uuid.uuid4()
        await settle(rm.become_leader_or_follower(1, leader_and_isr(tid, 2, 0, is_new=True), configs))
        full.set()
        errors = await settle(rm.become_leader_or_follower(1, leader_and_isr(tid, 1, 1), configs))
        assert not rm.partitions
        assert rm.offline_partitions == {("t", p) for p in range(PARTITIONS)}
        again = await settle(rm.become_leader_or_follower(1, leader_and_isr(tid, 1, 2), configs))
        assert set(again.values()) == {Errors.KafkaStorageError.errno}
        await asyncio.sleep(0.1)  # the offline logs close on the storage thread
        return errors

    errors = asyncio.run(scenario())
    assert set(errors.values()) == {Errors.KafkaStorageError.errno}
    assert failed_dirs == [str(tmp_path)]


def test_new_leader_epochs_of_one_request_are_written_several_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failover makes a broker lead hundreds of partitions at once: their checkpoint fsyncs are in flight
    together (the first two writes wait for each other; written one after another, the barrier breaks)."""
    meet = threading.Barrier(2, timeout=20)
    calls = 0
    lock = threading.Lock()
    real_write = leader_epoch_cache.write_atomically

    def meeting_write(path: str, data: bytes, fsync: bool = True) -> None:
        nonlocal calls
        with lock:
            calls += 1
            first_two = calls <= 2
        if first_two:
            meet.wait()
        real_write(path, data, fsync)

    async def scenario() -> dict[Any, int]:
        rm = replica_manager(tmp_path)
        tid = uuid.uuid4()
        await settle(rm.become_leader_or_follower(1, leader_and_isr(tid, 2, 0, is_new=True), configs))
        monkeypatch.setattr(leader_epoch_cache, "write_atomically", meeting_write)
        try:
            return await settle(rm.become_leader_or_follower(1, leader_and_isr(tid, 1, 1), configs))
        finally:
            rm.log_manager.shutdown()

    errors = asyncio.run(scenario())
    assert set(errors.values()) == {0} and calls == PARTITIONS


def test_a_new_leaders_first_appends_write_no_epoch_checkpoint_on_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The epoch a LeaderAndIsr starts is on disk before the first produce of it: the append path
    (on the loop) finds it assigned, whether the replica is new here or was a follower."""
    writers = record_epoch_writers(monkeypatch)
    batch = build_batch([(None, b"v", [], 1)])

    async def scenario() -> None:
        rm = replica_manager(tmp_path)
        tid = uuid.uuid4()
        for leader, epoch, is_new in ((1, 0, True), (2, 1, False), (1, 2, False)):
            await settle(rm.become_leader_or_follower(1, leader_and_isr(tid, leader, epoch, is_new), configs))
        loop_thread = threading.current_thread().name
        writers.clear()
        results, _ = rm.append_records({("t", p): batch for p in range(PARTITIONS)}, 1)
        assert {res.error_code for res in results.values()} == {0}
        assert loop_thread not in writers, "an append wrote the leader-epoch checkpoint on the loop"
        assert all(rm.partitions[("t", p)].log.latest_epoch == 2 for p in range(PARTITIONS))
        rm.log_manager.shutdown()

    asyncio.run(scenario())
