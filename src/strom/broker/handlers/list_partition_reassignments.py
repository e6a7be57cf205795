"""ListPartitionReassignments (KIP-455): the partition moves under way; answered by the controller.

Partitions named but not being moved (or unknown) are left out of the answer, as Kafka does. A single
node never moves anything: its answer is always empty.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import ListPartitionReassignmentsResponse

from strom.broker.handlers import denied_message, error_code_of, error_message_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.protocol.inter_broker import build
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.LIST_PARTITION_REASSIGNMENTS
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return _answer({}, Errors.ClusterAuthorizationFailedError.errno,
                       denied_message(AclOperation.DESCRIBE, ResourceType.CLUSTER))
    cluster = ctx.services.cluster
    if cluster is None:
        return _answer({})
    if not cluster.controller.active:
        return _answer({}, Errors.NotControllerError.errno)
    asked = None if request.topics is None else [
        (t.name, p) for t in request.topics for p in t.partition_indexes]
    try:
        moving = await cluster.controller.list_partition_reassignments(asked)
    except Errors.KafkaError as exc:
        return _answer({}, error_code_of(exc), error_message_of(exc))
    return _answer(moving)


def _answer(moving: dict[Any, Any], top_error: int = 0, top_message: str | None = None) -> Any:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), a in sorted(moving.items()):
        by_topic.setdefault(topic, []).append({"partition_index": partition, "replicas": list(a.replicas),
                                               "adding_replicas": list(a.adding),
                                               "removing_replicas": list(a.removing)})
    return build(ListPartitionReassignmentsResponse, throttle_time_ms=0, error_code=top_error,
                 error_message=top_message, topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()])
