"""Group members spoken for by raw requests: a classic member (JoinGroup / SyncGroup / Heartbeat /
LeaveGroup) and a consumer-protocol member (ConsumerGroupHeartbeat), for tests that pin the wire
behaviour of the group coordinator down, each retrying while the coordinator loads."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from strom.coordinator.group.consumer_protocol import decode_assignment, encode_subscription
from strom.protocol.group_messages import ConsumerGroupHeartbeatRequest as CGH
from strom.protocol.group_messages import ConsumerGroupHeartbeatResponse
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode

NONE = 0
MEMBER_ID_REQUIRED = 79
RETRIABLE = (14, 15, 16)  # loading, not available, not coordinator


def create_topic(broker: BrokerProcess, partitions: int) -> str:
    """A new topic with a random name, on one broker."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


class ClassicMember:
    """A classic-protocol member spoken for by raw JoinGroup / SyncGroup / Heartbeat requests."""

    def __init__(self, broker: BrokerProcess, group: str, topic: str) -> None:
        self.client = RawClient(broker)
        self.group, self.topic = group, topic
        self.member_id = ""
        self.instance_id: str | None = None
        self.generation = -1
        self.protocol = "range"
        self.session_timeout_ms = 10000
        self.assigned: list[int] = []
        self.client.request(FindCoordinatorRequest(key=group), version=1)

    def join(self, owned: list[int] | None = None, metadata: bytes | None = None) -> Any:
        meta = encode_subscription([self.topic]) if metadata is None else metadata
        if owned is not None:  # a v1 subscription: v0's fields, then the partitions it owns
            meta = b"\x00\x01" + meta[2:] + owned_partitions(self.topic, owned)
        deadline = time.monotonic() + 60
        while True:
            frame = self.client.request(JoinGroupRequest(
                group_id=self.group, session_timeout_ms=self.session_timeout_ms, rebalance_timeout_ms=10000, member_id=self.member_id,
                group_instance_id=self.instance_id, protocol_type="consumer", protocols=[(self.protocol, meta)]), version=5)
            resp = decode(JoinGroupResponse, frame, 5, False)
            if resp.error_code == MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                continue
            if resp.error_code not in RETRIABLE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if resp.error_code == NONE:
            self.member_id, self.generation = resp.member_id, resp.generation_id
        return resp

    def sync(self, assignments: list[tuple[str, bytes]] | None = None) -> Any:
        frame = self.client.request(SyncGroupRequest(group_id=self.group, generation_id=self.generation,
                                                     member_id=self.member_id, group_instance_id=self.instance_id,
                                                     assignments=assignments or []), version=3)
        resp = decode(SyncGroupResponse, frame, 3, False)
        if resp.error_code == NONE:
            self.assigned = sorted((decode_assignment(resp.assignment) or {}).get(self.topic, []))
        return resp

    def heartbeat(self) -> int:
        frame = self.client.request(HeartbeatRequest(group_id=self.group, generation_id=self.generation,
                                                     member_id=self.member_id, group_instance_id=self.instance_id), version=3)
        return decode(HeartbeatResponse, frame, 3, False).error_code

    def leave(self) -> Any:
        M = LeaveGroupRequest.MemberIdentity  # noqa: N806
        frame = self.client.request(LeaveGroupRequest(group_id=self.group, members=[
            M(member_id=self.member_id, group_instance_id=None)]), version=3)
        return decode(LeaveGroupResponse, frame, 3, False)

    def close(self) -> None:
        self.client.close()


def owned_partitions(topic: str, partitions: list[int]) -> bytes:
    """The owned-partitions field a v1+ consumer subscription ends with (one topic)."""
    raw = topic.encode()
    out = (1).to_bytes(4, "big") + len(raw).to_bytes(2, "big") + raw + len(partitions).to_bytes(4, "big")
    return out + b"".join(p.to_bytes(4, "big") for p in partitions)


class ConsumerMember:
    """A consumer-protocol member spoken for by raw ConsumerGroupHeartbeat requests."""

    def __init__(self, broker: BrokerProcess, group: str) -> None:
        self.client = RawClient(broker)
        self.group = group
        self.member_id = uuid.uuid4().hex
        self.epoch = 0
        self.assigned: dict[uuid.UUID, list[int]] = {}
        self.client.request(FindCoordinatorRequest(key=group), version=1)  # creates the offsets topic

    def send(self, **fields: Any) -> Any:
        fields.setdefault("group_id", self.group)
        fields.setdefault("member_id", self.member_id)
        fields.setdefault("member_epoch", self.epoch)
        deadline = time.monotonic() + 60
        while True:
            resp = decode(ConsumerGroupHeartbeatResponse, self.client.request(CGH(**fields), version=1), 1, True)
            if resp.error_code not in RETRIABLE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if resp.error_code == NONE:
            self.epoch = resp.member_epoch
            if resp.assignment is not None:
                self.assigned = {tp.topic_id: sorted(tp.partitions) for tp in resp.assignment.topic_partitions}
        return resp

    def join(self, topic: str) -> Any:
        return self.send(member_epoch=0, rebalance_timeout_ms=30000, subscribed_topic_names=[topic],
                         topic_partitions=[])

    def heartbeat(self) -> Any:
        owned = [CGH.TopicPartitions(topic_id=t, partitions=p) for t, p in self.assigned.items()]
        return self.send(topic_partitions=owned)

    def partitions(self) -> set[int]:
        return {p for parts in self.assigned.values() for p in parts}

    def close(self) -> None:
        self.client.close()
