"""DescribeUserScramCredentials: which SCRAM mechanisms (and iterations) each user has; never a secret."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import DescribeUserScramCredentialsResponse as R

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security import scram_admin
from strom.security.acl import AclOperation

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Any) -> R:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return R(throttle_time_ms=0, error_code=Errors.ClusterAuthorizationFailedError.errno, error_message=None,
                 results=[])
    users = None if request.users is None else [u.name for u in request.users]
    results = [R.DescribeUserScramCredentialsResult(
        user=r.user, error_code=r.error_code, error_message=r.error_message,
        credential_infos=[R.DescribeUserScramCredentialsResult.CredentialInfo(mechanism=m, iterations=i)
                          for m, i in r.credentials])
        for r in scram_admin.describe(ctx.metadata, users)]
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
