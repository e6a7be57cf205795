"""A KIP-848 consumer group on a three-broker cluster: the broker coordinating it (the leader of
its ``__consumer_offsets`` partition) is killed with SIGKILL while a new member is joining. The
group moves with its partition to a new leader, which replays its records, and converges there:
no partition ever has two owners, nothing acknowledged is lost or consumed twice."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from strom.protocol.group_messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
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
