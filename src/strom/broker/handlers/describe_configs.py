"""DescribeConfigs for topics (resource type 2), brokers (4): a broker id or "" (cluster default), and
consumer groups (32, KIP-848's group configs)."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import DescribeConfigsResponse

from strom.broker.handlers import error_code_of, error_message_of, require_authorized
from strom.broker.request import RequestContext
from strom.config import describe_topic_configs
from strom.coordinator.group.group_config import GROUP_RESOURCE_TYPE, GroupConfigs
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.DESCRIBE_CONFIGS
TOPIC, BROKER = 2, 4
Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = Result.DescribeConfigsResourceResult


def _entries(ctx: RequestContext, resource_type: int, name: str) -> list[Any]:
    services = ctx.services
    if resource_type == TOPIC:
        require_authorized(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name)
        topic = services.metadata.topic(name)
        if topic is None:
            raise Errors.UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        return describe_topic_configs(services.config, topic.configs)
    if resource_type == BROKER:
        require_authorized(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER)
        broker_id = services.config.get("broker.id")
        if name not in ("", str(broker_id)):
            raise Errors.InvalidRequestError(
                f"Unexpected broker id, expected {broker_id} or empty string, but received {name}")
        # "" is the cluster default: as in Kafka, only the keys set at that level.
        return services.config.items(per_broker=name != "")
    if resource_type == GROUP_RESOURCE_TYPE:
        require_authorized(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.GROUP, name)
        if not name:
            raise Errors.InvalidRequestError("Group name can't be empty.")
        return GroupConfigs(services.config, services.metadata).describe(name)
    raise Errors.InvalidRequestError(f"Unsupported resource type {resource_type}")


async def handle(ctx: RequestContext, request: Any) -> DescribeConfigsResponse:
    results = []
    for r in request.resources:
        res = Result(error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name,
                     configs=[])
        try:
            keys = set(r.configuration_keys) if r.configuration_keys is not None else None
            for e in _entries(ctx, r.resource_type, r.resource_name):
                if keys is not None and e.name not in keys:
                    continue
                res.configs.append(Entry(
                    name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                    is_default=e.is_default, is_sensitive=e.is_sensitive,
                    synonyms=[Entry.DescribeConfigsSynonym(name=syn.name, value=syn.value, source=syn.source)
                              for syn in e.synonyms] if request.include_synonyms else [],
                    config_type=e.config_type,
                    documentation=e.documentation if getattr(request, "include_documentation", False) else None,
                ))
        except Exception as exc:
            res.error_code = error_code_of(exc)
            res.error_message = error_message_of(exc)
        results.append(res)
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
