"""OffsetCommit v0 and OffsetFetch v0 in a ZooKeeper cluster: as Kafka 3.9 in ZooKeeper mode, these keep
a group's offsets in ZooKeeper (``/consumers/<group>/offsets/<topic>/<partition>``, the offset as text),
apart from the group coordinator; the offsets of v1+ clients stay in ``__consumer_offsets``.

On a single node (no ZooKeeper) both versions use ``__consumer_offsets`` like every other version.
ZooKeeper calls run in worker threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer.group import OffsetFetchResponse

from strom.broker.handlers import error_code_of
from strom.broker.request import ClusterLink, RequestContext
from strom.coordinator.group.group_metadata import OffsetAndMetadata
from strom.security.acl import AclOperation, ResourceType

Topic = OffsetFetchResponse.OffsetFetchResponseTopic
Part = Topic.OffsetFetchResponsePartition


async def commit(cluster: ClusterLink, group_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata]
                 ) -> dict[tuple[str, int], int]:
    """Write each offset to ZooKeeper (metadata is not kept there, as in Kafka); the error per partition."""
    zk = cluster.store.zk
    errors: dict[tuple[str, int], int] = {}
    for (topic, partition), off in offsets.items():
        try:
            await asyncio.to_thread(zk.set_consumer_offset, group_id, topic, partition, off.offset)
            errors[(topic, partition)] = 0
        except Exception as exc:  # noqa: BLE001 - a ZooKeeper failure is this partition's error
            errors[(topic, partition)] = error_code_of(exc)
    return errors


async def fetch(ctx: RequestContext, cluster: ClusterLink, request: Any) -> OffsetFetchResponse:
    """OffsetFetch v0: each requested partition's offset from ZooKeeper (-1 when none was committed)."""
    zk = cluster.store.zk
    group_ok = ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id)
    topics = []
    for t in request.topics or []:
        meta = ctx.metadata.topic(t.name)
        described = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
        parts = []
        for p in t.partition_indexes:
            offset, error = -1, 0
            if not group_ok:
                error = Errors.GroupAuthorizationFailedError.errno
            elif not described:
                error = Errors.TopicAuthorizationFailedError.errno
            elif meta is None or p not in meta.partitions:
                error = Errors.UnknownTopicOrPartitionError.errno
            else:
                try:
                    got = await asyncio.to_thread(zk.get_consumer_offset, request.group_id, t.name, p)
                    offset = -1 if got is None else got
                except Exception as exc:  # noqa: BLE001 - a ZooKeeper failure is this partition's error
                    error = error_code_of(exc)
            parts.append(Part(partition_index=p, committed_offset=offset, committed_leader_epoch=-1, metadata="",
                              error_code=error))
        topics.append(Topic(name=t.name, partitions=parts))
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=0)
