"""LeaveGroup: members leave at once instead of waiting for their session to expire.

v0-v2 name one member; v3+ (KIP-345) a batch of members, possibly by group.instance.id.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer.group import LeaveGroupResponse

from strom.broker.request import RequestContext
from strom.coordinator.group.group_coordinator import MemberIdentity
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.LEAVE_GROUP
VERSIONS = (0, 5)
MemberResponse = LeaveGroupResponse.MemberResponse


async def handle(ctx: RequestContext, request: Any) -> LeaveGroupResponse:
    v = ctx.version
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return LeaveGroupResponse(throttle_time_ms=0, error_code=Errors.GroupAuthorizationFailedError.errno,
                                  members=[])
    if v >= 3:
        leaving = [MemberIdentity(m.member_id or "", m.group_instance_id) for m in request.members or []]
        reasons = {m.reason for m in request.members or [] if v >= 5 and getattr(m, "reason", None)}
        reason = ", ".join(sorted(reasons)) or None
    else:
        leaving = [MemberIdentity(request.member_id or "")]
        reason = None
    error, results = await ctx.group_coordinator.handle_leave_group(request.group_id, leaving, reason)
    if v < 3:
        if not error and results:
            error = results[0][1]
        return LeaveGroupResponse(throttle_time_ms=0, error_code=error, members=[])
    return LeaveGroupResponse(
        throttle_time_ms=0, error_code=error,
        members=[MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=code)
                 for m, code in results])
