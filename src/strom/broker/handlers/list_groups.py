"""ListGroups: the groups this broker coordinates (v4 filters by state, v5 by type)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.groups import ListGroupsResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.LIST_GROUPS
VERSIONS = (0, 5)
Listed = ListGroupsResponse.ListedGroup


async def handle(ctx: RequestContext, request: Any) -> ListGroupsResponse:
    v = ctx.version
    states = set(request.states_filter or []) if v >= 4 else set()
    types = {t.lower() for t in request.types_filter or []} if v >= 5 else set()
    error, groups = ctx.group_coordinator.handle_list_groups(states or None)
    if types:
        groups = [g for g in groups if g.group_type in types]
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):  # else only the groups it may describe
        groups = [g for g in groups if ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id)]
    return ListGroupsResponse(throttle_time_ms=0, error_code=error, groups=[
        Listed(group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state_name,
               group_type=g.group_type) for g in groups])
