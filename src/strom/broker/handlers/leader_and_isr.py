"""LeaderAndIsr (controller -> broker): become leader or follower of the listed partitions.

Strom's controller sends v6; v0-v7 (Kafka 3.9's range) are read: v0-v1 list partitions ungrouped, v2-v4
group them by topic name, v5+ add topic ids (an older version's topic gets the id this broker knows).
"""

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
VERSIONS = (0, 7)  # Strom's controller sends v6 (topic ids, partition epochs, leader recovery state)
TOPIC_IDS_FROM = 5


async def handle(ctx: RequestContext, request: Any) -> LeaderAndIsrResponse:
    cluster = ctx.services.cluster
    if cluster is None or not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return _all(request, Errors.ClusterAuthorizationFailedError.errno)
    if is_stale_broker_epoch(request.broker_epoch, cluster.store.broker_epoch):
        return _all(request, Errors.StaleBrokerEpochError.errno)
    partitions = [
        LeaderAndIsrPartition(topic, topic_id, PartitionState(
            p.partition_index, p.leader, p.leader_epoch, list(p.replicas), list(p.isr), p.partition_epoch,
            adding_replicas=list(p.adding_replicas or ()), removing_replicas=list(p.removing_replicas or ())),
            bool(p.is_new))
        for topic, topic_id, p in _partition_states(ctx, request)]
    # Replicas created here need their topic's configs: read any missing from ZooKeeper off the loop.
    await cluster.store.load_topic_configs({lp.topic for lp in partitions})
    try:
        errors = await cluster.publisher.apply_leadership(request.controller_epoch, partitions,
                                                    cluster.store.topic_configs)
    except Errors.StaleControllerEpochError:
        return _all(request, Errors.StaleControllerEpochError.errno)
    if ctx.version < TOPIC_IDS_FROM:
        return build(LeaderAndIsrResponse, error_code=0, topics=[], partition_errors=[
            {"topic_name": lp.topic, "partition_index": lp.state.partition,
             "error_code": errors.get((lp.topic, lp.state.partition), 0)} for lp in partitions])
    return build(LeaderAndIsrResponse, error_code=0, partition_errors=[], topics=[
        {"topic_id": t.topic_id, "partition_errors": [
            {"partition_index": p.partition_index, "error_code": errors.get((t.topic_name, p.partition_index), 0)}
            for p in t.partition_states]}
        for t in request.topic_states])


def _partition_states(ctx: RequestContext, request: Any) -> list[tuple[str, Any, Any]]:
    """(topic name, topic id, partition state) of every partition, whatever the version's layout."""
    if ctx.version >= TOPIC_IDS_FROM:
        return [(t.topic_name, t.topic_id, p) for t in request.topic_states for p in t.partition_states]
    grouped = ([(p.topic_name, p) for p in request.ungrouped_partition_states] if ctx.version < 2 else
               [(t.topic_name, p) for t in request.topic_states for p in t.partition_states])
    return [(name, _known_topic_id(ctx, name), p) for name, p in grouped]


def _known_topic_id(ctx: RequestContext, name: str) -> Any:
    assert ctx.services.cluster is not None
    topic = ctx.services.cluster.store.topic(name)
    return topic.topic_id if topic is not None else None


def _all(request: Any, error_code: int) -> LeaderAndIsrResponse:
    return build(LeaderAndIsrResponse, error_code=error_code, partition_errors=[], topics=[])
