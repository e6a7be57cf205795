"""DescribeLogDirs: per log dir, the size of each hosted partition and of each future replica being moved
into it (AlterReplicaLogDirs); offline dirs carry KAFKA_STORAGE_ERROR."""

from __future__ import annotations

import os
import shutil
from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import DescribeLogDirsResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation

API_KEY = ApiKey.DESCRIBE_LOG_DIRS
Result = DescribeLogDirsResponse.DescribeLogDirsResult
TopicRes = Result.DescribeLogDirsTopic
PartRes = TopicRes.DescribeLogDirsPartition


async def handle(ctx: RequestContext, request: Any) -> DescribeLogDirsResponse:
    rm = ctx.replica_manager
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=Errors.ClusterAuthorizationFailedError.errno,
                                       results=[])
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {t.topic: set(t.partitions) for t in request.topics}
    by_dir: dict[str, dict[str, list[Any]]] = {os.path.abspath(d): {} for d in ctx.config.log_dirs()}
    for (topic, index), part in sorted(rm.partitions.items()):
        if wanted is not None and index not in wanted.get(topic, ()):
            continue
        log_dir = os.path.abspath(part.log_dir)
        by_dir.setdefault(log_dir, {}).setdefault(topic, []).append(
            PartRes(partition_index=index, partition_size=part.size_in_bytes,
                    offset_lag=max(0, part.high_watermark - part.log_end_offset), is_future_key=False))
    # A move between log dirs in progress: the future replica, lagging the current one by offset_lag.
    # (A current replica's lag is how far its end is behind the high watermark, as Kafka reports it: 0
    # on a leader, whose records past the high watermark are not a lag of its own copy.)
    for (topic, index), future in sorted(rm.log_manager.future_logs.items()):
        current = rm.partitions.get((topic, index))
        if current is None or (wanted is not None and index not in wanted.get(topic, ())):
            continue
        by_dir.setdefault(os.path.dirname(future.directory), {}).setdefault(topic, []).append(
            PartRes(partition_index=index, partition_size=future.size_in_bytes,
                    offset_lag=max(0, current.log_end_offset - future.log_end_offset), is_future_key=True))
    results = []
    offline = rm.offline_log_dirs
    for log_dir, topics in by_dir.items():
        if log_dir in offline:
            results.append(Result(error_code=Errors.KafkaStorageError.errno, log_dir=log_dir, topics=[],
                                  total_bytes=-1, usable_bytes=-1, is_cordoned=False))
            continue
        usage = shutil.disk_usage(log_dir) if os.path.isdir(log_dir) else None
        results.append(Result(error_code=0, log_dir=log_dir,
                              topics=[TopicRes(name=n, partitions=ps) for n, ps in topics.items()],
                              total_bytes=usage.total if usage else -1, usable_bytes=usage.free if usage else -1,
                              is_cordoned=False))
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)
