"""AlterPartition (leader -> controller): commit an ISR change the leader proposes.

Strom's brokers send v2; v0-v3 (Kafka 3.9's range) are served: v0-v1 name topics, v2+ give topic ids, v3
lists the ISR with each member's broker epoch (KIP-903), of which the broker ids are used.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.protocol.inter_broker import AlterPartitionResponse, build
from strom.security.acl import AclOperation

API_KEY = ApiKey.ALTER_PARTITION
VERSIONS = (0, 3)  # Strom's brokers send v2 (topics by id)
TOPIC_IDS_FROM = 2


async def handle(ctx: RequestContext, request: Any) -> AlterPartitionResponse:
    cluster = ctx.services.cluster
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return build(AlterPartitionResponse, throttle_time_ms=0,
                     error_code=Errors.ClusterAuthorizationFailedError.errno, topics=[])
    if cluster is None or not cluster.controller.active:
        return build(AlterPartitionResponse, throttle_time_ms=0, error_code=Errors.NotControllerError.errno, topics=[])
    names = {}
    changes = []
    by_id = ctx.version >= TOPIC_IDS_FROM
    for t in request.topics:
        key = t.topic_id if by_id else t.topic_name
        name = cluster.controller.topic_name(t.topic_id) if by_id else t.topic_name
        names[key] = name
        for p in t.partitions:
            isr = [b.broker_id for b in p.new_isr_with_epochs] if ctx.version >= 3 else list(p.new_isr)
            changes.append(((name or "", p.partition_index), p.leader_epoch, isr, p.partition_epoch))
    try:
        results = await cluster.controller.alter_partition(request.broker_id, changes)
    except Errors.NotControllerError:
        return build(AlterPartitionResponse, throttle_time_ms=0, error_code=Errors.NotControllerError.errno, topics=[])
    topics = []
    for t in request.topics:
        key = t.topic_id if by_id else t.topic_name
        name = names[key] or ""
        parts = []
        for p in t.partitions:
            code, pl = results.get((name, p.partition_index), (Errors.UnknownTopicOrPartitionError.errno, None))
            if pl is None or code:
                parts.append({"partition_index": p.partition_index, "error_code": code, "leader_id": -1,
                              "leader_epoch": -1, "isr": [], "leader_recovery_state": 0, "partition_epoch": -1})
            else:
                parts.append({"partition_index": p.partition_index, "error_code": 0, "leader_id": pl.leader,
                              "leader_epoch": pl.leader_epoch, "isr": list(pl.isr), "leader_recovery_state": 0,
                              "partition_epoch": pl.zk_version})
        topics.append({"topic_id": t.topic_id, "partitions": parts} if by_id else
                      {"topic_name": t.topic_name, "partitions": parts})
    return build(AlterPartitionResponse, throttle_time_ms=0, error_code=0, topics=topics)
