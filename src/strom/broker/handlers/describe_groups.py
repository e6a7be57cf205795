"""DescribeGroups: state, protocol and members (client id, host, assignment) of groups."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin.groups import DescribeGroupsResponse

from strom.broker.handlers import denied_message
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.DESCRIBE_GROUPS
VERSIONS = (0, 5)
Described = DescribeGroupsResponse.DescribedGroup
Member = Described.DescribedGroupMember
# authorized_operations: the codec takes the bitfield as a set of bit numbers; None encodes "not requested".


async def handle(ctx: RequestContext, request: Any) -> DescribeGroupsResponse:
    coordinator = ctx.group_coordinator
    include_ops = ctx.version >= 3 and request.include_authorized_operations
    groups = []
    for group_id in request.groups or []:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(Described(
                error_code=Errors.GroupAuthorizationFailedError.errno, group_id=group_id,
                error_message=denied_message(AclOperation.DESCRIBE, ResourceType.GROUP, group_id),
                group_state="", protocol_type="", protocol_data="", members=[], authorized_operations=None))
            continue
        s = coordinator.handle_describe_group(group_id)
        groups.append(Described(
            error_code=s.error_code, error_message=None, group_id=group_id, group_state=s.state,
            protocol_type=s.protocol_type, protocol_data=s.protocol,
            members=[Member(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                            client_host=m.client_host, member_metadata=meta, member_assignment=assignment)
                     for m, meta, assignment in s.members],
            authorized_operations=ctx.authorized_operations(ResourceType.GROUP, group_id) if include_ops else None))
    return DescribeGroupsResponse(throttle_time_ms=0, groups=groups)
