"""AlterUserScramCredentials: the client salts the password (it never travels); the broker stores the keys."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import AlterUserScramCredentialsResponse as R

from strom.broker.handlers import denied_message
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security import scram_admin
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Any) -> R:
    deletions = [(d.name, d.mechanism) for d in request.deletions]
    if not ctx.authorize_cluster(AclOperation.ALTER):
        users = dict.fromkeys([name for name, _ in deletions] + [u.name for u in request.upsertions])
        message = denied_message(AclOperation.ALTER, ResourceType.CLUSTER)
        return R(throttle_time_ms=0, results=[R.AlterUserScramCredentialsResult(
            user=u, error_code=Errors.ClusterAuthorizationFailedError.errno, error_message=message) for u in users])
    upsertions = [scram_admin.Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt or b""),
                                        bytes(u.salted_password or b"")) for u in request.upsertions]
    results = await scram_admin.alter(ctx.metadata, deletions, upsertions)
    return R(throttle_time_ms=0, results=[R.AlterUserScramCredentialsResult(
        user=r.user, error_code=r.error_code, error_message=r.error_message) for r in results])
