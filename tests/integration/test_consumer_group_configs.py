"""Per-group configs (KIP-848's GROUP config resource, type 32) by raw IncrementalAlterConfigs and
DescribeConfigs: bounded by the broker's min/max, seen by the group's members on their next
heartbeat, kept across a restart."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from strom.protocol.group_messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode

OVERRIDES = {"group.consumer.heartbeat.interval.ms": 300, "group.consumer.min.heartbeat.interval.ms": 100,
             "group.consumer.max.heartbeat.interval.ms": 5000, "group.consumer.session.timeout.ms": 6000,
             "group.consumer.min.session.timeout.ms": 1000, "offsets.topic.num.partitions": 1}
GROUP = 32
SET, DELETE = 0, 1
INVALID_CONFIG = 40
DEFAULT_CONFIG, GROUP_CONFIG = 5, 8
RETRIABLE = (14, 15, 16)
R = IncrementalAlterConfigsRequest.AlterConfigsResource


def _alter(client: RawClient, group: str, *ops: tuple[str, int, str | None], validate_only: bool = False) -> Any:
    req = IncrementalAlterConfigsRequest(resources=[R(resource_type=GROUP, resource_name=group, configs=[
        R.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])], validate_only=validate_only)
    return decode(IncrementalAlterConfigsResponse, client.request(req, version=1), 1, True).responses[0]


def _describe(client: RawClient, group: str) -> dict[str, tuple[str, int]]:
    req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=GROUP, resource_name=group, configuration_keys=None)], include_synonyms=False,
        include_documentation=False)
    res = decode(DescribeConfigsResponse, client.request(req, version=3), 3, False).results[0]
    assert res.error_code == 0, res
    return {c.name: (c.value, c.config_source) for c in res.configs}


def _heartbeat(client: RawClient, group: str, member_id: str, epoch: int, topic: str) -> Any:
    deadline = time.monotonic() + 60
    while True:
        req = ConsumerGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=epoch,
                                            rebalance_timeout_ms=30000, subscribed_topic_names=[topic],
                                            topic_partitions=[] if epoch == 0 else None)
        resp = decode(ConsumerGroupHeartbeatResponse, client.request(req, version=1), 1, True)
        if resp.error_code not in RETRIABLE or time.monotonic() > deadline:
            return resp
        time.sleep(0.2)


def test_group_configs_override_the_heartbeat_interval(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(OVERRIDES)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    group, member_id = f"g-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    client = RawClient(broker)
    try:
        client.request(FindCoordinatorRequest(key=group), version=1)
        joined = _heartbeat(client, group, member_id, 0, topic)
        assert (joined.error_code, joined.heartbeat_interval_ms) == (0, 300)
        assert _describe(client, group) == {"consumer.heartbeat.interval.ms": ("300", DEFAULT_CONFIG),
                                            "consumer.session.timeout.ms": ("6000", DEFAULT_CONFIG)}

        # Out of the broker's bounds, unknown, or not a number: INVALID_CONFIG, nothing changes.
        assert _alter(client, group, ("consumer.heartbeat.interval.ms", SET, "50")).error_code == INVALID_CONFIG
        assert _alter(client, group, ("consumer.session.timeout.ms", SET, "600000")).error_code == INVALID_CONFIG
        assert _alter(client, group, ("consumer.assignor", SET, "range")).error_code == INVALID_CONFIG
        assert _alter(client, group, ("consumer.heartbeat.interval.ms", SET, "soon")).error_code == INVALID_CONFIG
        assert _alter(client, group, ("consumer.heartbeat.interval.ms", SET, "1200"),
                      validate_only=True).error_code == 0
        assert _describe(client, group)["consumer.heartbeat.interval.ms"] == ("300", DEFAULT_CONFIG)

        assert _alter(client, group, ("consumer.heartbeat.interval.ms", SET, "1200"),
                      ("consumer.session.timeout.ms", SET, "8000")).error_code == 0
        assert _describe(client, group) == {"consumer.heartbeat.interval.ms": ("1200", GROUP_CONFIG),
                                            "consumer.session.timeout.ms": ("8000", GROUP_CONFIG)}
        resp = _heartbeat(client, group, member_id, joined.member_epoch, topic)
        assert (resp.error_code, resp.heartbeat_interval_ms) == (0, 1200)

        broker.kill9()
        broker.start()
        client.close()
        client = RawClient(broker)
        assert _describe(client, group)["consumer.heartbeat.interval.ms"] == ("1200", GROUP_CONFIG)
        resp = _heartbeat(client, group, member_id, joined.member_epoch, topic)
        assert (resp.error_code, resp.heartbeat_interval_ms) == (0, 1200)

        assert _alter(client, group, ("consumer.heartbeat.interval.ms", DELETE, None)).error_code == 0
        resp = _heartbeat(client, group, member_id, resp.member_epoch, topic)
        assert (resp.error_code, resp.heartbeat_interval_ms) == (0, 300)
        assert _describe(client, group)["consumer.session.timeout.ms"] == ("8000", GROUP_CONFIG)
    finally:
        client.close()
