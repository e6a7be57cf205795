"""StopReplica (controller -> broker): stop following; with delete_partition, remove the replica.

Strom's controller sends v3; v0-v4 (Kafka 3.9's range) are read: v0 lists partitions ungrouped, v1-v2 by
topic, both with one DeletePartitions flag for the whole request; v3+ carry a flag per partition.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors

from strom.broker.request import RequestContext
from strom.controller.broker_epoch import is_stale_broker_epoch
from strom.protocol.api_keys import ApiKey
from strom.protocol.inter_broker import StopReplicaResponse, build
from strom.security.acl import AclOperation

API_KEY = ApiKey.STOP_REPLICA
VERSIONS = (0, 4)  # Strom's controller sends v3


async def handle(ctx: RequestContext, request: Any) -> StopReplicaResponse:
    cluster = ctx.services.cluster
    if cluster is None or not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return build(StopReplicaResponse, error_code=Errors.ClusterAuthorizationFailedError.errno, partition_errors=[])
    partitions = _partitions(ctx.version, request)
    if is_stale_broker_epoch(request.broker_epoch, cluster.store.broker_epoch):
        return build(StopReplicaResponse, error_code=Errors.StaleBrokerEpochError.errno, partition_errors=[])
    try:
        errors = await cluster.publisher.stop_replicas(request.controller_epoch, partitions)
    except Errors.StaleControllerEpochError:
        return build(StopReplicaResponse, error_code=Errors.StaleControllerEpochError.errno, partition_errors=[])
    return build(StopReplicaResponse, error_code=0, partition_errors=[
        {"topic_name": t, "partition_index": p, "error_code": code} for (t, p), code in errors.items()])


def _partitions(version: int, request: Any) -> dict[tuple[str, int], bool]:
    """(topic, partition) -> delete the replica, whatever the version's layout."""
    if version >= 3:
        return {(t.topic_name, p.partition_index): bool(p.delete_partition)
                for t in request.topic_states for p in t.partition_states}
    delete = bool(request.delete_partitions)
    if version == 0:
        return {(p.topic_name, p.partition_index): delete for p in request.ungrouped_partitions}
    return {(t.name, p): delete for t in request.topics for p in t.partition_indexes}
