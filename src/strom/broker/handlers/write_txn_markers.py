"""WriteTxnMarkers (v1): a transaction coordinator asks this broker to end a transaction on
partitions it leads. The same function the local coordinator calls does the work."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.producer.transaction import WriteTxnMarkersResponse

from strom.broker.request import RequestContext
from strom.coordinator.transaction.transaction_marker_channel_manager import write_txn_markers_locally
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation

API_KEY = ApiKey.WRITE_TXN_MARKERS
VERSIONS = (0, 1)  # v0 is v1 without tagged fields
_Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
_TopicResult = _Result.WritableTxnMarkerTopicResult
_PartitionResult = _TopicResult.WritableTxnMarkerPartitionResult


async def handle(ctx: RequestContext, request: Any) -> WriteTxnMarkersResponse:
    results = []
    allowed = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
    for marker in request.markers:
        partitions = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
        if not allowed:
            results.append(_Result(producer_id=marker.producer_id, topics=[
                _TopicResult(name=t.name, partitions=[
                    _PartitionResult(partition_index=p, error_code=Errors.ClusterAuthorizationFailedError.errno)
                    for p in t.partition_indexes]) for t in marker.topics]))
            continue
        errors = await write_txn_markers_locally(
            ctx.replica_manager, ctx.group_coordinator, marker.producer_id, marker.producer_epoch,
            marker.coordinator_epoch, marker.transaction_result, partitions)
        by_topic: dict[str, list[Any]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(
                _PartitionResult(partition_index=partition, error_code=errors.get((topic, partition), 0)))
        results.append(_Result(producer_id=marker.producer_id, topics=[
            _TopicResult(name=t, partitions=ps) for t, ps in by_topic.items()]))
    return WriteTxnMarkersResponse(markers=results)
