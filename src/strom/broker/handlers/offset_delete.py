"""OffsetDelete: drop a group's committed offsets for partitions it no longer consumes."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer.group import OffsetDeleteResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.OFFSET_DELETE
VERSIONS = (0, 0)
Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
Part = Topic.OffsetDeleteResponsePartition


async def handle(ctx: RequestContext, request: Any) -> OffsetDeleteResponse:
    partitions = [(t.name, p.partition_index) for t in request.topics or [] for p in t.partitions or []]
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=Errors.GroupAuthorizationFailedError.errno, throttle_time_ms=0,
                                    topics=[])
    readable = {t for t, _ in partitions if ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t)}
    error, results = await ctx.group_coordinator.handle_delete_offsets(
        request.group_id, [tp for tp in partitions if tp[0] in readable])
    if not error:
        results.update({tp: Errors.TopicAuthorizationFailedError.errno for tp in partitions if tp[0] not in readable})
    topics: dict[str, list[Any]] = {}
    if not error:
        for (topic, part), code in results.items():
            topics.setdefault(topic, []).append(Part(partition_index=part, error_code=code))
    return OffsetDeleteResponse(error_code=error, throttle_time_ms=0,
                                topics=[Topic(name=t, partitions=ps) for t, ps in topics.items()])
