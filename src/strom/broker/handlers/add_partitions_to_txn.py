"""AddPartitionsToTxn: partitions join a producer's transaction.

v0-v3 come from clients, one transaction per request: before KIP-890 part 2 the client itself names
every partition it is about to write to. v4+ come from brokers (cluster action), several transactions
per request, each either added or, with VerifyOnly, only checked: KIP-890 part 1, where a partition
leader asks the coordinator whether transactional data it is about to append belongs to an ongoing
transaction. A verified partition outside the transaction gets TRANSACTION_ABORTABLE from v5 (KIP-890)
and INVALID_TXN_STATE in v4, whose senders do not know that code.

Unknown partitions get UNKNOWN_TOPIC_OR_PARTITION and, as in Kafka, the rest of that transaction
OPERATION_NOT_ATTEMPTED; otherwise the coordinator's answer applies to every partition.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.producer.transaction import AddPartitionsToTxnResponse

from strom.broker.handlers import fenced_error_for
from strom.broker.request import RequestContext
from strom.coordinator.transaction.transaction_coordinator import TRANSACTION_ABORTABLE
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
VERSIONS = (0, 5)
FIRST_BROKER_VERSION = 4  # batched transactions, VerifyOnly; sent by brokers only
_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = _TopicResult.AddPartitionsToTxnPartitionResult
_TxnResult = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
TopicPartition = tuple[str, int]


async def handle(ctx: RequestContext, request: Any) -> AddPartitionsToTxnResponse:
    if ctx.version < FIRST_BROKER_VERSION:
        requested = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
        errors = await _add(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                            request.v3_and_below_producer_epoch, requested, verify_only=False)
        return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=_by_topic(errors))
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=Errors.ClusterAuthorizationFailedError.errno,
                                          results_by_transaction=[])
    results = []
    for txn in request.transactions:
        requested = [(t.name, p) for t in txn.topics for p in t.partitions]
        errors = await _add(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, requested,
                            verify_only=txn.verify_only)
        results.append(_TxnResult(transactional_id=txn.transactional_id, topic_results=_by_topic(errors)))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0, results_by_transaction=results)


async def _add(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int,
               requested: list[TopicPartition], verify_only: bool) -> dict[TopicPartition, int]:
    """One transaction's partition errors. Clients (v0-v3) need WRITE on the transactional id and the
    topics; a broker's request (v4+) was authorized as a cluster action."""
    from_client = ctx.version < FIRST_BROKER_VERSION
    if from_client and not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(requested, Errors.TransactionalIdAuthorizationFailedError.errno)
    denied = {tp for tp in requested
              if from_client and not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, tp[0])}
    unknown = set()
    for topic, partition in requested:
        md = ctx.metadata.topic(topic)
        if md is None or partition not in md.partitions:
            unknown.add((topic, partition))
    if denied:
        return {tp: Errors.TopicAuthorizationFailedError.errno if tp in denied
                else Errors.OperationNotAttemptedError.errno for tp in requested}
    if unknown:
        return {tp: Errors.UnknownTopicOrPartitionError.errno if tp in unknown
                else Errors.OperationNotAttemptedError.errno for tp in requested}
    coordinator = ctx.services.transaction_coordinator
    if coordinator is None:
        return dict.fromkeys(requested, Errors.CoordinatorNotAvailableError.errno)
    if verify_only:
        errors = coordinator.handle_verify_partitions_in_transaction(transactional_id, producer_id, producer_epoch,
                                                                     set(requested))
        if ctx.version < 5:
            errors = {tp: Errors.InvalidTxnStateError.errno if e == TRANSACTION_ABORTABLE else e
                      for tp, e in errors.items()}
        return errors
    error = await coordinator.handle_add_partitions_to_transaction(transactional_id, producer_id, producer_epoch,
                                                                   set(requested))
    return dict.fromkeys(requested, fenced_error_for(error, ctx.version, 2))


def _by_topic(errors: dict[TopicPartition, int]) -> list[Any]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(_PartitionResult(partition_index=partition, partition_error_code=error))
    return [_TopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()]
