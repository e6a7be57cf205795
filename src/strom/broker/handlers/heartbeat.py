"""Heartbeat: keeps a member's session alive and tells it when to rejoin."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer.group import HeartbeatResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.HEARTBEAT
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request: Any) -> HeartbeatResponse:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return HeartbeatResponse(throttle_time_ms=0, error_code=Errors.GroupAuthorizationFailedError.errno)
    error = await ctx.group_coordinator.handle_heartbeat(
        request.group_id, request.member_id, request.group_instance_id if ctx.version >= 3 else None,
        request.generation_id)
    return HeartbeatResponse(throttle_time_ms=0, error_code=error)
