"""DescribeAcls: the ACLs a filter selects, grouped by resource pattern (needs Describe on the cluster)."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import DescribeAclsResponse

from strom.broker.handlers import denied_message
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, InvalidAclError, ResourcePattern, ResourceType, filter_from_codes
from strom.security.authorizer import NO_AUTHORIZER

API_KEY = ApiKey.DESCRIBE_ACLS
VERSIONS = (0, 3)
Resource = DescribeAclsResponse.DescribeAclsResource
Description = Resource.AclDescription


async def handle(ctx: RequestContext, request: Any) -> DescribeAclsResponse:
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return _error(Errors.SecurityDisabledError.errno, NO_AUTHORIZER)
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return _error(Errors.ClusterAuthorizationFailedError.errno,
                      denied_message(AclOperation.DESCRIBE, ResourceType.CLUSTER))
    try:
        acl_filter = filter_from_codes(request.resource_type_filter, request.resource_name_filter,
                                       request.pattern_type_filter, request.principal_filter, request.host_filter,
                                       request.operation, request.permission_type)
        acl_filter.validate()
    except InvalidAclError as exc:
        return _error(Errors.InvalidRequestError.errno, str(exc))
    by_pattern: dict[ResourcePattern, list[Any]] = {}
    for b in authorizer.acls(acl_filter):
        by_pattern.setdefault(b.pattern, []).append(Description(
            principal=b.entry.principal, host=b.entry.host, operation=int(b.entry.operation),
            permission_type=int(b.entry.permission_type)))
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None, resources=[
        Resource(resource_type=int(p.resource_type), resource_name=p.name, pattern_type=int(p.pattern_type),
                 acls=acls) for p, acls in by_pattern.items()])


def _error(code: int, message: str | None) -> DescribeAclsResponse:
    return DescribeAclsResponse(throttle_time_ms=0, error_code=code, error_message=message, resources=[])
