"""AddPartitionsToTxn (v0-v3, one transaction per request): partitions join a producer's transaction.

Before KIP-890 part 2 the client itself names every partition it is about to write to.
Unknown partitions get UNKNOWN_TOPIC_OR_PARTITION and, as in Kafka, the rest of the request
OPERATION_NOT_ATTEMPTED; otherwise the coordinator's answer applies to every partition.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.producer.transaction import AddPartitionsToTxnResponse

from strom.broker.handlers import fenced_error_for
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
VERSIONS = (0, 3)
_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = _TopicResult.AddPartitionsToTxnPartitionResult


async def handle(ctx: RequestContext, request: Any) -> AddPartitionsToTxnResponse:
    requested = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    unknown = set()
    for topic, partition in requested:
        md = ctx.metadata.topic(topic)
        if md is None or partition not in md.partitions:
            unknown.add((topic, partition))
    coordinator = ctx.services.transaction_coordinator
    errors: dict[tuple[str, int], int]
    denied = {tp for tp in requested if not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, tp[0])}
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.v3_and_below_transactional_id):
        errors = dict.fromkeys(requested, Errors.TransactionalIdAuthorizationFailedError.errno)
    elif denied:
        errors = {tp: Errors.TopicAuthorizationFailedError.errno if tp in denied
                  else Errors.OperationNotAttemptedError.errno for tp in requested}
    elif unknown:
        errors = {tp: Errors.UnknownTopicOrPartitionError.errno if tp in unknown
                  else Errors.OperationNotAttemptedError.errno for tp in requested}
    else:
        if coordinator is None:
            error = Errors.CoordinatorNotAvailableError.errno
        else:
            error = await coordinator.handle_add_partitions_to_transaction(
                request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch, set(requested))
        error = fenced_error_for(error, ctx.version, 2)
        errors = dict.fromkeys(requested, error)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(_PartitionResult(partition_index=partition, partition_error_code=error))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=[
        _TopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()])
