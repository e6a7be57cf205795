"""OffsetForLeaderEpoch: where a leader epoch ends in this log (KIP-101, KIP-279, KIP-320).

A follower asks the leader for the end offset of its own latest epoch and truncates to it: the
divergence point, never blindly its high watermark. Consumers ask the same to detect a log
truncated under their position after a leader change. The answer per partition is the largest
epoch <= the requested one and the offset where it ends (the LEO for the current epoch), or
-1/-1 when the log knows nothing of it.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer import OffsetForLeaderEpochResponse

from strom.broker.handlers import error_code_of
from strom.broker.partition import NO_LEADER_EPOCH
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochEndOffset = TopicResult.EpochEndOffset
CURRENT_LEADER_EPOCH_FROM = 2
REPLICA_ID_FROM = 3
# Kafka's "debug" replica id: may ask a replica that is not the leader.
DEBUGGING_REPLICA_ID = -2
CONSUMER_REPLICA_ID = -1


async def handle(ctx: RequestContext, request: Any) -> OffsetForLeaderEpochResponse:
    rm = ctx.replica_manager
    version = ctx.version
    # Before v3 the field is absent and the sender is a follower or a consumer: both need the leader.
    replica_id = request.replica_id if version >= REPLICA_ID_FROM else CONSUMER_REPLICA_ID
    only_from_leader = replica_id != DEBUGGING_REPLICA_ID
    # Kafka: ClusterAction on the cluster (a follower), or else Describe on each topic.
    cluster_action = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            res = EpochEndOffset(error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1)
            current = p.current_leader_epoch if version >= CURRENT_LEADER_EPOCH_FROM else NO_LEADER_EPOCH
            try:
                if not cluster_action and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic):
                    raise Errors.TopicAuthorizationFailedError(f"Not authorized to describe topic {t.topic}")
                part = rm.get_partition(t.topic, p.partition)
                res.leader_epoch, res.end_offset = part.last_offset_for_leader_epoch(
                    current, p.leader_epoch, fetch_only_from_leader=only_from_leader)
            except Exception as exc:
                res.error_code = error_code_of(exc)
            parts.append(res)
        topics.append(TopicResult(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
