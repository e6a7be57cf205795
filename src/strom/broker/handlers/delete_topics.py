"""DeleteTopics: by name (v0-5) or by name or topic ID (v6+); data is removed."""

from __future__ import annotations

import uuid
from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import DeleteTopicsResponse

from strom.broker.handlers import error_code_of, error_message_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.DELETE_TOPICS
Result = DeleteTopicsResponse.DeletableTopicResult
ZERO_UUID = uuid.UUID(int=0)


async def handle(ctx: RequestContext, request: Any) -> DeleteTopicsResponse:
    services = ctx.services
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(n, ZERO_UUID) for n in request.topic_names]
    results = []
    queued: dict[str, uuid.UUID] = {}
    for name, topic_id in wanted:
        res = Result(name=name, topic_id=topic_id, error_code=0, error_message=None)
        try:
            if name is None:
                meta = services.metadata.topic_by_id(topic_id)
                if meta is None:
                    raise Errors.UnknownTopicIdError(f"No topic with id {topic_id}")
                name = meta.name
                res.name = name
            if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, name):
                raise Errors.TopicAuthorizationFailedError(f"Not authorized to delete topic {name}")
            deleted = await services.admin_manager.delete_topic(name)
            res.topic_id = deleted.topic_id
            queued[name] = deleted.topic_id
        except Exception as exc:
            res.error_code = error_code_of(exc)
            res.error_message = error_message_of(exc)
        results.append(res)
    if queued and request.timeout_ms > 0:
        # As Kafka: OK means deleted (gone from this broker's metadata), not merely queued for the controller.
        still_there = await services.metadata.await_deleted(queued, request.timeout_ms)
        for res in results:
            if res.name in still_there and res.error_code == 0:
                res.error_code = Errors.RequestTimedOutError.errno
                res.error_message = "The topic is queued for deletion but was not deleted in time."
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
