"""IncrementalAlterConfigs: SET / DELETE / APPEND / SUBTRACT single topic, broker or group configs."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import IncrementalAlterConfigsResponse

from strom.broker.handlers import error_code_of, error_message_of, require_authorized
from strom.broker.handlers.alter_configs import BROKER, check_resource_type, dynamic_config
from strom.broker.request import BrokerServices, RequestContext
from strom.coordinator.group.group_config import GROUP_ENTITY_TYPE, GROUP_RESOURCE_TYPE, GroupConfigs
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


def _apply(current: dict[str, str], op: int, name: str, value: str | None, defaults: dict[str, str]) -> None:
    if op == SET:
        current[name] = value or ""
    elif op == DELETE:
        current.pop(name, None)
    elif op in (APPEND, SUBTRACT):
        base = current.get(name, defaults.get(name, ""))
        items = [x for x in base.split(",") if x]
        for v in (value or "").split(","):
            if op == APPEND and v and v not in items:
                items.append(v)
            elif op == SUBTRACT and v in items:
                items.remove(v)
        current[name] = ",".join(items)
    else:
        raise Errors.InvalidRequestError(f"Unknown config operation {op}")


async def _alter_broker(services: BrokerServices, resource: Any, validate_only: bool) -> None:
    """Operations apply to the named layer (this broker's id, or "" for the cluster default)."""
    dynamic = dynamic_config(services)
    broker_id = dynamic.resource_broker(resource.resource_name)
    configs = dynamic.current(broker_id)
    effective = {e.name: e.value or "" for e in services.config.items()}  # APPEND/SUBTRACT start here
    for c in resource.configs:
        _apply(configs, c.config_operation, c.name, c.value, effective)
    await dynamic.alter(broker_id, configs, validate_only)


async def _alter_group(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    """A consumer group's configs (KIP-848): validated against the broker's bounds, stored for every broker."""
    require_authorized(ctx, AclOperation.ALTER_CONFIGS, ResourceType.GROUP, resource.resource_name)
    if not resource.resource_name:
        raise Errors.InvalidRequestError("Group name can't be empty.")
    services = ctx.services
    group_configs = GroupConfigs(services.config, services.metadata)
    configs = await services.metadata.read_entity_configs_async(GROUP_ENTITY_TYPE, resource.resource_name)
    for c in resource.configs:
        if c.config_operation in (APPEND, SUBTRACT):
            raise Errors.InvalidConfigurationError(f"{c.name} is not a list: it cannot be appended to or subtracted from")
        _apply(configs, c.config_operation, c.name, c.value, {})
    group_configs.validate(configs)
    if not validate_only:
        await services.metadata.set_entity_configs_async(GROUP_ENTITY_TYPE, resource.resource_name, configs)


async def handle(ctx: RequestContext, request: Any) -> IncrementalAlterConfigsResponse:
    services = ctx.services
    results = []
    for r in request.resources:
        res = Result(error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name)
        try:
            if r.resource_type == GROUP_RESOURCE_TYPE:
                await _alter_group(ctx, r, request.validate_only)
            elif r.resource_type == BROKER:
                check_resource_type(ctx, r.resource_type, r.resource_name)
                await _alter_broker(services, r, request.validate_only)
            else:
                check_resource_type(ctx, r.resource_type, r.resource_name)
                topic = services.metadata.topic(r.resource_name)
                if topic is None:
                    raise Errors.UnknownTopicOrPartitionError(f"Topic '{r.resource_name}' does not exist.")
                configs = dict(topic.configs)
                for c in r.configs:
                    _apply(configs, c.config_operation, c.name, c.value, services.config.topic_defaults())
                await services.admin_manager.set_topic_configs(r.resource_name, configs, request.validate_only)
        except Exception as exc:
            res.error_code = error_code_of(exc)
            res.error_message = error_message_of(exc)
        results.append(res)
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)
