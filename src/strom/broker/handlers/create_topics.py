"""CreateTopics: validated by the AdminManager, recorded in the metadata store.

In a cluster the answer waits (up to the request's timeout) until the controller has elected
leaders for the new partitions, as Kafka's DelayedCreatePartitions does; a topic still without
them gets REQUEST_TIMED_OUT although it was created.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import CreateTopicsResponse

from strom.broker.handlers import error_code_of, error_message_of
from strom.broker.request import RequestContext
from strom.config import describe_topic_configs
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.CREATE_TOPICS
Result = CreateTopicsResponse.CreatableTopicResult


async def handle(ctx: RequestContext, request: Any) -> CreateTopicsResponse:
    admin = ctx.admin_manager
    results = []
    seen: set[str] = set()
    created_topics: dict[str, Any] = {}
    cluster_create = ctx.authorize_cluster(AclOperation.CREATE)  # else Create on each topic
    for t in request.topics:
        res = Result(name=t.name, error_code=0, error_message=None, topic_config_error_code=0,
                     num_partitions=-1, replication_factor=-1, configs=[])
        try:
            if t.name in seen:
                raise Errors.InvalidRequestError(f"Topic '{t.name}' appears more than once in the request.")
            seen.add(t.name)
            if not cluster_create and not ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, t.name):
                raise Errors.TopicAuthorizationFailedError(f"Not authorized to create topic {t.name}")
            assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments or []}
            configs = {c.name: c.value for c in t.configs or []}
            created = await admin.create_topic(t.name, t.num_partitions, t.replication_factor, assignment or None,
                                               configs, validate_only=request.validate_only)
            if created is not None:
                created_topics[t.name] = created
                res.topic_id = created.topic_id
                res.num_partitions = len(created.partitions)
                res.replication_factor = created.replication_factor
                if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name):
                    res.topic_config_error_code = Errors.TopicAuthorizationFailedError.errno
                else:
                    res.configs = [
                        Result.CreatableTopicConfigs(name=e.name, value=e.value, read_only=e.read_only,
                                                     config_source=e.source, is_sensitive=e.is_sensitive)
                        for e in describe_topic_configs(ctx.config, created.configs)
                    ]
        except Exception as exc:
            res.error_code = error_code_of(exc)
            res.error_message = error_message_of(exc)
        results.append(res)
    if created_topics and request.timeout_ms > 0:
        leaderless = await admin.await_leaders(created_topics, request.timeout_ms)
        for res in results:
            if res.name in leaderless and res.error_code == 0:
                res.error_code = Errors.RequestTimedOutError.errno
                res.error_message = "The topic was created but its leaders were not elected in time."
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)

