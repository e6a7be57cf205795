"""DeleteRecords: advance a partition's log start offset (offset -1 means the HW)."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import DeleteRecordsResponse

from strom.broker.handlers import error_code_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.DELETE_RECORDS
TopicRes = DeleteRecordsResponse.DeleteRecordsTopicResult
PartRes = TopicRes.DeleteRecordsPartitionResult


async def handle(ctx: RequestContext, request: Any) -> DeleteRecordsResponse:
    rm = ctx.replica_manager
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            res = PartRes(partition_index=p.partition_index, low_watermark=-1, error_code=0)
            try:
                if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, t.name):
                    raise Errors.TopicAuthorizationFailedError(f"Not authorized to delete records of {t.name}")
                res.low_watermark = rm.get_partition(t.name, p.partition_index).delete_records_before(p.offset)
            except Exception as exc:
                res.error_code = error_code_of(exc)
            parts.append(res)
        topics.append(TopicRes(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
