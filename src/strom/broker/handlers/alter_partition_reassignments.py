"""AlterPartitionReassignments (KIP-455): start, change or cancel partition moves; answered by the controller.

Another broker answers NOT_CONTROLLER (top-level, as Kafka's ZooKeeper-mode brokers do) and the client
retries with the controller Metadata names. A single node answers itself: it has nothing to move.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import AlterPartitionReassignmentsResponse

from strom.broker.handlers import denied_message, error_code_of, error_message_of
from strom.broker.request import RequestContext
from strom.metadata.local_controller import local_reassignment_results
from strom.protocol.api_keys import ApiKey
from strom.protocol.inter_broker import build
from strom.security.acl import AclOperation, ResourceType
from strom.server_common.types import TopicPartition

API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    asked: dict[TopicPartition, list[int] | None] = {}
    for t in request.topics:
        for p in t.partitions:
            asked[(t.name, p.partition_index)] = None if p.replicas is None else list(p.replicas)
    if not ctx.authorize_cluster(AclOperation.ALTER):
        message = denied_message(AclOperation.ALTER, ResourceType.CLUSTER)
        code = Errors.ClusterAuthorizationFailedError.errno
        return _answer(request, {tp: (code, message) for tp in asked}, code, message)
    cluster = ctx.services.cluster
    if cluster is None:
        return _answer(request, local_reassignment_results(ctx.services.metadata, ctx.services.broker_id, asked))
    if not cluster.controller.active:
        return _answer(request, {}, Errors.NotControllerError.errno, None, only_top=True)
    try:
        results = await cluster.controller.alter_partition_reassignments(asked)
    except Errors.KafkaError as exc:
        return _answer(request, {}, error_code_of(exc), error_message_of(exc), only_top=True)
    return _answer(request, results)


def _answer(request: Any, results: dict[TopicPartition, tuple[int, str | None]], top_error: int = 0,
            top_message: str | None = None, only_top: bool = False) -> Any:
    responses = [] if only_top else [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": results.get((t.name, p.partition_index), (Errors.UnknownTopicOrPartitionError.errno,))[0],
             "error_message": results.get((t.name, p.partition_index), (0, None))[1]}
            for p in t.partitions]}
        for t in request.topics]
    return build(AlterPartitionReassignmentsResponse, throttle_time_ms=0, error_code=top_error,
                 error_message=top_message, responses=responses)
