"""KIP-848 consumer groups on a three-broker cluster. (a) The broker coordinating it (the leader of
its ``__consumer_offsets`` partition) is killed with SIGKILL while a new member is joining. The
group moves with its partition to a new leader, which replays its records, and converges there:
no partition ever has two owners, nothing acknowledged is lost or consumed twice. (b) With
broker racks and member rack ids, the uniform assignor hands each member its rack's partitions."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from strom.protocol.group_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from tests.support.checker import SequenceProducer
from tests.support.cluster import ClusterProcess
from tests.support.consumer_protocol import GroupMember, Tracker
from tests.support.raw_client import RawClient, decode
from tests.support.replicas import create_topic

pytestmark = pytest.mark.cluster

TIMEOUT = 90.0
OVERRIDES = {"group.consumer.heartbeat.interval.ms": 300, "group.consumer.session.timeout.ms": 10000,
             "group.consumer.min.session.timeout.ms": 1000, "group.consumer.min.heartbeat.interval.ms": 100,
             "offsets.topic.num.partitions": 3}


def group_coordinator(cluster: ClusterProcess, group: str) -> int:
    """FindCoordinator (raw, v4) to any live broker; retried while the offsets partition moves or loads."""

    def ask() -> int | None:
        for broker_id in cluster.broker_ids:
            if not cluster.running(broker_id):
                continue
            raw = RawClient(cluster.broker(broker_id))
            try:
                resp = decode(FindCoordinatorResponse, raw.request(
                    FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4), 4, True)
            finally:
                raw.close()
            coordinator = resp.coordinators[0]
            if coordinator.error_code == 0 and cluster.running(coordinator.node_id):
                return coordinator.node_id
        return None

    return cluster.wait_for(ask, TIMEOUT, f"the coordinator of {group}")


def describe(cluster: ClusterProcess, broker_id: int, group: str) -> object:
    raw = RawClient(cluster.broker(broker_id))
    try:
        req = ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
        return decode(ConsumerGroupDescribeResponse, raw.request(req, 1), 1, True).groups[0]
    finally:
        raw.close()


def test_coordinator_killed_mid_rebalance(cluster_factory) -> None:  # noqa: ANN001 - pytest fixture
    cluster = cluster_factory(3, overrides=OVERRIDES)
    topic = create_topic(cluster, partitions=6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    tracker = Tracker()
    producer = SequenceProducer(cluster.bootstrap, topic, config={"enable.idempotence": True, "acks": "all"},
                                rate_sleep=0.002).start()
    members = [GroupMember(cluster.bootstrap, group, topic, name, tracker) for name in ("m0", "m1")]
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and len(tracker.consumed) < 300:
            time.sleep(0.2)
        old = group_coordinator(cluster, group)
        members.append(GroupMember(cluster.bootstrap, group, topic, "m2", tracker))
        time.sleep(0.3)  # the join is being reconciled
        cluster.kill9(old)
        new = group_coordinator(cluster, group)
        assert new != old

        def converged() -> bool:
            d = describe(cluster, new, group)
            return d.error_code == 0 and d.group_state == "Stable" and len(d.members) == 3
        cluster.wait_for(converged, TIMEOUT, "the group to converge on the new coordinator")
        time.sleep(2)
    finally:
        producer.stop()
    acked = {(a.producer, a.seq) for a in producer.acked}
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and not acked <= set(tracker.consumed):
        time.sleep(0.2)
    for m in members:
        m.close()
    assert not tracker.violations, tracker.violations[:5]
    assert acked <= set(tracker.consumed), f"{len(acked - set(tracker.consumed))} records were lost"
    twice = {k: v for k, v in tracker.consumed.items() if len(v) > 1}
    assert not twice, list(twice.items())[:5]


def test_rack_aware_assignment(cluster_factory) -> None:  # noqa: ANN001 - pytest fixture
    """Members that send a rack id get the partitions whose replicas live in their rack."""
    cluster = cluster_factory(3, overrides=OVERRIDES,
                              broker_overrides={b: {"broker.rack": f"rack{b}"} for b in (1, 2, 3)})
    topic = create_topic(cluster, replicas=[[1], [2], [3], [1], [2], [3]])
    group = f"g-{uuid.uuid4().hex[:8]}"
    coordinator = group_coordinator(cluster, group)
    racks = {0: "rack1", 1: "rack2", 2: "rack3", 3: "rack1", 4: "rack2", 5: "rack3"}
    clients = [RawClient(cluster.broker(coordinator)) for _ in range(3)]
    try:
        ids = [uuid.uuid4().hex for _ in clients]
        epochs = [0, 0, 0]
        assigned: list[set[int]] = [set(), set(), set()]
        topic_id = None
        Owned = ConsumerGroupHeartbeatRequest.TopicPartitions
        for _ in range(6):  # join, then heartbeat (reporting what it owns) until every member holds its target
            for i, client in enumerate(clients):
                owned = [] if epochs[i] == 0 or not assigned[i] else [Owned(topic_id=topic_id,
                                                                             partitions=sorted(assigned[i]))]
                req = ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id=ids[i], member_epoch=epochs[i], rack_id=f"rack{i + 1}",
                    rebalance_timeout_ms=30000, subscribed_topic_names=[topic] if epochs[i] == 0 else None,
                    topic_partitions=owned)
                resp = decode(ConsumerGroupHeartbeatResponse, client.request(req, 1), 1, True)
                assert resp.error_code == 0, resp
                epochs[i] = resp.member_epoch
                if resp.assignment is not None:
                    assigned[i] = {p for tp in resp.assignment.topic_partitions for p in tp.partitions}
                    topic_id = next((tp.topic_id for tp in resp.assignment.topic_partitions), topic_id)
        for i in range(3):
            assert {racks[p] for p in assigned[i]} == {f"rack{i + 1}"}, assigned
    finally:
        for client in clients:
            client.close()
