"""SyncGroup: the leader hands in the assignment; every member gets its own share."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer.group import SyncGroupResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.SYNC_GROUP
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: Any) -> SyncGroupResponse:
    v = ctx.version
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return SyncGroupResponse(throttle_time_ms=0, error_code=Errors.GroupAuthorizationFailedError.errno,
                                 protocol_type=None, protocol_name=None, assignment=b"")
    assignments: dict[str, bytes] = {}
    for a in request.assignments or []:
        assignments[a.member_id] = bytes(a.assignment or b"")
    result = await ctx.group_coordinator.handle_sync_group(
        group_id=request.group_id, generation_id=request.generation_id, member_id=request.member_id,
        instance_id=request.group_instance_id if v >= 3 else None,
        protocol_type=request.protocol_type if v >= 5 else None,
        protocol_name=request.protocol_name if v >= 5 else None,
        assignments=assignments)
    return SyncGroupResponse(throttle_time_ms=0, error_code=result.error_code, protocol_type=result.protocol_type,
                             protocol_name=result.protocol_name, assignment=result.assignment)
