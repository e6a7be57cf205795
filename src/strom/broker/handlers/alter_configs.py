"""AlterConfigs (legacy): replaces a topic's or a broker's whole set of dynamic configs.

A broker resource is this broker's id (per-broker configs) or "" (the cluster default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kafka.errors as Errors
from kafka.protocol.admin import AlterConfigsResponse

from strom.broker.handlers import error_code_of, error_message_of, require_authorized
from strom.broker.request import BrokerServices, RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.dynamic_config import DynamicBrokerConfig

API_KEY = ApiKey.ALTER_CONFIGS
TOPIC, BROKER = 2, 4
Result = AlterConfigsResponse.AlterConfigsResourceResponse


def check_resource_type(ctx: RequestContext, resource_type: int, name: str) -> None:
    """A topic or broker resource the request may alter (AlterConfigs on the topic, or on the cluster)."""
    if resource_type not in (TOPIC, BROKER):
        raise Errors.InvalidRequestError(f"Unsupported resource type {resource_type}: only topics and brokers")
    if resource_type == TOPIC:
        require_authorized(ctx, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, name)
    else:
        require_authorized(ctx, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER)


def dynamic_config(services: BrokerServices) -> DynamicBrokerConfig:
    if services.dynamic_config is None:
        raise Errors.InvalidRequestError("Broker configs cannot be changed at run time on this broker")
    return services.dynamic_config


async def handle(ctx: RequestContext, request: Any) -> AlterConfigsResponse:
    results = []
    for r in request.resources:
        res = Result(error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name)
        try:
            check_resource_type(ctx, r.resource_type, r.resource_name)
            configs = {c.name: c.value for c in r.configs}
            if r.resource_type == BROKER:
                dynamic = dynamic_config(ctx.services)
                await dynamic.alter(dynamic.resource_broker(r.resource_name), configs, request.validate_only)
            else:
                await ctx.admin_manager.set_topic_configs(r.resource_name, configs, request.validate_only)
        except Exception as exc:
            res.error_code = error_code_of(exc)
            res.error_message = error_message_of(exc)
        results.append(res)
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)
