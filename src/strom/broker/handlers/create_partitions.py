"""CreatePartitions: grow a topic's partition count (it can never shrink)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import CreatePartitionsResponse

from strom.broker.handlers import error_code_of, error_message_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey

API_KEY = ApiKey.CREATE_PARTITIONS
Result = CreatePartitionsResponse.CreatePartitionsTopicResult


async def handle(ctx: RequestContext, request: Any) -> CreatePartitionsResponse:
    results = []
    for t in request.topics:
        res = Result(name=t.name, error_code=0, error_message=None)
        try:
            assignment = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            ctx.admin_manager.create_partitions(t.name, t.count, assignment, request.validate_only)
        except Exception as exc:
            res.error_code = error_code_of(exc)
            res.error_message = error_message_of(exc)
        results.append(res)
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
