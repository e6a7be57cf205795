"""DescribeUserScramCredentials: which SCRAM mechanisms (and iterations) each user has; never a secret.

A refusal is answered per user, never with the top-level error_code Kafka uses: librdkafka (to at
least 2.16) frees a pointer it does not own when this response carries a top-level error, which
aborts the client process (confluent-kafka, and so `strom configs` and the console). Every client
still sees CLUSTER_AUTHORIZATION_FAILED with a message: for the users it named, or, when it asked
for every user, on one result with an empty user name (docs/decisions/0021).
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import DescribeUserScramCredentialsResponse as R

from strom.broker.handlers import denied_message
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security import scram_admin
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
VERSIONS = (0, 0)
EVERY_USER = ""  # the user name a refusal of "describe every user" is reported under


def refusal(request: Any, code: int, message: str) -> R:
    """The answer that refuses the whole request, one failed result per user asked for."""
    users = [EVERY_USER] if not request.users else list(dict.fromkeys(u.name for u in request.users))
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=[
        R.DescribeUserScramCredentialsResult(user=u, error_code=code, error_message=message, credential_infos=[])
        for u in users])


async def handle(ctx: RequestContext, request: Any) -> R:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return refusal(request, Errors.ClusterAuthorizationFailedError.errno,
                       denied_message(AclOperation.DESCRIBE, ResourceType.CLUSTER))
    users = None if request.users is None else [u.name for u in request.users]
    results = [R.DescribeUserScramCredentialsResult(
        user=r.user, error_code=r.error_code, error_message=r.error_message,
        credential_infos=[R.DescribeUserScramCredentialsResult.CredentialInfo(mechanism=m, iterations=i)
                          for m, i in r.credentials])
        for r in scram_admin.describe(ctx.metadata, users)]
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
