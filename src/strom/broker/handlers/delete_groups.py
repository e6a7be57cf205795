"""DeleteGroups: remove empty groups and their committed offsets."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin.groups import DeleteGroupsResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.DELETE_GROUPS
VERSIONS = (0, 2)
Result = DeleteGroupsResponse.DeletableGroupResult


async def handle(ctx: RequestContext, request: Any) -> DeleteGroupsResponse:
    names = list(dict.fromkeys(request.groups_names or []))
    allowed = [g for g in names if ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, g)]
    results = await ctx.group_coordinator.handle_delete_groups(allowed)
    results.update({g: Errors.GroupAuthorizationFailedError.errno for g in names if g not in results})
    return DeleteGroupsResponse(throttle_time_ms=0,
                                results=[Result(group_id=g, error_code=results[g]) for g in names])
