"""DescribeTransactions (v0): the state of transactional ids this broker coordinates."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin.transactions import DescribeTransactionsResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
VERSIONS = (0, 0)
_State = DescribeTransactionsResponse.TransactionState
_TopicData = _State.TopicData


async def handle(ctx: RequestContext, request: Any) -> DescribeTransactionsResponse:
    coordinator = ctx.services.transaction_coordinator
    states = []
    for tid in request.transactional_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            err, md = Errors.TransactionalIdAuthorizationFailedError.errno, None
        elif coordinator is None:
            err, md = Errors.CoordinatorNotAvailableError.errno, None
        else:
            err, md = coordinator.handle_describe_transaction(tid)
        if md is None:
            states.append(_State(error_code=err, transactional_id=tid, transaction_state="",
                                 transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                                 producer_epoch=-1, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(md.topic_partitions):
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
                continue  # as Kafka: partitions of topics the principal may not describe are left out
            by_topic.setdefault(topic, []).append(partition)
        states.append(_State(error_code=0, transactional_id=tid, transaction_state=md.state.kafka_name,
                             transaction_timeout_ms=md.txn_timeout_ms,
                             transaction_start_time_ms=md.txn_start_timestamp, producer_id=md.producer_id,
                             producer_epoch=md.producer_epoch,
                             topics=[_TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)
