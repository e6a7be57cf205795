"""Inter-broker message definitions: round trips at the versions Strom's controller sends, and
frames assembled by hand from Kafka's published layouts (so a wrong JSON definition fails)."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from strom.protocol import codec
from strom.protocol.inter_broker import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from strom.protocol.primitives import uvarint

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
ALL = [
    LeaderAndIsrRequest, LeaderAndIsrResponse, StopReplicaRequest, StopReplicaResponse,
    UpdateMetadataRequest, UpdateMetadataResponse, ControlledShutdownRequest, ControlledShutdownResponse,
    AlterPartitionRequest, AlterPartitionResponse,
]


# Flexible-version primitives, written out by hand.
def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def cstr(s: str) -> bytes:
    return uvarint(len(s) + 1) + s.encode()


def carr(*items: bytes) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def ints(*vs: int) -> bytes:
    return carr(*(i32(v) for v in vs))


NO_TAGS = b"\x00"


def roundtrip(msg: Any, version: int) -> Any:
    decoded = type(msg).decode(msg.encode(version=version), version=version)
    assert decoded.to_dict(json=False) == msg.to_dict(json=False)
    return decoded


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_version_encodes_empty_message(cls: Any) -> None:
    for version in range(cls.max_version + 1):
        roundtrip(cls(version=version), version)


def test_codec_knows_the_inter_broker_apis() -> None:
    for cls in ALL:
        table = codec.request_class if cls.is_request() else codec.response_class
        assert table(cls.API_KEY) is cls
    assert [codec.is_flexible(4, 6), codec.is_flexible(5, 3), codec.is_flexible(6, 8)] == [True] * 3
    assert codec.is_flexible(7, 3) and not codec.is_flexible(7, 2) and codec.is_flexible(56, 0)


# --- LeaderAndIsr v6 -------------------------------------------------------------------

def leader_and_isr_v6() -> Any:
    topic = LeaderAndIsrRequest.LeaderAndIsrTopicState
    state = topic.LeaderAndIsrPartitionState
    return LeaderAndIsrRequest(
        version=6, controller_id=1, controller_epoch=5, broker_epoch=100, request_type=0,
        topic_states=[topic(
            version=6, topic_name="t", topic_id=TOPIC_ID,
            partition_states=[state(
                version=6, partition_index=0, controller_epoch=5, leader=1, leader_epoch=3,
                isr=[1, 2], partition_epoch=7, replicas=[1, 2], adding_replicas=[], removing_replicas=[],
                is_new=True, leader_recovery_state=1,
            )],
        )],
        live_leaders=[LeaderAndIsrRequest.LeaderAndIsrLiveLeader(version=6, broker_id=1, host_name="h", port=9092)],
    )


LEADER_AND_ISR_V6 = (
    i32(1) + i32(5) + i64(100) + i8(0)
    + carr(cstr("t") + TOPIC_ID.bytes + carr(
        i32(0) + i32(5) + i32(1) + i32(3) + ints(1, 2) + i32(7) + ints(1, 2) + ints() + ints()
        + b"\x01" + i8(1) + NO_TAGS) + NO_TAGS)
    + carr(i32(1) + cstr("h") + i32(9092) + NO_TAGS)
    + NO_TAGS
)


def test_leader_and_isr_v6_bytes_and_roundtrip() -> None:
    req = leader_and_isr_v6()
    assert bytes(req.encode(version=6)) == LEADER_AND_ISR_V6
    decoded = roundtrip(req, 6)
    topic = decoded.topic_states[0]
    assert isinstance(topic.topic_id, uuid.UUID) and topic.topic_id == TOPIC_ID
    assert topic.partition_states[0].isr == [1, 2]
    assert topic.partition_states[0].leader_recovery_state == 1


def test_leader_and_isr_v6_through_the_broker_decode_path() -> None:
    req = leader_and_isr_v6()
    req.with_header(correlation_id=42, client_id="controller")
    frame = memoryview(bytes(req.encode(version=6, header=True)))
    header, pos = codec.parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.flexible) == (4, 6, 42, True)
    decoded = codec.decode_request(header, frame[pos:])
    assert decoded.topic_states[0].topic_id == TOPIC_ID


def test_leader_and_isr_v0_ungrouped_and_v7() -> None:
    state = LeaderAndIsrRequest.LeaderAndIsrPartitionState  # the v0-1 (ungrouped) flavour
    roundtrip(LeaderAndIsrRequest(
        version=0, controller_id=1, controller_epoch=2,
        ungrouped_partition_states=[state(version=0, topic_name="t", partition_index=3, controller_epoch=2,
                                          leader=1, leader_epoch=0, isr=[1], partition_epoch=0, replicas=[1])],
        live_leaders=[]), 0)
    v7 = leader_and_isr_v6()
    v7.is_k_raft_controller = True
    encoded = bytes(v7.encode(version=7))
    assert encoded[:5] == i32(1) + b"\x01"  # the KRaft flag sits right after the controller id
    assert roundtrip(v7, 7).is_k_raft_controller is True


def test_leader_and_isr_response_v6() -> None:
    topic = LeaderAndIsrResponse.LeaderAndIsrTopicError
    resp = LeaderAndIsrResponse(version=6, error_code=0, topics=[topic(
        version=6, topic_id=TOPIC_ID,
        partition_errors=[topic.LeaderAndIsrPartitionError(version=6, partition_index=2, error_code=6)])])
    expected = i16(0) + carr(TOPIC_ID.bytes + carr(i32(2) + i16(6) + NO_TAGS) + NO_TAGS) + NO_TAGS
    assert bytes(resp.encode(version=6)) == expected
    assert roundtrip(resp, 6).topics[0].topic_id == TOPIC_ID


# --- UpdateMetadata v8 (with its tagged Type field) ---------------------------------------

def update_metadata_v8(type_: int) -> Any:
    topic = UpdateMetadataRequest.UpdateMetadataTopicState
    broker = UpdateMetadataRequest.UpdateMetadataBroker
    return UpdateMetadataRequest(
        version=8, controller_id=1, is_k_raft_controller=False, request_type=type_, controller_epoch=5, broker_epoch=9,
        topic_states=[topic(version=8, topic_name="t", topic_id=TOPIC_ID, partition_states=[
            topic.UpdateMetadataPartitionState(
                version=8, partition_index=0, controller_epoch=5, leader=2, leader_epoch=4,
                isr=[2], zk_version=3, replicas=[2, 3], offline_replicas=[3])])],
        live_brokers=[broker(version=8, id=2, rack=None, endpoints=[
            broker.UpdateMetadataEndpoint(version=8, port=9092, host="h", listener="PLAINTEXT",
                                          security_protocol=0)])],
    )


def update_metadata_v8_bytes(tags: bytes) -> bytes:
    return (
        i32(1) + b"\x00" + i32(5) + i64(9)
        + carr(cstr("t") + TOPIC_ID.bytes + carr(
            i32(0) + i32(5) + i32(2) + i32(4) + ints(2) + i32(3) + ints(2, 3) + ints(3) + NO_TAGS) + NO_TAGS)
        + carr(i32(2) + carr(i32(9092) + cstr("h") + cstr("PLAINTEXT") + i16(0) + NO_TAGS)
               + b"\x00" + NO_TAGS)  # rack: null compact string
        + tags
    )


def test_update_metadata_v8_bytes_and_tagged_type() -> None:
    # Type is tag 0 and omitted at its default (0); a full snapshot (2) is sent as one tagged field.
    assert bytes(update_metadata_v8(0).encode(version=8)) == update_metadata_v8_bytes(NO_TAGS)
    full = update_metadata_v8_bytes(b"\x01" + b"\x00" + b"\x01" + i8(2))
    assert bytes(update_metadata_v8(2).encode(version=8)) == full
    decoded = UpdateMetadataRequest.decode(full, version=8)
    assert decoded.request_type == 2
    assert decoded.topic_states[0].topic_id == TOPIC_ID and decoded.live_brokers[0].rack is None
    roundtrip(update_metadata_v8(2), 8)


def test_update_metadata_unknown_tag_is_kept() -> None:
    frame = update_metadata_v8_bytes(b"\x01" + uvarint(5) + b"\x02" + b"ab")
    assert UpdateMetadataRequest.decode(frame, version=8).unknown_tags == {"_5": b"ab"}


def test_update_metadata_response_v8() -> None:
    assert bytes(UpdateMetadataResponse(version=8, error_code=0).encode(version=8)) == i16(0) + NO_TAGS


# --- StopReplica v3 ------------------------------------------------------------------------

def test_stop_replica_v3_bytes_and_roundtrip() -> None:
    topic = StopReplicaRequest.StopReplicaTopicState
    req = StopReplicaRequest(
        version=3, controller_id=1, controller_epoch=5, broker_epoch=9,
        topic_states=[topic(version=3, topic_name="t", partition_states=[
            topic.StopReplicaPartitionState(version=3, partition_index=1, leader_epoch=-2, delete_partition=True)])])
    expected = (i32(1) + i32(5) + i64(9)
                + carr(cstr("t") + carr(i32(1) + i32(-2) + b"\x01" + NO_TAGS) + NO_TAGS) + NO_TAGS)
    assert bytes(req.encode(version=3)) == expected
    assert roundtrip(req, 3).topic_states[0].partition_states[0].delete_partition is True

    resp = StopReplicaResponse(version=3, error_code=0, partition_errors=[
        StopReplicaResponse.StopReplicaPartitionError(version=3, topic_name="t", partition_index=1, error_code=0)])
    assert bytes(resp.encode(version=3)) == i16(0) + carr(cstr("t") + i32(1) + i16(0) + NO_TAGS) + NO_TAGS
    roundtrip(resp, 3)


def test_stop_replica_v1_is_not_flexible() -> None:
    topic = StopReplicaRequest.StopReplicaTopicV1
    req = StopReplicaRequest(version=1, controller_id=1, controller_epoch=5, broker_epoch=9, delete_partitions=False,
                             topics=[topic(version=1, name="t", partition_indexes=[0, 1])])
    expected = (i32(1) + i32(5) + i64(9) + b"\x00"
                + i32(1) + i16(1) + b"t" + i32(2) + i32(0) + i32(1))
    assert bytes(req.encode(version=1)) == expected


# --- ControlledShutdown v3 -----------------------------------------------------------------

def test_controlled_shutdown_v3_bytes_and_roundtrip() -> None:
    req = ControlledShutdownRequest(version=3, broker_id=2, broker_epoch=77)
    assert bytes(req.encode(version=3)) == i32(2) + i64(77) + NO_TAGS
    roundtrip(req, 3)
    resp = ControlledShutdownResponse(version=3, error_code=0, remaining_partitions=[
        ControlledShutdownResponse.RemainingPartition(version=3, topic_name="t", partition_index=4)])
    assert bytes(resp.encode(version=3)) == i16(0) + carr(cstr("t") + i32(4) + NO_TAGS) + NO_TAGS
    assert roundtrip(resp, 3).remaining_partitions[0].partition_index == 4


# --- AlterPartition v2 ---------------------------------------------------------------------

def test_alter_partition_v2_bytes_and_roundtrip() -> None:
    topic = AlterPartitionRequest.TopicData
    req = AlterPartitionRequest(version=2, broker_id=1, broker_epoch=50, topics=[topic(
        version=2, topic_id=TOPIC_ID, partitions=[topic.PartitionData(
            version=2, partition_index=0, leader_epoch=3, new_isr=[1, 2], leader_recovery_state=0,
            partition_epoch=8)])])
    expected = (i32(1) + i64(50)
                + carr(TOPIC_ID.bytes + carr(i32(0) + i32(3) + ints(1, 2) + i8(0) + i32(8) + NO_TAGS) + NO_TAGS)
                + NO_TAGS)
    assert bytes(req.encode(version=2)) == expected
    decoded = roundtrip(req, 2)
    assert isinstance(decoded.topics[0].topic_id, uuid.UUID) and decoded.topics[0].topic_id == TOPIC_ID

    rtopic = AlterPartitionResponse.TopicData
    resp = AlterPartitionResponse(version=2, throttle_time_ms=0, error_code=0, topics=[rtopic(
        version=2, topic_id=TOPIC_ID, partitions=[rtopic.PartitionData(
            version=2, partition_index=0, error_code=0, leader_id=1, leader_epoch=3, isr=[1, 2],
            leader_recovery_state=0, partition_epoch=9)])])
    expected = (i32(0) + i16(0)
                + carr(TOPIC_ID.bytes + carr(i32(0) + i16(0) + i32(1) + i32(3) + ints(1, 2) + i8(0) + i32(9)
                                             + NO_TAGS) + NO_TAGS)
                + NO_TAGS)
    assert bytes(resp.encode(version=2)) == expected
    assert roundtrip(resp, 2).topics[0].partitions[0].partition_epoch == 9


def test_alter_partition_v3_isr_with_epochs() -> None:
    topic = AlterPartitionRequest.TopicData
    part = topic.PartitionData
    req = AlterPartitionRequest(version=3, broker_id=1, broker_epoch=50, topics=[topic(
        version=3, topic_id=TOPIC_ID, partitions=[part(
            version=3, partition_index=0, leader_epoch=3, leader_recovery_state=0, partition_epoch=8,
            new_isr_with_epochs=[part.BrokerState(version=3, broker_id=2, broker_epoch=11)])])])
    decoded = roundtrip(req, 3)
    assert decoded.topics[0].partitions[0].new_isr_with_epochs[0].broker_epoch == 11
