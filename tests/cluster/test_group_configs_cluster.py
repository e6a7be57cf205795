"""Group configs in a ZooKeeper cluster: written through one broker under /config/groups (with a
/config/changes notification), described by every broker and applied by the group's coordinator."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from tests.integration.test_consumer_group_configs import GROUP_CONFIG, SET, _alter, _describe, _heartbeat
from tests.support.raw_client import RawClient, decode

pytestmark = [pytest.mark.cluster, pytest.mark.zookeeper]


def test_group_config_set_on_one_broker_reaches_the_coordinator(cluster_factory: Any) -> None:
    cluster = cluster_factory(2, overrides={"group.consumer.heartbeat.interval.ms": 300,
                                            "group.consumer.min.heartbeat.interval.ms": 100,
                                            "offsets.topic.num.partitions": 2, "offsets.topic.replication.factor": 1})
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    group, member_id = f"g-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex

    def coordinator() -> int | None:
        c = RawClient(cluster.broker(1))
        try:
            resp = decode(FindCoordinatorResponse, c.request(FindCoordinatorRequest(key=group), version=1), 1, False)
        finally:
            c.close()
        return resp.node_id if resp.error_code == 0 else None

    coordinator_id = cluster.wait_for(coordinator, 60, f"the coordinator of {group}")
    other_id = next(b for b in cluster.brokers if b != coordinator_id)
    on_coordinator, on_other = RawClient(cluster.broker(coordinator_id)), RawClient(cluster.broker(other_id))
    try:
        joined = _heartbeat(on_coordinator, group, member_id, 0, topic)
        assert (joined.error_code, joined.heartbeat_interval_ms) == (0, 300)
        assert _alter(on_other, group, ("consumer.heartbeat.interval.ms", SET, "900")).error_code == 0
        cluster.wait_for(lambda: _describe(on_coordinator, group)["consumer.heartbeat.interval.ms"]
                         == ("900", GROUP_CONFIG) or None, 30, "the coordinator to see the group config")
        resp = _heartbeat(on_coordinator, group, member_id, joined.member_epoch, topic)
        assert (resp.error_code, resp.heartbeat_interval_ms) == (0, 900)
    finally:
        on_coordinator.close()
        on_other.close()
