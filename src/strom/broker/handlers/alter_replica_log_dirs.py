"""AlterReplicaLogDirs: move replicas of this broker to another of its log dirs (KIP-113, JBOD).

Answered per partition at once; the copy runs in the background (ReplicaAlterLogDirsManager) and
DescribeLogDirs shows its progress as a future replica. Needs ALTER on the cluster, as in Kafka.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import AlterReplicaLogDirsResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation

API_KEY = ApiKey.ALTER_REPLICA_LOG_DIRS
VERSIONS = (0, 2)  # Kafka 3.9's range: v1 is v0 on the wire, v2 is flexible
TopicResult = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
PartitionResult = TopicResult.AlterReplicaLogDirPartitionResult


async def handle(ctx: RequestContext, request: Any) -> AlterReplicaLogDirsResponse:
    wanted: dict[tuple[str, int], str] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted[(t.name, p)] = d.path
    if ctx.authorize_cluster(AclOperation.ALTER):
        mover = ctx.replica_manager.log_dir_mover
        codes = {tp: mover.alter_replica_log_dir(tp, path) for tp, path in wanted.items()}
    else:
        codes = dict.fromkeys(wanted, Errors.ClusterAuthorizationFailedError.errno)
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), code in codes.items():
        by_topic.setdefault(topic, []).append(PartitionResult(partition_index=index, error_code=code))
    return AlterReplicaLogDirsResponse(
        throttle_time_ms=0, results=[TopicResult(topic_name=n, partitions=ps) for n, ps in by_topic.items()])
