"""ElectLeaders: move leadership to the preferred replica, or elect an unclean leader (controller only)."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import ElectLeadersResponse

from strom.broker.handlers import denied_message, error_code_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.protocol.inter_broker import build
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.ELECT_LEADERS
VERSIONS = (0, 2)
PREFERRED, UNCLEAN = 0, 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    cluster = ctx.services.cluster
    asked = None if request.topic_partitions is None else [
        (t.topic, p) for t in request.topic_partitions for p in t.partitions]
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return _answer(asked or [], {}, Errors.ClusterAuthorizationFailedError.errno,
                       denied_message(AclOperation.ALTER, ResourceType.CLUSTER))
    if cluster is None or not cluster.controller.active:
        return _answer(asked or [], {}, Errors.NotControllerError.errno)
    unclean = ctx.version >= 1 and request.election_type == UNCLEAN
    try:
        results = await cluster.controller.elect_leaders(asked, unclean)
    except Errors.KafkaError as exc:
        return _answer(asked or [], {}, error_code_of(exc))
    return _answer(sorted(results) if asked is None else asked, results, 0)


def _answer(asked: list[tuple[str, int]], results: dict[tuple[str, int], int], top_error: int,
            top_message: str | None = None) -> Any:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp in asked:
        code = top_error or results.get(tp, Errors.UnknownTopicOrPartitionError.errno)
        by_topic.setdefault(tp[0], []).append({"partition_id": tp[1], "error_code": code,
                                                "error_message": top_message})
    return build(ElectLeadersResponse, throttle_time_ms=0, error_code=top_error, replica_election_results=[
        {"topic": t, "partition_result": parts} for t, parts in by_topic.items()])
