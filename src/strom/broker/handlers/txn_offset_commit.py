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

from strom.broker.handlers.offset_commit import RequestedOffsets
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.TXN_OFFSET_COMMIT
VERSIONS = (0, 4)  # v4 (KIP-890): the client also understands TRANSACTION_ABORTABLE
Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
Part = Topic.TxnOffsetCommitResponsePartition


async def handle(ctx: RequestContext, request: Any) -> TxnOffsetCommitResponse:
    v = ctx.version
    req = RequestedOffsets(ctx, request.topics, with_leader_epoch=v >= 2)
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        req.fail_all(Errors.TransactionalIdAuthorizationFailedError.errno)
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        req.fail_all(Errors.GroupAuthorizationFailedError.errno)
    if req.offsets:
        req.errors.update(await ctx.group_coordinator.handle_txn_offset_commit(
            request.transactional_id, request.group_id, request.producer_id, request.producer_epoch,
            (request.member_id or "") if v >= 3 else "", request.generation_id if v >= 3 else -1,
            request.group_instance_id if v >= 3 else None, req.offsets))
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=req.answer(Topic, Part))
