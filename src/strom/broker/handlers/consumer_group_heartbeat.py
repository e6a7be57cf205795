"""ConsumerGroupHeartbeat (KIP-848): join, heartbeat and leave of a consumer-protocol member.

Registered only when group.coordinator.rebalance.protocols includes ``consumer``; the
coordinator computes the assignment and answers each member with its share.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors

from strom.broker.request import RequestContext
from strom.coordinator.group.consumer_group_coordinator import HeartbeatRequest
from strom.protocol.api_keys import ApiKey
from strom.protocol.group_messages import ConsumerGroupHeartbeatResponse
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
VERSIONS = (0, 1)
Assignment = ConsumerGroupHeartbeatResponse.Assignment
TopicPartitions = Assignment.TopicPartitions


async def handle(ctx: RequestContext, request: Any) -> ConsumerGroupHeartbeatResponse:
    def error(code: int, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
        return ConsumerGroupHeartbeatResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                              member_id=None, member_epoch=-1, heartbeat_interval_ms=0)

    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return error(Errors.GroupAuthorizationFailedError.errno)
    consumer_groups = ctx.group_coordinator.consumer_groups
    if consumer_groups is None:
        return error(Errors.UnsupportedVersionError.errno, "The consumer group protocol is disabled.")
    v = ctx.version
    owned = None if request.topic_partitions is None else [
        (tp.topic_id, list(tp.partitions or ())) for tp in request.topic_partitions]
    result = await consumer_groups.heartbeat(HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id or "", member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex if v >= 1 else None,
        server_assignor=request.server_assignor, owned=owned, version=v,
        client_id=ctx.header.client_id or "", client_host=ctx.client_host))
    if result.error_code:
        return error(result.error_code, result.error_message)
    assignment = None if result.assignment is None else Assignment(topic_partitions=[
        TopicPartitions(topic_id=topic_id, partitions=parts) for topic_id, parts in result.assignment])
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=0, error_message=None, member_id=result.member_id,
        member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)
