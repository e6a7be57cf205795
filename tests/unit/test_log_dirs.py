"""Log dir identity and ownership files: meta.properties, partition.metadata, .lock, checkpoints."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from strom.storage.checkpoints import CorruptCheckpointError, OffsetCheckpointFile
from strom.storage.log_dirs import (
    LogDirError,
    LogDirLock,
    MetaProperties,
    check_identities,
    lock_log_dirs,
    read_meta_properties,
    write_meta_properties,
)
from strom.storage.partition_metadata import (
    decode_topic_id,
    encode_topic_id,
    ensure_topic_configs,
    ensure_topic_id,
    read_topic_configs,
    read_topic_id,
    write_topic_id,
)


@pytest.mark.parametrize("garbage", [b"\x00\xff\xfe\x80\x9c", b"0\n1\nt\xc3\x28 0 5\n", b"zzz\n"])
def test_unreadable_checkpoint_is_corrupt_not_a_crash(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(garbage)
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(str(path)).read()


def test_partition_metadata_kafka_format_and_round_trip(tmp_path: Path) -> None:
    tid = uuid.UUID("36d5423b-cd40-42ad-a96f-c738fcebfa5e")
    write_topic_id(str(tmp_path), tid)
    text = (tmp_path / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {encode_topic_id(tid)}\n"
    assert len(encode_topic_id(tid)) == 22 and decode_topic_id(encode_topic_id(tid)) == tid
    assert read_topic_id(str(tmp_path)) == tid
    ensure_topic_id(str(tmp_path), uuid.uuid4())  # a recorded id is never overwritten
    assert read_topic_id(str(tmp_path)) == tid


@pytest.mark.parametrize("garbage", [b"\xff\x00\x01", b"version: 0\n", b"version: 9\ntopic_id: AAAA\n",
                                     b"version: 0\ntopic_id: !!notbase64\n", b"version: x\ntopic_id: y\n"])
def test_unreadable_partition_metadata_says_nothing(tmp_path: Path, garbage: bytes) -> None:
    (tmp_path / "partition.metadata").write_bytes(garbage)
    assert read_topic_id(str(tmp_path)) is None
    tid = uuid.uuid4()
    ensure_topic_id(str(tmp_path), tid)  # rewritten
    assert read_topic_id(str(tmp_path)) == tid


def test_topic_configs_recorded_only_when_needed(tmp_path: Path) -> None:
    ensure_topic_configs(str(tmp_path), {})
    assert not (tmp_path / "topic.configs").exists()
    ensure_topic_configs(str(tmp_path), {"cleanup.policy": "compact,delete", "retention.ms": "100"})
    assert read_topic_configs(str(tmp_path)) == {"cleanup.policy": "compact,delete", "retention.ms": "100"}
    ensure_topic_configs(str(tmp_path), {})
    assert read_topic_configs(str(tmp_path)) == {}
    (tmp_path / "topic.configs").write_bytes(b"\xff\xfe")
    assert read_topic_configs(str(tmp_path)) is None


def test_meta_properties_round_trip_and_kafka_v0(tmp_path: Path) -> None:
    assert read_meta_properties(str(tmp_path)) is None
    write_meta_properties(str(tmp_path), MetaProperties("abcDEF", 3))
    text = (tmp_path / "meta.properties").read_text()
    assert "version=1\n" in text and "node.id=3\n" in text and "cluster.id=abcDEF\n" in text
    assert read_meta_properties(str(tmp_path)) == MetaProperties("abcDEF", 3)
    (tmp_path / "meta.properties").write_text("#\nversion=0\nbroker.id=5\ncluster.id=zk\n")
    assert read_meta_properties(str(tmp_path)) == MetaProperties("zk", 5)


@pytest.mark.parametrize("garbage", [b"\xff\xfe\x00", b"version=1\ncluster.id=x\n", b"version=1\nnode.id=a\ncluster.id=x\n",
                                     b"version=1\nnode.id=1\n"])
def test_unreadable_meta_properties_is_named(tmp_path: Path, garbage: bytes) -> None:
    (tmp_path / "meta.properties").write_bytes(garbage)
    with pytest.raises(LogDirError, match=str(tmp_path / "meta.properties")):
        read_meta_properties(str(tmp_path))


def test_identities_must_agree(tmp_path: Path) -> None:
    a, b, c = (str(tmp_path / n) for n in "abc")
    for d in (a, b, c):
        os.makedirs(d)
    write_meta_properties(a, MetaProperties("one", 0))
    metas, cluster = check_identities([a, c], 0, None)
    assert cluster == "one" and metas[c] is None
    with pytest.raises(LogDirError, match=f"log dir {a} belongs to broker 0"):
        check_identities([a], 1, None)
    with pytest.raises(LogDirError, match="cluster.id is two"):
        check_identities([a], 0, "two")
    write_meta_properties(b, MetaProperties("two", 0))
    with pytest.raises(LogDirError, match="different clusters"):
        check_identities([a, b], 0, None)


def test_lock_is_exclusive_and_all_or_nothing(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.makedirs(a)
    os.makedirs(b)
    held = LogDirLock(b)
    with pytest.raises(LogDirError, match=f"log dir {b} is in use: process {os.getpid()}"):
        lock_log_dirs([a, b])
    again = LogDirLock(a)  # the lock on a was released when b failed
    again.release()
    held.release()
    for lk in lock_log_dirs([a, b]):
        lk.release()


def test_new_partitions_go_to_the_log_dir_with_fewest_through_load_delete_and_offline(tmp_path: Path) -> None:
    """Kafka's placement rule, with the per-dir counts kept as logs are loaded, created, deleted,
    taken offline and brought back."""
    from strom.storage.log_manager import LogManager

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    first = LogManager([a])
    first.load_logs()
    for p in range(3):
        first.get_or_create_log("old", p)
    first.shutdown()
    mgr = LogManager([a, b])
    mgr.load_logs()
    placed = [os.path.dirname(mgr.get_or_create_log("new", p).directory) for p in range(4)]
    assert placed == [b, b, b, a]  # b fills up to a's three first; a tie goes to the first dir listed
    for p in range(3):
        mgr.delete_log("old", p)
    assert os.path.dirname(mgr.get_or_create_log("after-delete", 0).directory) == a
    dropped = mgr.take_offline(b, OSError(5, "Input/output error"))
    for lg in dropped.values():
        lg.close()
    assert {os.path.dirname(mgr.get_or_create_log("while-offline", p).directory) for p in range(3)} == {a}
    assert len(mgr.bring_online(b)) == len(dropped) == 3
    assert os.path.dirname(mgr.get_or_create_log("back", 0).directory) == b  # 3 in b against 5 in a
    mgr.shutdown()
