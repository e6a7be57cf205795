"""Partition as the only way into a hosted log: the reads followers, handlers and coordinators use."""

from __future__ import annotations

import os
import uuid

import pytest
from kafka.errors import NotLeaderForPartitionError

from strom.broker.partition import READ_UNCOMMITTED, Partition
from strom.metadata.store import PartitionState
from strom.protocol.record_batch import build_batch, build_control_batch, iter_batches
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.validator import AppendOrigin

LOCAL = 1
LEADER = 2


def make_partition(tmp_path: str, leader: int = LOCAL, epoch: int = 3) -> Partition:
    """Led by `leader`; a leader here is alone in the ISR, so its HW follows its LEO."""
    log = Log(os.path.join(tmp_path, "t-0"), LogConfig.from_props({}), now_ms=0)
    state = PartitionState(0, leader, epoch, [LOCAL, LEADER], [leader])
    return Partition("t", 0, uuid.uuid4(), state, log, LOCAL)


def records(n: int, epoch: int = 0, base_offset: int = 0) -> bytes:
    return build_batch([(None, b"v", [], 1_000 + i) for i in range(n)], base_offset=base_offset,
                       partition_leader_epoch=epoch)


def offsets(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h in iter_batches(data)]


def test_a_coordinator_load_reads_past_the_high_watermark_up_to_the_end_it_was_given(tmp_path: str) -> None:
    part = make_partition(tmp_path, leader=LEADER)
    part.append_records_as_follower(records(2, epoch=1), leader_high_watermark=2, leader_log_start_offset=0)
    part.append_records_as_follower(records(3, epoch=1, base_offset=2), leader_high_watermark=2,
                                    leader_log_start_offset=0)
    part.append_records_as_follower(records(1, epoch=1, base_offset=5), leader_high_watermark=2,
                                    leader_log_start_offset=0)
    assert (part.high_watermark, part.log_end_offset) == (2, 6)
    # A consumer stops at the HW; a load bounded by an LEO it saw earlier stops there, not at the current LEO.
    assert offsets(part.read_records(0, 10**6, READ_UNCOMMITTED, True).to_bytes()) == [(0, 1)]
    assert offsets(part.read_records_up_to(0, 10**6, 5).to_bytes()) == [(0, 1), (2, 4)]
    part.log.close()


def test_a_follower_finds_its_own_epoch_ends_without_being_leader(tmp_path: str) -> None:
    part = make_partition(tmp_path, leader=LEADER)
    part.append_records_as_follower(records(2, epoch=1), 0, 0)
    part.append_records_as_follower(records(3, epoch=4, base_offset=2), 0, 0)
    assert part.latest_epoch == 4
    assert part.leader_epoch == 3  # the controller's epoch, not the log's
    assert part.end_offset_for_epoch(1) == (1, 2)
    assert part.end_offset_for_epoch(3) == (1, 2)
    assert part.end_offset_for_epoch(4) == (4, 5)
    with pytest.raises(NotLeaderForPartitionError):  # other brokers must ask the leader
        part.last_offset_for_leader_epoch(3, 1)
    part.log.close()


def test_aborted_transactions_and_active_producers_come_from_the_partition(tmp_path: str) -> None:
    part = make_partition(tmp_path)
    txn = build_batch([(b"k", b"v", [], 1_000), (b"k", b"w", [], 1_001)], producer_id=7, producer_epoch=2,
                      base_sequence=0, is_transactional=True)
    part.append_records_to_leader(txn, required_acks=1)
    part.append_records_to_leader(build_control_batch(7, 2, 0, False, 2_000), required_acks=1,
                                  origin=AppendOrigin.COORDINATOR)
    part.append_records_to_leader(build_batch([(None, b"x", [], 3_000)], producer_id=9, producer_epoch=0,
                                              base_sequence=0), required_acks=1)
    assert part.last_stable_offset == 4
    aborted = part.collect_aborted_transactions(0, part.last_stable_offset)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(7, 0, 2)]
    assert part.collect_aborted_transactions(3, part.last_stable_offset) == []

    producers = part.active_producers()
    assert sorted((e.producer_id, e.producer_epoch, e.last_seq) for e in producers) == [(7, 2, 1), (9, 0, 0)]
    producers.clear()  # a copy: the log keeps tracking them
    assert len(part.active_producers()) == 2
    part.log.close()


def test_topic_config_changes_reach_the_log(tmp_path: str) -> None:
    part = make_partition(tmp_path)
    assert part.partition_dir == os.path.join(tmp_path, "t-0")
    assert part.log_dir == str(tmp_path)
    part.update_log_config(LogConfig.from_props({"compression.type": "zstd", "min.insync.replicas": "2"}))
    assert part.log_config.compression_type == "zstd"
    assert part.min_insync_replicas == 2
    assert part.num_log_segments == 1
    part.log.close()


def test_a_follower_truncates_through_the_partition(tmp_path: str) -> None:
    part = make_partition(tmp_path, leader=LEADER)
    part.append_records_as_follower(records(3, epoch=1), 0, 0)
    part.append_records_as_follower(records(2, epoch=2, base_offset=3), 0, 0)
    assert part.truncate_to(3)  # divergence found at the start of epoch 2
    assert (part.log_end_offset, part.latest_epoch) == (3, 1)
    assert not part.truncate_to(5)  # nothing at or after the LEO to drop
    part.truncate_fully_and_start_at(40)  # below the leader's log start: start over there
    assert (part.log_start_offset, part.log_end_offset, part.latest_epoch) == (40, 40, None)
    part.append_records_as_follower(records(1, epoch=3, base_offset=40), 41, 40)
    assert offsets(part.read_records(40, 10**6, READ_UNCOMMITTED, True).to_bytes()) == [(40, 40)]
    part.log.close()


def test_a_replica_about_to_lead_records_its_epoch_at_its_end_through_the_partition(tmp_path: str) -> None:
    part = make_partition(tmp_path, leader=LEADER)
    part.append_records_as_follower(records(2, epoch=1), 0, 0)
    part.assign_epoch_start_offset(5)
    assert part.latest_epoch == 5
    assert part.end_offset_for_epoch(1) == (1, 2)
    assert part.end_offset_for_epoch(5) == (5, 2)
    part.log.close()


def test_nothing_outside_storage_and_the_partition_reaches_into_a_hosted_log() -> None:
    """Followers, handlers and coordinators go through Partition: ``<partition>.log`` stays private to it."""
    import ast

    import strom

    root = os.path.dirname(strom.__file__)
    allowed = {os.path.join(root, "broker", "partition.py")}
    found = []
    for dirpath, _, names in os.walk(root):
        if os.path.join(root, "storage") in dirpath:
            continue
        for name in names:
            path = os.path.join(dirpath, name)
            if not name.endswith(".py") or path in allowed:
                continue
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr == "log":
                    found.append(f"{os.path.relpath(path, root)}:{node.lineno}")
    assert found == []
