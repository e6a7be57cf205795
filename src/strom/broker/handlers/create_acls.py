"""CreateAcls: store ACL bindings (needs Alter on the cluster); one result per binding, in order."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import CreateAclsResponse

from strom.broker.handlers import denied_message, error_message_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclBinding, AclOperation, InvalidAclError, ResourceType, binding_from_codes
from strom.security.authorizer import NO_AUTHORIZER

API_KEY = ApiKey.CREATE_ACLS
VERSIONS = (0, 3)
Result = CreateAclsResponse.AclCreationResult


async def handle(ctx: RequestContext, request: Any) -> CreateAclsResponse:
    creations = request.creations or []
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return _all(len(creations), Errors.SecurityDisabledError.errno, NO_AUTHORIZER)
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return _all(len(creations), Errors.ClusterAuthorizationFailedError.errno,
                    denied_message(AclOperation.ALTER, ResourceType.CLUSTER))
    results: list[Any] = [None] * len(creations)
    valid: list[tuple[int, AclBinding]] = []
    for i, c in enumerate(creations):
        try:
            valid.append((i, binding_from_codes(c.resource_type, c.resource_name, c.resource_pattern_type,
                                                c.principal, c.host, c.operation, c.permission_type)))
        except InvalidAclError as exc:
            results[i] = Result(error_code=Errors.InvalidRequestError.errno, error_message=str(exc))
    outcomes = await authorizer.create_acls([b for _, b in valid])
    for (i, _), failure in zip(valid, outcomes, strict=True):
        if failure is None:
            results[i] = Result(error_code=0, error_message=None)
        elif isinstance(failure, InvalidAclError):
            results[i] = Result(error_code=Errors.InvalidRequestError.errno, error_message=str(failure))
        else:
            code = failure.errno if isinstance(failure, Errors.KafkaError) and isinstance(failure.errno, int) \
                else Errors.UnknownServerError.errno
            results[i] = Result(error_code=code, error_message=error_message_of(failure))
    return CreateAclsResponse(throttle_time_ms=0, results=results)


def _all(n: int, code: int, message: str | None) -> CreateAclsResponse:
    return CreateAclsResponse(throttle_time_ms=0, results=[Result(error_code=code, error_message=message)
                                                            for _ in range(n)])
