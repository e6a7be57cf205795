"""OffsetCommit: store committed offsets for a group (members or simple consumers).

Per-partition checks happen here (unknown topic or partition); the generation and
member checks and the write to ``__consumer_offsets`` happen in the coordinator.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer.group import OffsetCommitResponse

from strom.broker import zk_consumer_offsets
from strom.broker.request import RequestContext
from strom.coordinator.group.group_metadata import OffsetAndMetadata, now_ms
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.OFFSET_COMMIT
VERSIONS = (0, 9)  # v0: in ZooKeeper in a cluster, in __consumer_offsets on a single node (docs/protocol.md)
Topic = OffsetCommitResponse.OffsetCommitResponseTopic
Part = Topic.OffsetCommitResponsePartition


class RequestedOffsets:
    """The offsets of an OffsetCommit or TxnOffsetCommit: those to store, the per-partition errors
    found before the coordinator is asked, and the partitions in request order for the answer."""

    def __init__(self, ctx: RequestContext, topics: Any, with_leader_epoch: bool, expire_after_ms: int = -1
                 ) -> None:
        store = ctx.metadata
        now = now_ms()
        self.errors: dict[tuple[str, int], int] = {}
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.order: list[tuple[str, int]] = []
        for t in topics or []:
            meta = store.topic(t.name)
            readable = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name)
            for p in t.partitions or []:
                tp = (t.name, p.partition_index)
                self.order.append(tp)
                if not readable:
                    self.errors[tp] = Errors.TopicAuthorizationFailedError.errno
                    continue
                if meta is None or p.partition_index not in meta.partitions:
                    self.errors[tp] = Errors.UnknownTopicOrPartitionError.errno
                    continue
                self.offsets[tp] = OffsetAndMetadata(
                    offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch if with_leader_epoch else -1,
                    metadata=p.committed_metadata or "",
                    commit_timestamp=now,
                    expire_timestamp=now + expire_after_ms if expire_after_ms >= 0 else -1)

    def fail_all(self, error: int) -> None:
        """The whole request is refused (the group or transactional id is not authorized): nothing is stored."""
        self.offsets.clear()
        self.errors = dict.fromkeys(self.order, error)

    def answer(self, topic_cls: Any, partition_cls: Any) -> list[Any]:
        """The response's topics, one error per requested partition."""
        topics: dict[str, list[Any]] = {}
        for tp in self.order:
            topics.setdefault(tp[0], []).append(partition_cls(partition_index=tp[1],
                                                              error_code=self.errors.get(tp, 0)))
        return [topic_cls(name=name, partitions=parts) for name, parts in topics.items()]


async def handle(ctx: RequestContext, request: Any) -> OffsetCommitResponse:
    v = ctx.version
    retention = request.retention_time_ms if 2 <= v <= 4 else -1
    req = RequestedOffsets(ctx, request.topics, with_leader_epoch=v >= 6,
                           expire_after_ms=retention if retention is not None else -1)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        req.fail_all(Errors.GroupAuthorizationFailedError.errno)
    if req.offsets and v < 9 and ctx.group_coordinator.is_consumer_protocol_member(request.group_id,
                                                                                   request.member_id or ""):
        # A consumer-protocol member commits with its member epoch, which only v9+ carries (as Kafka).
        req.fail_all(Errors.UnsupportedVersionError.errno)
    if req.offsets and v == 0 and ctx.services.cluster is not None:  # Kafka 3.9 (ZooKeeper mode) keeps these there
        req.errors.update(await zk_consumer_offsets.commit(ctx.services.cluster, request.group_id, req.offsets))
        req.offsets.clear()
    if req.offsets:
        req.errors.update(await ctx.group_coordinator.handle_commit_offsets(
            request.group_id, request.member_id or "", request.group_instance_id if v >= 7 else None,
            request.generation_id_or_member_epoch, req.offsets))
    return OffsetCommitResponse(throttle_time_ms=0, topics=req.answer(Topic, Part))
