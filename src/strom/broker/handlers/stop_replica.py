"""StopReplica (controller -> broker): stop following; with delete_partition, remove the replica."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors

from strom.broker.request import RequestContext
from strom.controller.broker_epoch import is_stale_broker_epoch
from strom.protocol.api_keys import ApiKey
from strom.protocol.inter_broker import StopReplicaResponse, build
from strom.security.acl import AclOperation

API_KEY = ApiKey.STOP_REPLICA
VERSIONS = (3, 3)


async def handle(ctx: RequestContext, request: Any) -> StopReplicaResponse:
    cluster = ctx.services.cluster
    if cluster is None or not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return build(StopReplicaResponse, error_code=Errors.ClusterAuthorizationFailedError.errno, partition_errors=[])
    if is_stale_broker_epoch(request.broker_epoch, cluster.store.broker_epoch):
        return build(StopReplicaResponse, error_code=Errors.StaleBrokerEpochError.errno, partition_errors=[])
    partitions = {(t.topic_name, p.partition_index): bool(p.delete_partition)
                  for t in request.topic_states for p in t.partition_states}
    try:
        errors = await cluster.publisher.stop_replicas(request.controller_epoch, partitions)
    except Errors.StaleControllerEpochError:
        return build(StopReplicaResponse, error_code=Errors.StaleControllerEpochError.errno, partition_errors=[])
    return build(StopReplicaResponse, error_code=0, partition_errors=[
        {"topic_name": t, "partition_index": p, "error_code": code} for (t, p), code in errors.items()])
