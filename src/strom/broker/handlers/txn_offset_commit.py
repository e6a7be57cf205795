"""TxnOffsetCommit: offsets a transactional producer commits for a consumer group.

Sent to the group coordinator after AddOffsetsToTxn; the offsets become visible only when
the transaction commits. Per-partition checks (unknown topic or partition) happen here;
the group checks and the transactional write to ``__consumer_offsets`` happen in the
coordinator.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.producer.transaction import TxnOffsetCommitResponse

from strom.broker.request import RequestContext
from strom.coordinator.group.group_metadata import OffsetAndMetadata, now_ms
from strom.protocol.api_keys import ApiKey

API_KEY = ApiKey.TXN_OFFSET_COMMIT
VERSIONS = (0, 3)
Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
Part = Topic.TxnOffsetCommitResponsePartition


async def handle(ctx: RequestContext, request: Any) -> TxnOffsetCommitResponse:
    v = ctx.version
    store = ctx.metadata
    now = now_ms()
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
                leader_epoch=p.committed_leader_epoch if v >= 2 else -1,
                metadata=p.committed_metadata or "",
                commit_timestamp=now)
    if offsets:
        errors.update(await ctx.group_coordinator.handle_txn_offset_commit(
            request.transactional_id, request.group_id, request.producer_id, request.producer_epoch,
            (request.member_id or "") if v >= 3 else "", request.generation_id if v >= 3 else -1,
            request.group_instance_id if v >= 3 else None, offsets))
    topics: dict[str, list[Any]] = {}
    for tp in order:
        topics.setdefault(tp[0], []).append(Part(partition_index=tp[1], error_code=errors.get(tp, 0)))
    return TxnOffsetCommitResponse(throttle_time_ms=0,
                                   topics=[Topic(name=name, partitions=parts) for name, parts in topics.items()])
