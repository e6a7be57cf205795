"""AlterConfigs (legacy): replaces a topic's whole set of overrides."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import AlterConfigsResponse

from strom.broker.handlers import error_code_of, error_message_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey

API_KEY = ApiKey.ALTER_CONFIGS
TOPIC = 2
Result = AlterConfigsResponse.AlterConfigsResourceResponse


def check_topic_resource(resource_type: int) -> None:
    if resource_type != TOPIC:
        raise Errors.InvalidRequestError("Only topic configs can be altered at runtime; broker configs are "
                                         "static (server.properties)")


async def handle(ctx: RequestContext, request: Any) -> AlterConfigsResponse:
    results = []
    for r in request.resources:
        res = Result(error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name)
        try:
            check_topic_resource(r.resource_type)
            configs = {c.name: c.value for c in r.configs}
            await ctx.admin_manager.set_topic_configs(r.resource_name, configs, request.validate_only)
        except Exception as exc:
            res.error_code = error_code_of(exc)
            res.error_message = error_message_of(exc)
        results.append(res)
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)
