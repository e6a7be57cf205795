"""LeaderAndIsr (controller -> broker): become leader or follower of the listed partitions."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors

from strom.broker.replica_manager import LeaderAndIsrPartition
from strom.broker.request import RequestContext
from strom.controller.broker_epoch import is_stale_broker_epoch
from strom.metadata.store import PartitionState
from strom.protocol.api_keys import ApiKey
from strom.protocol.inter_broker import LeaderAndIsrResponse, build
from strom.security.acl import AclOperation

API_KEY = ApiKey.LEADER_AND_ISR
VERSIONS = (6, 6)  # what Strom's controller sends (topic ids, partition epochs, leader recovery state)


async def handle(ctx: RequestContext, request: Any) -> LeaderAndIsrResponse:
    cluster = ctx.services.cluster
    if cluster is None or not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return _all(request, Errors.ClusterAuthorizationFailedError.errno)
    if is_stale_broker_epoch(request.broker_epoch, cluster.store.broker_epoch):
        return _all(request, Errors.StaleBrokerEpochError.errno)
    partitions = [
        LeaderAndIsrPartition(t.topic_name, t.topic_id, PartitionState(
            p.partition_index, p.leader, p.leader_epoch, list(p.replicas), list(p.isr), p.partition_epoch,
            adding_replicas=list(p.adding_replicas or ()), removing_replicas=list(p.removing_replicas or ())),
            bool(p.is_new))
        for t in request.topic_states for p in t.partition_states]
    # Replicas created here need their topic's configs: read any missing from ZooKeeper off the loop.
    await cluster.store.load_topic_configs({lp.topic for lp in partitions})
    try:
        errors = await cluster.publisher.apply_leadership(request.controller_epoch, partitions,
                                                    cluster.store.topic_configs)
    except Errors.StaleControllerEpochError:
        return _all(request, Errors.StaleControllerEpochError.errno)
    return build(LeaderAndIsrResponse, error_code=0, partition_errors=[], topics=[
        {"topic_id": t.topic_id, "partition_errors": [
            {"partition_index": p.partition_index, "error_code": errors.get((t.topic_name, p.partition_index), 0)}
            for p in t.partition_states]}
        for t in request.topic_states])


def _all(request: Any, error_code: int) -> LeaderAndIsrResponse:
    return build(LeaderAndIsrResponse, error_code=error_code, partition_errors=[], topics=[])
