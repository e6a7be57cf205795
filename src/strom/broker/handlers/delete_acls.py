"""DeleteAcls: remove every ACL each filter selects (needs Alter on the cluster); per filter, what went."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import DeleteAclsResponse

from strom.broker.handlers import denied_message, error_message_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import (
    AclBindingFilter,
    AclOperation,
    InvalidAclError,
    ResourceType,
    filter_from_codes,
)
from strom.security.authorizer import NO_AUTHORIZER

API_KEY = ApiKey.DELETE_ACLS
VERSIONS = (0, 3)
FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
Matching = FilterResult.DeleteAclsMatchingAcl


async def handle(ctx: RequestContext, request: Any) -> DeleteAclsResponse:
    filters = request.filters or []
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return _all(len(filters), Errors.SecurityDisabledError.errno, NO_AUTHORIZER)
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return _all(len(filters), Errors.ClusterAuthorizationFailedError.errno,
                    denied_message(AclOperation.ALTER, ResourceType.CLUSTER))
    results: list[Any] = [None] * len(filters)
    valid: list[tuple[int, AclBindingFilter]] = []
    for i, f in enumerate(filters):
        try:
            valid.append((i, filter_from_codes(f.resource_type_filter, f.resource_name_filter,
                                               f.pattern_type_filter, f.principal_filter, f.host_filter, f.operation,
                                               f.permission_type)))
        except InvalidAclError as exc:
            results[i] = _failed(Errors.InvalidRequestError.errno, str(exc))
    outcomes = await authorizer.delete_acls([f for _, f in valid])
    for (i, _), outcome in zip(valid, outcomes, strict=True):
        if isinstance(outcome, InvalidAclError):
            results[i] = _failed(Errors.InvalidRequestError.errno, str(outcome))
        elif isinstance(outcome, Exception):
            code = outcome.errno if isinstance(outcome, Errors.KafkaError) and isinstance(outcome.errno, int) \
                else Errors.UnknownServerError.errno
            results[i] = _failed(code, error_message_of(outcome))
        else:
            results[i] = FilterResult(error_code=0, error_message=None, matching_acls=[
                Matching(error_code=0, error_message=None, resource_type=int(b.pattern.resource_type),
                         resource_name=b.pattern.name, pattern_type=int(b.pattern.pattern_type),
                         principal=b.entry.principal, host=b.entry.host, operation=int(b.entry.operation),
                         permission_type=int(b.entry.permission_type)) for b in outcome])
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)


def _failed(code: int, message: str | None) -> Any:
    return FilterResult(error_code=code, error_message=message, matching_acls=[])


def _all(n: int, code: int, message: str | None) -> DeleteAclsResponse:
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[_failed(code, message) for _ in range(n)])
