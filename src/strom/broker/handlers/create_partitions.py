"""CreatePartitions: grow a topic's partition count (it can never shrink).

Like CreateTopics, the answer waits up to the request's timeout for the new partitions' leaders.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import CreatePartitionsResponse

from strom.broker.handlers import error_code_of, error_message_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.CREATE_PARTITIONS
Result = CreatePartitionsResponse.CreatePartitionsTopicResult


async def handle(ctx: RequestContext, request: Any) -> CreatePartitionsResponse:
    results = []
    added: dict[str, Any] = {}
    for t in request.topics:
        res = Result(name=t.name, error_code=0, error_message=None)
        try:
            if not ctx.authorize(AclOperation.ALTER, ResourceType.TOPIC, t.name):
                raise Errors.TopicAuthorizationFailedError(f"Not authorized to alter topic {t.name}")
            assignment = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            topic_id, new = await ctx.admin_manager.create_partitions(t.name, t.count, assignment,
                                                                      request.validate_only)
            if not request.validate_only:
                added[t.name] = (topic_id, list(new))
        except Exception as exc:
            res.error_code = error_code_of(exc)
            res.error_message = error_message_of(exc)
        results.append(res)
    if added and request.timeout_ms > 0:
        leaderless = await ctx.admin_manager.await_leaders(added, request.timeout_ms)
        for res in results:
            if res.name in leaderless and res.error_code == 0:
                res.error_code = Errors.RequestTimedOutError.errno
                res.error_message = "The partitions were created but their leaders were not elected in time."
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
