"""OffsetFetch: committed offsets of a group (v8+: of several groups in one request).

With require_stable (v7+, what read_committed consumers send) a partition whose offset is
waiting for its transaction's marker answers UNSTABLE_OFFSET_COMMIT, and the client retries.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer.group import OffsetFetchResponse

from strom.broker import zk_consumer_offsets
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.OFFSET_FETCH
VERSIONS = (0, 9)  # v0 reads what v0 stored (ZooKeeper in a cluster)
Group = OffsetFetchResponse.OffsetFetchResponseGroup
GroupTopic = Group.OffsetFetchResponseTopics
GroupPart = GroupTopic.OffsetFetchResponsePartitions
Topic = OffsetFetchResponse.OffsetFetchResponseTopic
Part = Topic.OffsetFetchResponsePartition


UNSTABLE_OFFSET_COMMIT = Errors.UnstableOffsetCommitError.errno
Fetched = tuple[int, int, int, str | None, int]  # partition, offset, leader epoch, metadata, error


def _fetch(ctx: RequestContext, group_id: str, topics: list[Any] | None, require_stable: bool = False
           ) -> tuple[int, dict[str, list[Fetched]]]:
    """(group error, topic -> [(partition, offset, leader_epoch, metadata, error)])."""
    coordinator = ctx.group_coordinator
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return Errors.GroupAuthorizationFailedError.errno, {}
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    error, offsets = coordinator.handle_fetch_offsets(group_id, wanted)
    out: dict[str, list[Fetched]] = {}
    if error:
        return error, out
    # Topics the principal may not describe: named ones answer TOPIC_AUTHORIZATION_FAILED, the others are left out.
    described = {t: ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t) for t, _ in offsets}
    unstable = coordinator.partitions_with_pending_offsets(group_id, list(offsets)) if require_stable else set()
    for (topic, part), off in offsets.items():
        if not described[topic]:
            if wanted is not None:
                out.setdefault(topic, []).append((part, -1, -1, "", Errors.TopicAuthorizationFailedError.errno))
            continue
        if (topic, part) in unstable:
            out.setdefault(topic, []).append((part, -1, -1, "", UNSTABLE_OFFSET_COMMIT))
        elif off is None:
            out.setdefault(topic, []).append((part, -1, -1, "", 0))
        else:
            out.setdefault(topic, []).append((part, off.offset, off.leader_epoch, off.metadata, 0))
    return 0, out


async def handle(ctx: RequestContext, request: Any) -> OffsetFetchResponse:
    v = ctx.version
    if v >= 8:
        groups = []
        for g in request.groups:
            error = ctx.group_coordinator.validate_offset_fetch_member(g.group_id, g.member_id, g.member_epoch) \
                if v >= 9 else 0
            error, found = (error, {}) if error else _fetch(ctx, g.group_id, g.topics, request.require_stable)
            groups.append(Group(group_id=g.group_id, error_code=error, topics=[
                GroupTopic(name=t, partitions=[
                    GroupPart(partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
                              error_code=pe) for p, o, e, m, pe in parts])
                for t, parts in found.items()]))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    if v == 0 and ctx.services.cluster is not None:  # what OffsetCommit v0 wrote to ZooKeeper
        return await zk_consumer_offsets.fetch(ctx, ctx.services.cluster, request)
    topics = request.topics if v >= 2 else (request.topics or [])
    error, found = _fetch(ctx, request.group_id, topics, v >= 7 and request.require_stable)
    if error and v < 2:
        # v0/v1 have no top-level error: report it on every requested partition.
        found = {t.name: [(p, -1, -1, "", error) for p in t.partition_indexes] for t in topics or []}
    resp_topics = [
        Topic(name=t, partitions=[
            Part(partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
                 error_code=pe) for p, o, e, m, pe in parts])
        for t, parts in found.items()]
    return OffsetFetchResponse(throttle_time_ms=0, topics=resp_topics, error_code=error)
