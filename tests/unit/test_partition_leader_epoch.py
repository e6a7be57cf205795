"""Partition: leader epoch fencing (KIP-320) and OffsetForLeaderEpoch answers, over a real Log."""

from __future__ import annotations

import os
import uuid

import pytest
from kafka.errors import (
    FencedLeaderEpochError,
    NotLeaderForPartitionError,
    OffsetNotAvailableError,
    UnknownLeaderEpochError,
)

from strom.broker.partition import Partition
from strom.metadata.store import PartitionState
from strom.protocol.record_batch import build_batch
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

LOCAL = 1


def make_partition(tmp_path: str, leader: int = LOCAL, epoch: int = 3) -> Partition:
    log = Log(os.path.join(tmp_path, "t-0"), LogConfig.from_props({}), now_ms=0)
    state = PartitionState(0, leader, epoch, [LOCAL, 2], [LOCAL])
    return Partition("t", 0, uuid.uuid4(), state, log, LOCAL)


def records(n: int) -> bytes:
    return build_batch([(None, b"v", [], 1_000 + i) for i in range(n)])


def test_check_leader_epoch(tmp_path: str) -> None:
    part = make_partition(tmp_path)
    part.check_leader_epoch(-1)
    part.check_leader_epoch(3)
    with pytest.raises(FencedLeaderEpochError):
        part.check_leader_epoch(2)
    with pytest.raises(UnknownLeaderEpochError):
        part.check_leader_epoch(4)
    part.log.close()


def test_appends_carry_the_partition_epoch_into_the_cache(tmp_path: str) -> None:
    part = make_partition(tmp_path)
    part.append_records_to_leader(records(4), required_acks=1)
    part.update_state(PartitionState(0, LOCAL, 5, [LOCAL, 2], [LOCAL]))
    part.append_records_to_leader(records(2), required_acks=1)
    assert part.last_offset_for_leader_epoch(-1, 3) == (3, 4)
    assert part.last_offset_for_leader_epoch(5, 4) == (3, 4)
    assert part.last_offset_for_leader_epoch(5, 5) == (5, 6)
    assert part.last_offset_for_leader_epoch(5, 6) == (-1, -1)
    part.log.close()


def test_last_offset_for_leader_epoch_fences_before_checking_leadership(tmp_path: str) -> None:
    part = make_partition(tmp_path, leader=2)
    with pytest.raises(FencedLeaderEpochError):
        part.last_offset_for_leader_epoch(1, 0)
    with pytest.raises(NotLeaderForPartitionError):
        part.last_offset_for_leader_epoch(3, 0)
    assert part.last_offset_for_leader_epoch(3, 0, fetch_only_from_leader=False) == (-1, -1)
    part.log.close()


def test_a_new_leader_has_no_latest_offset_until_its_high_watermark_reaches_its_epoch_start(tmp_path: str) -> None:
    """A follower elected leader knows the HW only as it was sent; 500 acknowledged records are not "latest 0"."""
    part = make_partition(tmp_path, leader=2)
    part.append_records_as_follower(records(500), leader_high_watermark=0, leader_log_start_offset=0)
    assert part.high_watermark == 0
    part.check_high_watermark_reached_epoch_start()  # a follower: nothing to check
    part.update_state(PartitionState(0, LOCAL, 4, [LOCAL, 2], [LOCAL, 2]))
    assert part.leader_epoch_start_offset == 500 and part.high_watermark == 0
    with pytest.raises(OffsetNotAvailableError):
        part.check_high_watermark_reached_epoch_start()
    part.update_follower_fetch_state(2, 500)  # the other in-sync replica fetches: the HW catches up
    assert part.high_watermark == 500
    part.check_high_watermark_reached_epoch_start()
    part.log.close()
