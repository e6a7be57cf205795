"""AlterUserScramCredentials: the client salts the password (it never travels); the broker stores the keys."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import AlterUserScramCredentialsResponse as R

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security import scram_admin

API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Any) -> R:
    # authorization: Kafka requires ALTER on the CLUSTER resource; without an authorizer everyone may
    deletions = [(d.name, d.mechanism) for d in request.deletions]
    upsertions = [scram_admin.Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt or b""),
                                        bytes(u.salted_password or b"")) for u in request.upsertions]
    results = await scram_admin.alter(ctx.metadata, deletions, upsertions)
    return R(throttle_time_ms=0, results=[R.AlterUserScramCredentialsResult(
        user=r.user, error_code=r.error_code, error_message=r.error_message) for r in results])
