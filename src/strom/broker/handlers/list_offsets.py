"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3) or by timestamp; v0 answers a list of offsets."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer import ListOffsetsResponse

from strom.broker.handlers import error_code_of
from strom.broker.partition import NO_LEADER_EPOCH, READ_UNCOMMITTED
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.LIST_OFFSETS
TopicResp = ListOffsetsResponse.ListOffsetsTopicResponse
PartResp = TopicResp.ListOffsetsPartitionResponse
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
EARLIEST_LOCAL, LATEST_TIERED = -4, -5
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2  # may ask any replica; everyone else asks the leader (also with KIP-392)


async def handle(ctx: RequestContext, request: Any) -> ListOffsetsResponse:
    rm = ctx.replica_manager
    isolation = request.isolation_level if ctx.version >= 2 else READ_UNCOMMITTED
    only_from_leader = getattr(request, "replica_id", -1) != DEBUGGING_REPLICA_ID
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            resp = PartResp(partition_index=p.partition_index, error_code=0, timestamp=-1, offset=-1,
                            leader_epoch=-1, old_style_offsets=[])
            try:
                if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name):
                    raise Errors.TopicAuthorizationFailedError(f"Not authorized to describe topic {t.name}")
                part = rm.get_partition(t.name, p.partition_index)
                part.check_leader_epoch(p.current_leader_epoch if ctx.version >= 4 else NO_LEADER_EPOCH)
                if only_from_leader and not part.is_leader:
                    raise Errors.NotLeaderForPartitionError(
                        f"broker {part.local_broker_id} is not the leader of {t.name}-{p.partition_index}")
                resp.leader_epoch = part.leader_epoch
                ts = p.timestamp
                # v1+: a new leader whose HW has not caught up answers OFFSET_NOT_AVAILABLE (not v0's legacy path).
                if ctx.version == 0:  # a list of offsets instead of one (Kafka's legacy answer)
                    resp.old_style_offsets = part.legacy_offsets_before(ts, p.max_num_offsets,
                                                                        request.replica_id == CONSUMER_REPLICA_ID)
                elif ts == LATEST:
                    part.check_high_watermark_reached_epoch_start()
                    resp.offset = part.fetch_offset_limit(isolation)  # HW, or the LSO for read_committed
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    resp.offset = part.log_start_offset
                elif ts == LATEST_TIERED:
                    resp.offset = part.log_start_offset  # nothing is tiered: local start
                elif ts == MAX_TIMESTAMP and ctx.version < 7:
                    raise Errors.UnsupportedVersionError("max timestamp lookups need ListOffsets v7+")
                elif ts < MAX_TIMESTAMP:
                    raise Errors.InvalidRequestError(f"unknown special timestamp {ts}")
                else:
                    found = part.fetch_offset_for_timestamp(ts, isolation)
                    if found is None:  # nothing below the HW: one acknowledged above it may be the answer
                        part.check_high_watermark_reached_epoch_start()
                    elif found is not None:
                        resp.offset, resp.timestamp = found
            except Exception as exc:
                resp.error_code = error_code_of(exc)
            parts.append(resp)
        topics.append(TopicResp(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)

