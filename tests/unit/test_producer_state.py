"""Idempotent producer state: duplicates, sequence gaps, epochs, snapshots and reopen."""

from __future__ import annotations

import errno
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kafka.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError

from strom.protocol.record_batch import build_batch, parse_header
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.producer_state import ProducerStateManager


def idem(pid: int, epoch: int, seq: int, n: int = 1, ts: int = 1_000) -> bytes:
    return build_batch(
        [(None, b"m%d" % (seq + i), [], ts) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def open_log(tmp_path: str, **props: str) -> Log:
    return Log(os.path.join(tmp_path, "idem-0"), LogConfig.from_props(props), now_ms=0)


def test_duplicate_returns_original_offsets_and_writes_nothing(tmp_path: str) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(build_batch([(None, b"plain", [], 1)]), 0)
    first = log.append_as_leader(idem(1, 0, 0, n=3), 0)
    second = log.append_as_leader(idem(1, 0, 3, n=2), 0)
    assert (first.first_offset, first.last_offset) == (1, 3)
    assert (second.first_offset, second.last_offset) == (4, 5)
    size = log.size_in_bytes
    retry = log.append_as_leader(idem(1, 0, 0, n=3), 0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (1, 3)
    retry = log.append_as_leader(idem(1, 0, 3, n=2), 0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (4, 5)
    assert log.size_in_bytes == size and log.log_end_offset == 6
    log.close()


def test_only_last_five_batches_are_remembered(tmp_path: str) -> None:
    log = open_log(tmp_path)
    for seq in range(7):
        log.append_as_leader(idem(9, 0, seq), 0)
    assert log.append_as_leader(idem(9, 0, 2), 0).duplicate
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(idem(9, 0, 1), 0)  # sixth-from-last: no longer a known duplicate
    log.close()


def test_out_of_order_sequence(tmp_path: str) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idem(5, 0, 0, n=2), 0)
    leo = log.log_end_offset
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(idem(5, 0, 3), 0)  # expected 2
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(idem(5, 0, 2) + idem(5, 0, 4), 0)  # gap inside one request
    assert log.log_end_offset == leo
    log.append_as_leader(idem(5, 0, 2) + idem(5, 0, 3), 0)  # in order inside one request
    assert log.log_end_offset == leo + 2
    log.close()


def test_epoch_rules(tmp_path: str) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idem(3, 2, 0, n=4), 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(idem(3, 1, 4), 0)  # stale epoch
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(idem(3, 3, 4), 0)  # new epoch must restart at 0
    info = log.append_as_leader(idem(3, 3, 0), 0)
    assert info.first_offset == 4
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(idem(3, 2, 4), 0)
    log.close()


def test_unknown_producer_accepts_any_sequence(tmp_path: str) -> None:
    """Kafka 3.x (KIP-360): state may have expired, so a new producer id may start mid-sequence."""
    log = open_log(tmp_path)
    info = log.append_as_leader(idem(77, 0, 42), 0)
    assert not info.duplicate
    log.append_as_leader(idem(77, 0, 43), 0)
    log.close()


def test_sequence_wraps_at_int_max(tmp_path: str) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idem(8, 0, 2**31 - 2, n=2), 0)
    log.append_as_leader(idem(8, 0, 0), 0)
    assert log.log_end_offset == 3
    log.close()


def test_state_survives_close_and_reopen(tmp_path: str) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    for seq in range(0, 12, 2):
        log.append_as_leader(idem(11, 0, seq, n=2), 0)
    assert len(log.segments) > 1
    log.close()
    assert any(name.endswith(".snapshot") for name in os.listdir(log.directory))
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    dup = log.append_as_leader(idem(11, 0, 10, n=2), 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (10, 11)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(idem(11, 0, 13), 0)
    assert log.append_as_leader(idem(11, 0, 12), 0).first_offset == 12
    log.close()


def test_state_rebuilt_by_replay_without_snapshots(tmp_path: str) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idem(21, 1, 0, n=2), 0)
    log.append_as_leader(idem(21, 1, 2), 0)
    directory = log.directory
    log.close()
    for name in os.listdir(directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(directory, name))
    log = open_log(tmp_path)
    assert log.producer_state.producers[21].last_seq == 2
    assert log.append_as_leader(idem(21, 1, 2), 0).duplicate
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(idem(21, 0, 3), 0)
    log.close()


def test_snapshot_round_trip_and_corruption(tmp_path: str) -> None:
    mgr = ProducerStateManager(str(tmp_path))
    for seq, offset in ((0, 0), (1, 1), (2, 2)):
        h = parse_header(idem(4, 6, seq))
        h.base_offset = offset
        mgr.update(h)
    path = mgr.take_snapshot(3)
    assert os.path.basename(path) == "00000000000000000003.snapshot"
    again = ProducerStateManager(str(tmp_path))
    assert again.load_latest_snapshot(10) == 3
    entry = again.producers[4]
    assert entry.producer_epoch == 6 and entry.last_seq == 2 and entry.last_offset == 2
    assert [b.first_offset for b in entry.batches] == [0, 1, 2]
    mgr.take_snapshot(5)
    with open(mgr.snapshot_path(5), "r+b") as f:
        f.seek(20)
        f.write(b"\xff")
    third = ProducerStateManager(str(tmp_path))
    assert third.load_latest_snapshot(10) == 3  # corrupt newer snapshot skipped and removed
    assert not os.path.exists(mgr.snapshot_path(5))
    assert third.load_latest_snapshot(2) is None  # snapshots beyond the log end are dropped
    assert third.snapshot_offsets() == []


def test_expiration(tmp_path: str) -> None:
    mgr = ProducerStateManager(str(tmp_path), producer_id_expiration_ms=1_000)
    mgr.update(parse_header(idem(1, 0, 0, ts=5_000)))
    mgr.update(parse_header(idem(2, 0, 0, ts=9_000)))
    assert mgr.remove_expired_producers(now_ms=9_500) == 1
    assert set(mgr.producers) == {2}


class GatedStorageThread:
    """A log dir's storage thread held back until ``release``: what a roll left to it has not run yet."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="storage-test")
        self._gate = threading.Event()
        self.executor.submit(self._gate.wait, 30)

    def release(self) -> None:
        self._gate.set()
        self.executor.shutdown(wait=True)


def snapshot_files(directory: str) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".snapshot"))


def test_roll_snapshot_is_written_on_the_storage_thread(tmp_path: str) -> None:
    """A roll on the append path only encodes the snapshot; its file is written and fsynced on the dir's
    thread (as Kafka since KAFKA-15046), so the event loop does no file work for it."""
    storage = GatedStorageThread()
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    log.storage_executor = storage.executor
    try:
        for seq in range(0, 12, 2):
            log.append_as_leader(idem(11, 0, seq, n=2), 0)
        assert len(log.segments) > 1
        rolled_at = [seg.base_offset for seg in log.segments[1:]]
        assert snapshot_files(log.directory) == []  # nothing written by the appending thread
        assert log.producer_state.pending_snapshot_offsets == rolled_at
    finally:
        storage.release()
    assert snapshot_files(log.directory) == [f"{offset:020d}.snapshot" for offset in rolled_at]
    latest = ProducerStateManager.read_snapshot(log.producer_state.snapshot_path(rolled_at[-1]))
    assert latest[11].last_offset == rolled_at[-1] - 1  # the state as of the roll, not of the write
    assert log.producer_state.pending_snapshot_offsets == []
    log.close()


def test_crash_before_roll_snapshots_are_written_recovers_the_state(tmp_path: str) -> None:
    """Deferred snapshots lost to a crash: recovery starts from the previous one and replays the rest."""
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    for seq in range(0, 4, 2):
        log.append_as_leader(idem(11, 0, seq, n=2), 0)
    storage = GatedStorageThread()
    log.storage_executor = storage.executor
    for seq in range(4, 14, 2):
        log.append_as_leader(idem(11, 0, seq, n=2), 0)
    assert log.producer_state.pending_snapshot_offsets
    written = snapshot_files(log.directory)
    # The crash: the pending writes never happen and the log is not closed.
    log.producer_state.cancel_pending_snapshots()
    storage.release()
    assert snapshot_files(log.directory) == written
    again = open_log(tmp_path, **{"segment.bytes": "300"})
    dup = again.append_as_leader(idem(11, 0, 12, n=2), 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (12, 13)
    with pytest.raises(OutOfOrderSequenceNumberError):
        again.append_as_leader(idem(11, 0, 15), 0)
    assert again.append_as_leader(idem(11, 0, 14), 0).first_offset == 14
    again.close()


def test_truncation_cancels_a_roll_snapshot_not_written_yet(tmp_path: str) -> None:
    """A pending snapshot above a truncation point would describe records that are gone: never written."""
    storage = GatedStorageThread()
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    log.storage_executor = storage.executor
    try:
        for seq in range(0, 30, 2):
            log.append_as_leader(idem(11, 0, seq, n=2), 0)
        pending = log.producer_state.pending_snapshot_offsets
        assert len(pending) >= 2
        log.truncate_to(pending[0])
        assert log.producer_state.pending_snapshot_offsets == [pending[0]]
    finally:
        storage.release()
    assert snapshot_files(log.directory) == [f"{pending[0]:020d}.snapshot"]
    assert log.producer_state.producers[11].last_offset == pending[0] - 1
    log.close()


def test_a_roll_snapshot_that_cannot_be_written_is_skipped(tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk on the storage thread costs the snapshot only: no temp file left, appends go on."""
    import strom.storage.producer_state as producer_state

    def open_on_a_full_disk(path: str, mode: str = "r") -> Any:
        if path.endswith(".tmp"):
            open(path, "wb").close()  # the file exists, its blocks could not be written
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return open(path, mode)

    monkeypatch.setattr(producer_state, "open", open_on_a_full_disk, raising=False)
    executor = ThreadPoolExecutor(max_workers=1)
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    log.storage_executor = executor
    for seq in range(0, 12, 2):
        log.append_as_leader(idem(11, 0, seq, n=2), 0)
    executor.shutdown(wait=True)
    assert len(log.segments) > 1
    assert snapshot_files(log.directory) == []
    assert not [name for name in os.listdir(log.directory) if name.endswith(".tmp")]
    assert log.producer_state.pending_snapshot_offsets == []
    assert log.append_as_leader(idem(11, 0, 12), 0).first_offset == 12
    monkeypatch.undo()
    log.close()
