"""LogManager and the embedded metadata store when writes fail: no crash, no half state."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from kafka.errors import KafkaStorageError

from strom.metadata.embedded import METADATA_FILE, EmbeddedMetadataStore
from strom.storage.checkpoints import RECOVERY_POINT_CHECKPOINT
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager, parse_tombstone


def test_parse_tombstone() -> None:
    tid = uuid.uuid4().hex
    stone = parse_tombstone("/d", f"my-topic-3.{tid}-delete")
    assert stone is not None and (stone.topic, stone.partition, stone.topic_id) == ("my-topic", 3, tid)
    assert parse_tombstone("/d", "junk.abc-delete") is None
    assert parse_tombstone("/d", "my-topic-3") is None


def test_delete_log_tombstones_empties_and_purges_only_when_metadata_forgot(tmp_path: Path) -> None:
    mgr = LogManager([str(tmp_path)])
    mgr.load_logs()
    lg = mgr.get_or_create_log("t", 0)
    tid = uuid.uuid4()
    assert mgr.delete_log("t", 0, topic_id=tid)
    assert not os.path.exists(lg.directory)
    stone = tmp_path / f"t-0.{tid.hex}-delete"
    assert stone.is_dir() and not list(stone.iterdir())  # emptied, kept as the record
    assert mgr.purge_tombstones(None) == 0 and stone.is_dir()  # metadata write pending: keep
    assert mgr.purge_tombstones([tid.hex]) == 0 and stone.is_dir()  # metadata still lists it: keep
    assert mgr.purge_tombstones([]) == 1 and not stone.exists()
    mgr.get_or_create_log("orphan", 0)
    assert mgr.delete_log("orphan", 0)  # no topic id: nothing to record
    assert not mgr.tombstones()
    mgr.shutdown()


def test_shutdown_survives_failing_checkpoints_and_skips_the_marker(tmp_path: Path) -> None:
    mgr = LogManager([str(tmp_path)])
    mgr.load_logs()
    mgr.get_or_create_log("t", 0)
    os.mkdir(tmp_path / (RECOVERY_POINT_CHECKPOINT + ".tmp"))  # the checkpoint write fails
    mgr.shutdown()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    os.rmdir(tmp_path / (RECOVERY_POINT_CHECKPOINT + ".tmp"))
    mgr2 = LogManager([str(tmp_path)])
    mgr2.load_logs()
    assert mgr2.get_log("t", 0) is not None
    mgr2.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_failing_log_dir_goes_offline_and_new_logs_avoid_it(tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    bad.write_text("not a directory")
    mgr = LogManager([str(good), str(bad)])
    mgr.load_logs()
    assert mgr.offline_log_dirs == {str(bad)}
    with pytest.raises(KafkaStorageError):
        mgr.get_or_create_log("t", 0, is_new=False)  # might live in the offline dir
    assert mgr.log_dir_of("t", 1) is None
    mgr.get_or_create_log("t", 1)
    assert mgr.log_dir_of("t", 1) == str(good)
    mgr.shutdown()
    assert (good / CLEAN_SHUTDOWN_FILE).exists()


def test_metadata_store_rolls_back_failed_writes(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path, 0)
    store.create_topic("kept", {0: [0]}, {})
    blocker = tmp_path / (METADATA_FILE + ".tmp")
    blocker.mkdir()
    with pytest.raises(OSError):
        store.create_topic("new", {0: [0]}, {})
    assert store.topic("new") is None
    with pytest.raises(OSError):
        store.add_partitions("kept", {1: [0]})
    assert list(store.topic("kept").partitions) == [0]
    with pytest.raises(OSError):
        store.set_topic_configs("kept", {"retention.ms": "1"})
    assert store.topic("kept").configs == {}
    with pytest.raises(OSError):
        store.delete_topic("kept")
    assert store.topic("kept") is not None
    store.delete_topic("kept", recorded_elsewhere=True)  # durable elsewhere: acknowledged, written later
    assert store.topic("kept") is None and store.save_pending
    assert not store.retry_pending_save()
    blocker.rmdir()
    assert store.retry_pending_save() and not store.save_pending
    assert EmbeddedMetadataStore(tmp_path, 0).topic("kept") is None


def test_log_dir_taken_offline_keeps_its_data_and_comes_back(tmp_path: Path) -> None:
    from strom.protocol.record_batch import build_batch
    from strom.storage.log_manager import close_offline_log, is_log_dir_failure

    d1, d2 = tmp_path / "a", tmp_path / "b"
    mgr = LogManager([str(d1), str(d2)])
    mgr.load_logs()
    lg = mgr.get_or_create_log("t", 0)
    lg.append_as_leader(build_batch([(None, b"v", [], 1_700_000_000_000)]), 0)
    failed_dir = os.path.dirname(lg.directory)
    dropped = mgr.take_offline(failed_dir, OSError(28, "No space left on device"))
    assert list(dropped) == [("t", 0)] and mgr.get_log("t", 0) is None
    assert mgr.take_offline(failed_dir, OSError(28, "again")) == {}  # once only
    for offline in dropped.values():
        close_offline_log(offline)
    assert mgr.offline_log_dirs == {failed_dir}
    assert os.path.dirname(mgr.get_or_create_log("new", 0).directory) != failed_dir  # placed elsewhere
    with pytest.raises(KafkaStorageError):
        mgr.bring_online(str(d2 if failed_dir == str(d1) else d1))  # never failed: a restart's business
    assert mgr.bring_online(failed_dir) == [("t", 0)]
    assert not mgr.offline_log_dirs and mgr.get_log("t", 0).log_end_offset == 1
    assert is_log_dir_failure(KafkaStorageError("append")) is False
    wrapped = KafkaStorageError("append")
    wrapped.__cause__ = OSError(28, "No space left on device")
    assert is_log_dir_failure(wrapped) and not is_log_dir_failure(OSError(24, "Too many open files"))
    mgr.shutdown()
