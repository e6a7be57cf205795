"""DescribeProducers: the active producers of partitions this broker leads (KIP-664).

What ``strom transactions describe-producers`` shows, and how an operator finds a hanging
transaction: a producer whose ``current_txn_start_offset`` is set and never advances.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin.transactions import DescribeProducersResponse

from strom.broker.handlers import denied_message
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.DESCRIBE_PRODUCERS
VERSIONS = (0, 0)
Topic = DescribeProducersResponse.TopicResponse
Part = Topic.PartitionResponse
Producer = Part.ProducerState

NOT_LEADER_OR_FOLLOWER = Errors.NotLeaderForPartitionError.errno
UNKNOWN_TOPIC_OR_PARTITION = Errors.UnknownTopicOrPartitionError.errno


def _describe(ctx: RequestContext, topic: str, index: int) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic):
        return Part(partition_index=index, error_code=Errors.TopicAuthorizationFailedError.errno,
                    error_message=denied_message(AclOperation.READ, ResourceType.TOPIC, topic), active_producers=[])
    part = ctx.replica_manager.partitions.get((topic, index))
    if part is None or not part.is_leader:
        meta = ctx.metadata.topic(topic)
        code = NOT_LEADER_OR_FOLLOWER if meta is not None and index in meta.partitions \
            else UNKNOWN_TOPIC_OR_PARTITION
        return Part(partition_index=index, error_code=code, error_message=None, active_producers=[])
    producers = [
        Producer(producer_id=e.producer_id, producer_epoch=e.producer_epoch, last_sequence=e.last_seq,
                 last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                 current_txn_start_offset=e.current_txn_first_offset)
        for e in part.active_producers()]
    return Part(partition_index=index, error_code=0, error_message=None, active_producers=producers)


async def handle(ctx: RequestContext, request: Any) -> DescribeProducersResponse:
    return DescribeProducersResponse(throttle_time_ms=0, topics=[
        Topic(name=t.name, partitions=[_describe(ctx, t.name, i) for i in t.partition_indexes or []])
        for t in request.topics or []])
