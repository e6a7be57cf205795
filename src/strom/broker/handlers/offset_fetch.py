"""OffsetFetch: committed offsets of a group (v8+: of several groups in one request)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer.group import OffsetFetchResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey

API_KEY = ApiKey.OFFSET_FETCH
VERSIONS = (1, 9)
Group = OffsetFetchResponse.OffsetFetchResponseGroup
GroupTopic = Group.OffsetFetchResponseTopics
GroupPart = GroupTopic.OffsetFetchResponsePartitions
Topic = OffsetFetchResponse.OffsetFetchResponseTopic
Part = Topic.OffsetFetchResponsePartition


def _fetch(ctx: RequestContext, group_id: str, topics: list[Any] | None
           ) -> tuple[int, dict[str, list[tuple[int, int, int, str | None]]]]:
    """(group error, topic -> [(partition, offset, leader_epoch, metadata)])."""
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    error, offsets = ctx.group_coordinator.handle_fetch_offsets(group_id, wanted)
    out: dict[str, list[tuple[int, int, int, str | None]]] = {}
    if error:
        return error, out
    for (topic, part), off in offsets.items():
        if off is None:
            out.setdefault(topic, []).append((part, -1, -1, ""))
        else:
            out.setdefault(topic, []).append((part, off.offset, off.leader_epoch, off.metadata))
    return 0, out


async def handle(ctx: RequestContext, request: Any) -> OffsetFetchResponse:
    v = ctx.version
    if v >= 8:
        groups = []
        for g in request.groups:
            error, found = _fetch(ctx, g.group_id, g.topics)
            groups.append(Group(group_id=g.group_id, error_code=error, topics=[
                GroupTopic(name=t, partitions=[
                    GroupPart(partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
                              error_code=0) for p, o, e, m in parts])
                for t, parts in found.items()]))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    topics = request.topics if v >= 2 else (request.topics or [])
    error, found = _fetch(ctx, request.group_id, topics)
    if error and v < 2:
        # v0/v1 have no top-level error: report it on every requested partition.
        found = {t.name: [(p, -1, -1, "") for p in t.partition_indexes] for t in topics or []}
    resp_topics = [
        Topic(name=t, partitions=[
            Part(partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
                 error_code=error if v < 2 else 0) for p, o, e, m in parts])
        for t, parts in found.items()]
    return OffsetFetchResponse(throttle_time_ms=0, topics=resp_topics, error_code=error)
