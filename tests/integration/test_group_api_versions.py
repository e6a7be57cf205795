"""Every version of the classic group APIs by raw request: a one-member group joins (JoinGroup v0-v9, with
the MEMBER_ID_REQUIRED round of v4+), syncs, heartbeats, commits and reads back its offsets, and leaves,
each at the version under test. Old clients (kafka-python pinned to 0.9 .. 2.0) use only some of them."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.integration.test_api_version_matrix import call
from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess

MEMBER_ID_REQUIRED, COORDINATOR_LOADING, COORDINATOR_NOT_AVAILABLE = 79, 14, 15


@pytest.mark.parametrize("version", range(0, 10))
def test_classic_group_round_trip_at_every_join_group_version(broker: BrokerProcess, version: int) -> None:
    topic = new_topic(broker)
    group = f"g{version}-{uuid.uuid4().hex[:6]}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the first group creates __consumer_offsets
        if call(broker, FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group]),
                0).error_code == 0:
            break
        time.sleep(0.5)
    P = JoinGroupRequest.JoinGroupRequestProtocol
    member_id = ""
    join = None
    while time.monotonic() < deadline:
        join = call(broker, JoinGroupRequest(
            group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id=member_id,
            group_instance_id=None, protocol_type="consumer", protocols=[P(name="range", metadata=b"m")],
            reason=None), version)
        if join.error_code == MEMBER_ID_REQUIRED:
            assert version >= 4  # from v4 the coordinator hands out the member id first
            member_id = join.member_id
            continue
        if join.error_code in (COORDINATOR_LOADING, COORDINATOR_NOT_AVAILABLE):
            time.sleep(0.5)
            continue
        break
    assert join is not None and join.error_code == 0
    assert join.leader == join.member_id and join.member_id
    assert [m.member_id for m in join.members] == [join.member_id]
    member_id, generation = join.member_id, join.generation_id
    sync_v, beat_v, leave_v = min(version, 5), min(version, 4), min(version, 5)
    A = SyncGroupRequest.SyncGroupRequestAssignment
    sync = call(broker, SyncGroupRequest(
        group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
        protocol_type="consumer", protocol_name="range", assignments=[A(member_id=member_id, assignment=b"a")]),
        sync_v)
    assert (sync.error_code, sync.assignment) == (0, b"a")
    beat = call(broker, HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                         group_instance_id=None), beat_v)
    assert beat.error_code == 0
    commit_v = min(version + 1, 9)  # v1+ carries the generation and member (v0 is the standalone commit)
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = call(broker, OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
        retention_time_ms=-1, topics=[T(name=topic, partitions=[T.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=7, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata="")])]), commit_v)
    assert commit.topics[0].partitions[0].error_code == 0
    F = OffsetFetchRequest.OffsetFetchRequestTopic
    fetched = call(broker, OffsetFetchRequest(group_id=group, topics=[F(name=topic, partition_indexes=[0])]),
                   min(version, 7))
    assert fetched.topics[0].partitions[0].committed_offset == 7
    M = LeaveGroupRequest.MemberIdentity
    leave = call(broker, LeaveGroupRequest(group_id=group, member_id=member_id,
                                           members=[M(member_id=member_id, group_instance_id=None, reason=None)]),
                 leave_v)
    assert leave.error_code == 0
    after = call(broker, HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                          group_instance_id=None), beat_v)
    assert after.error_code != 0  # gone from the group
