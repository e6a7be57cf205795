"""JoinGroup: a member (re)joins; parked until the join phase of the rebalance completes."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer.group import JoinGroupResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.JOIN_GROUP
VERSIONS = (0, 9)
Member = JoinGroupResponse.JoinGroupResponseMember


async def handle(ctx: RequestContext, request: Any) -> JoinGroupResponse:
    v = ctx.version
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return JoinGroupResponse(throttle_time_ms=0, error_code=Errors.GroupAuthorizationFailedError.errno,
                                 generation_id=-1, protocol_type=None, protocol_name=None if v >= 7 else "",
                                 leader="", skip_assignment=False, member_id=request.member_id or "", members=[])
    result = await ctx.group_coordinator.handle_join_group(
        group_id=request.group_id,
        member_id=request.member_id or "",
        group_instance_id=request.group_instance_id if v >= 5 else None,
        require_known_member_id=v >= 4,
        client_id=ctx.header.client_id or "",
        client_host="/" + ctx.client_host,
        rebalance_timeout_ms=request.rebalance_timeout_ms if v >= 1 else -1,
        session_timeout_ms=request.session_timeout_ms,
        protocol_type=request.protocol_type or "",
        protocols=[(p.name, bytes(p.metadata or b"")) for p in request.protocols or []],
    )
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=result.error_code, generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        # Before v7 the protocol name is not nullable.
        protocol_name=result.protocol_name if result.protocol_name is not None or v >= 7 else "",
        leader=result.leader_id, skip_assignment=result.skip_assignment, member_id=result.member_id,
        members=[Member(member_id=mid, group_instance_id=iid, metadata=meta) for mid, iid, meta in result.members],
    )
