"""OffsetCommit: store committed offsets for a group (members or simple consumers).

Per-partition checks happen here (unknown topic or partition); the generation and
member checks and the write to ``__consumer_offsets`` happen in the coordinator.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer.group import OffsetCommitResponse

from strom.broker.request import RequestContext
from strom.coordinator.group.group_metadata import OffsetAndMetadata, now_ms
from strom.protocol.api_keys import ApiKey

API_KEY = ApiKey.OFFSET_COMMIT
VERSIONS = (2, 9)
Topic = OffsetCommitResponse.OffsetCommitResponseTopic
Part = Topic.OffsetCommitResponsePartition


async def handle(ctx: RequestContext, request: Any) -> OffsetCommitResponse:
    v = ctx.version
    store = ctx.metadata
    now = now_ms()
    retention = request.retention_time_ms if 2 <= v <= 4 else -1
    errors: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    order: list[tuple[str, int]] = []
    for t in request.topics or []:
        meta = store.topic(t.name)
        for p in t.partitions or []:
            tp = (t.name, p.partition_index)
            order.append(tp)
            if meta is None or p.partition_index not in meta.partitions:
                errors[tp] = Errors.UnknownTopicOrPartitionError.errno
                continue
            offsets[tp] = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch if v >= 6 else -1,
                metadata=p.committed_metadata or "",
                commit_timestamp=now,
                expire_timestamp=now + retention if retention is not None and retention >= 0 else -1)
    if offsets:
        errors.update(await ctx.group_coordinator.handle_commit_offsets(
            request.group_id, request.member_id or "", request.group_instance_id if v >= 7 else None,
            request.generation_id_or_member_epoch, offsets))
    topics: dict[str, list[Any]] = {}
    for tp in order:
        topics.setdefault(tp[0], []).append(Part(partition_index=tp[1], error_code=errors.get(tp, 0)))
    return OffsetCommitResponse(throttle_time_ms=0,
                                topics=[Topic(name=name, partitions=parts) for name, parts in topics.items()])
